package status

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node/records"
	"dsspmesh/shardapi"
)

// History is the debug record behind --history-dir, a records.Observer: one JSON object per
// line in DIR/<node id>.jsonl, appended with one write(2) each so what was
// written survives kill -9 (it is in the page cache) and a torn record can
// only be the last line. The fault checkers of test/ read these files after
// the run. A restarted node appends to the same file after a "start" record.
//
// Records ([HistoryRecord.Kind]):
//
//	start                  the process started (Pid)
//	invoke, ok, fail       a push by this node's worker: Shard, Worker, Iter, Samples (fail: Err)
//	read                   this node's worker computes iteration Iter on parameters whose slices
//	                       have the versions Reads, one per shard (docs/design.md, "The read guarantee"),
//	                       and, under the balance layer, on its Share of the global batch
//	apply                  an entry applied by this node's replica of Shard: Index, Entry and, for
//	                       pushes, Pushes; for add/remove-worker, Worker, Clock and Released
//	                       (Suspected: a removal that was the leader's suspension); Hash
//	                       and NonFinite (parameters NaN or ±Inf) at the indices HistoryHashEvery divides
//	leader                 this node's replica of Shard became leader in Term
//	diverged               this node's replica of Shard diverged (the agreement check): Index, the
//	                       check's index or the damaged entry's, Entry "digest" or "damaged", Err why
//
// Open it with [OpenHistory] and pass it as node.Deps.Observer.
type History struct {
	mu sync.Mutex
	f  *os.File
	id mesh.NodeID
}

// HistoryHashEvery is how often (in raft indices) applied records carry the
// state hash.
const HistoryHashEvery = 16

// HistoryRecord is one line of a history file.
type HistoryRecord struct {
	Kind  string `json:"k"`
	Nanos int64  `json:"t"` // wall clock, Unix ns (one host: comparable across nodes)
	Node  string `json:"node"`
	Pid   int    `json:"pid,omitempty"`

	Shard   uint32 `json:"s"`
	Worker  string `json:"w,omitempty"`
	Iter    int64  `json:"i"`
	Samples int64  `json:"n,omitempty"`
	Err     string `json:"err,omitempty"`

	Index    uint64           `json:"x,omitempty"`
	Entry    string           `json:"e,omitempty"`
	Pushes   []HistoryPush    `json:"p,omitempty"`
	Clock    int64            `json:"c,omitempty"`
	Released []HistoryRelease `json:"rel,omitempty"`
	Hash     string           `json:"h,omitempty"`
	// NonFinite (with Hash) counts the NaN or ±Inf parameters after the entry.
	NonFinite int    `json:"nf,omitempty"`
	Term      uint64 `json:"term,omitempty"`
	// Suspected marks a remove-worker that was the leader's suspension
	// of a silent, disconnected worker (shard/suspect.go).
	Suspected bool `json:"sus,omitempty"`
	// Reads (kind read) are the versions of the parameters an iteration
	// is computed on, one per shard in shard order.
	Reads []HistoryRead `json:"rd,omitempty"`
	// Share (kind read) is the slice of the job's data order the
	// iteration reads as the worker's share of the global batch; nil
	// without the balance layer or for a batch read from a position of
	// the worker's own.
	Share *HistoryShare `json:"sh,omitempty"`
}

// HistoryShare is a worker's share of one iteration's global batch: Batch
// samples from position Pos of the data order, under allocation Version of
// global batch Global ([shardapi.Assignment]).
type HistoryShare struct {
	Version uint64 `json:"v"`
	Pos     int64  `json:"p"`
	Batch   int64  `json:"n"`
	Global  int64  `json:"g"`
}

// HistoryRead is the version of one shard's slice of the parameters a
// worker computes an iteration on: the shard's applied index and t_min when
// the slice was read ([shardapi.Version]).
type HistoryRead struct {
	Index uint64 `json:"x"`
	Min   int64  `json:"m"`
	// Unchecked: read outside the gate (see records.SliceRead); the bound does
	// not cover it.
	Unchecked bool `json:"u,omitempty"`
}

// HistoryPush is what one push of an applied entry did.
type HistoryPush struct {
	shardapi.PushID                  // keys w, i
	RecvNanos       int64            `json:"rt"`
	Applied         bool             `json:"a,omitempty"`
	Duplicate       bool             `json:"d,omitempty"`
	Released        bool             `json:"r,omitempty"` // the gate let it through at once
	Gap             int64            `json:"g,omitempty"`
	Others          []HistoryRelease `json:"o,omitempty"` // held pushes this one released
	Rejected        string           `json:"rej,omitempty"`
}

