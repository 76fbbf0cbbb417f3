package eval

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"dsspmesh/node/records"
	"dsspmesh/shardapi"
)

// Room reads model snapshots, serves them, keeps the one last evaluated
// and, on the evaluating node, evaluates and checkpoints.
type Room struct {
	d         Deps
	reader    *modelReader
	evaluated evaluatedModel // the snapshot this node last evaluated
	ckpt      *Checkpointer  // nil unless --checkpoint-dir
	export    ExportLimits   // d.Export with defaults
	// The downloads running and the fresh snapshots they hold (download.go).
	downloads        downloads
	freshSnaps       freshSnaps
	refusedDownloads atomic.Uint64
	audit            audits // audit.go
}

// New is the room; ckpt may be nil.
func New(d Deps, ckpt *Checkpointer) *Room {
	lim := d.Export.withDefaults()
	return &Room{d: d, reader: &modelReader{turn: make(chan struct{}, 1)}, ckpt: ckpt, export: lim,
		audit: audits{queue: make(chan records.EvalResult, 1)}}
}

// Latest is the newest checkpoint written, "" if none.
func (r *Room) Latest() string {
	if r.ckpt == nil {
		return ""
	}
	p, _ := r.ckpt.dir.Latest()
	return p
}

// Read reads every shard's slice from its leader (each a linearizable
// read, shardapi.Client.ReadInto), concurrently up to readBytesInFlight of
// replies, each decoded straight into the flat vector: into's memory when
// it has the model's length, else new memory.
func (r *Room) Read(ctx context.Context, source string, into []float32) (*Snapshot, error) {
	snap, _, err := r.ReadVersions(ctx, source, into)
	return snap, err
}

// ReadVersions is Read also giving the version of each shard's
// slice it read whole, nil for a shard whose read failed (its part of into
// may be half written), whether or not the read as a whole succeeded.
func (r *Room) ReadVersions(ctx context.Context, source string, into []float32) (*Snapshot, []*shardapi.Version, error) {
	job, ok := r.d.Job()
	if !ok {
		return nil, nil, errors.New("the node has not joined the mesh's shards yet")
	}
	return r.reader.read(ctx, r.d, job, source, into)
}

// RefusedDownloads counts the model downloads answered 503 at once
// because their client, or the node, ran as many as ExportLimits allows.
func (r *Room) RefusedDownloads() uint64 { return r.refusedDownloads.Load() }

// downloads counts the model responses running, per client address.
type downloads struct {
	mu       sync.Mutex
	byClient map[string]int
	total    int
}

// freshSnaps are the snapshots read for downloads and held by their
// responses (at most ExportLimits.Concurrent).
type freshSnaps struct {
	mu      sync.Mutex
	held    []*freshSnap
	reading chan struct{} // closed when the read in flight ends; nil if none
}

// audits is the room's audit state (audit.go): the claim waiting (one),
// the counts, the last result and the newest disagreement.
type audits struct {
	queue chan records.EvalResult

	mu        sync.Mutex
	counts    map[string]uint64 // by result: agree, disagree, failed
	last      *records.AuditResult
	alarm     string    // the newest disagreement, said
	alarmedAt time.Time // when
}

type freshSnap struct {
	snap *Snapshot
	at   time.Time
	refs int
}