// HistoryRelease names a held push released.
type HistoryRelease struct {
	Worker string `json:"w"`
	Iter   int64  `json:"i"`
}

// OpenHistory appends to dir/<id>.jsonl, creating dir if needed, after a
// start record.
func OpenHistory(dir string, id mesh.NodeID) (*History, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, string(id)+".jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	h := &History{f: f, id: id}
	h.write(HistoryRecord{Kind: "start", Pid: os.Getpid()})
	return h, nil
}

// Close closes the file; Run calls it after the replicas have stopped.
func (h *History) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.f.Close()
}

func (h *History) write(r HistoryRecord) {
	r.Nanos, r.Node = time.Now().UnixNano(), string(h.id)
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.f.Write(append(b, '\n')) // best effort: a debug record never stops training
}

// PushSent records an invoke before the push is sent.
func (h *History) PushSent(shard uint32, w mesh.NodeID, iter, samples int64) {
	h.write(HistoryRecord{Kind: "invoke", Shard: shard, Worker: string(w), Iter: iter, Samples: samples})
}

// PushDone records ok, or fail with err, when the push returns.
func (h *History) PushDone(shard uint32, w mesh.NodeID, iter, samples int64, err error) {
	r := HistoryRecord{Kind: "ok", Shard: shard, Worker: string(w), Iter: iter, Samples: samples}
	if err != nil {
		r.Kind, r.Err = "fail", err.Error()
	}
	h.write(r)
}

// Computing records the versions of the parameters worker computes iter on
// and the share of the global batch it reads.
func (h *History) Computing(w mesh.NodeID, iter int64, reads []records.SliceRead, share *shardapi.Assignment) {
	r := HistoryRecord{Kind: "read", Worker: string(w), Iter: iter, Reads: make([]HistoryRead, len(reads))}
	for i, v := range reads {
		r.Reads[i] = HistoryRead{Index: v.Index, Min: v.Min, Unchecked: v.Unchecked}
	}
	if share != nil {
		r.Share = &HistoryShare{Version: share.Version, Pos: share.Pos, Batch: share.Batch, Global: share.Global}
	}
	h.write(r)
}

// Leading records a term this node's replica of shard leads.
func (h *History) Leading(shard uint32, term uint64) {
	h.write(HistoryRecord{Kind: "leader", Shard: shard, Term: term})
}

// StateHashEvery is HistoryHashEvery.
func (h *History) StateHashEvery() uint64 { return HistoryHashEvery }

// Applied records an applied entry. It runs under the FSM's lock
// (shard.NewFSM's contract): it only formats and writes.
func (h *History) Applied(id uint32, a shardapi.Applied) {
	if d := a.Diverged; d != nil {
		kind := "digest"
		if d.Damaged {
			kind = "damaged"
		}
		h.write(HistoryRecord{Kind: "diverged", Shard: id, Index: d.At, Entry: kind, Err: d.Reason})
	}
	if a.Kind == "" {
		return // nothing applied (a diverged replica)
	}
	r := HistoryRecord{Kind: "apply", Shard: id, Index: a.Index, Entry: a.Kind, Worker: string(a.Worker), Clock: a.StartClock, Suspected: a.Suspected}
	if a.StateHash != ([32]byte{}) {
		r.Hash = hex.EncodeToString(a.StateHash[:])
		r.NonFinite = a.NonFinite
	}
	for _, rel := range a.Released {
		r.Released = append(r.Released, HistoryRelease{Worker: string(rel.Worker), Iter: rel.Iter})
	}
	if a.Err != nil {
		r.Err = a.Err.Error()
	}
	for _, p := range a.Pushes {
		hp := HistoryPush{PushID: p.PushID, RecvNanos: p.RecvNanos, Applied: p.Applied,
			Duplicate: p.Duplicate, Released: p.Outcome.Released, Gap: p.Outcome.Gap}
		for _, o := range p.Outcome.Others {
			hp.Others = append(hp.Others, HistoryRelease{Worker: string(o.Worker), Iter: o.Iter})
		}
		if p.Err != nil {
			hp.Rejected = p.Err.Error()
		}
		r.Pushes = append(r.Pushes, hp)
	}
	h.write(r)
}
