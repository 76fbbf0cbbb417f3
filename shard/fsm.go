package shard

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"dsspmesh/clock"
	"dsspmesh/internal/faults"
	"dsspmesh/mesh"
	"dsspmesh/raftstore"
	"dsspmesh/shardapi"
)

// FSM is the replicated state of one shard: a router over its
// sub-machines (state.go). See the package doc for the contract; raft
// drives Apply, Snapshot and Restore, everything else reads.
type FSM struct {
	observer func(shardapi.Applied)
	notify   chan struct{}
	// hashEvery > 0 puts the state hash in every Applied whose index is a
	// multiple of it (Deps.HashEvery); set before raft starts.
	hashEvery uint64

	mu sync.RWMutex
	st state
	// snaps counts the snapshots taken: a snapshot freezes θ and the
	// velocity under its number (params.frozen) until it has written them.
	snaps uint64
	// gen counts Restores, so that a cached encoding is never taken for
	// the state of a snapshot restored at the same index; restored is
	// the last one's size in bytes and when it was restored, for the
	// status (ReplicaStatus.Restored; neither is state).
	gen        uint64
	restored   int64
	restoredAt time.Time
	// enc caches θ encoded for replies (replyFor); not state.
	enc   replyCache
	stale staleCache // the faultinject build's broken reply cache

	// chk is the agreement check's replica-local part (localcheck.go),
	// written under mu.
	chk localCheck

	// raftApplied is raft's applied index (raft.Raft.AppliedIndex: every
	// entry, not the commands alone), read by Restore; set under mu once
	// the replica's raft is built (NewRaft restores its newest snapshot
	// before), nil in tests without raft.
	raftApplied func() uint64
}

// NewFSM returns an uninitialised FSM for shard. observer, if not nil, is
// called at the end of every Apply under the FSM's lock: it must not block
// or call back into the FSM.
func NewFSM(shard uint32, observer func(shardapi.Applied)) *FSM {
	return &FSM{observer: observer, notify: make(chan struct{}, 1), chk: localCheck{ready: make(chan struct{}, 1)}, st: state{shard: shard}}
}

// applied returns the channel signalled (coalesced) after every Apply and
// Restore.
func (f *FSM) applied() <-chan struct{} { return f.notify }

func (f *FSM) signal() {
	select {
	case f.notify <- struct{}{}:
	default:
	}
}

// Apply applies one committed entry; the response is an Applied. It
// decodes the entry, hands it to its kind's applier (apply.go), hashes
// the state when asked and shows the observer what it did.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.signal()
	if f.chk.diverged != nil {
		// A diverged replica applies nothing more: it is rebuilt.
		return shardapi.Applied{Index: l.Index, Err: fmt.Errorf("shard %d: %w: %s", f.st.shard, ErrDiverged, f.chk.diverged.Reason)}
	}
	prev := uint64(f.st.index)
	f.st.index = appliedIndex(l.Index)
	out := shardapi.Applied{Index: l.Index}
	e, err := decodeEntry(l.Data)
	if err != nil {
		// Only a leader of another build could have written it; every
		// replica skips it alike.
		out.Kind, out.Err = "rejected", err
		f.st.tally.refuse(shardapi.ReasonBadRequest)
	} else {
		appliers[e.kind](&f.st, e, &out)
	}
	if err == nil && e.kind == entryAgree && out.Err == nil {
		f.chk.compare(&f.st, e.agree, &out)
	}
	f.chk.digestAt(&f.st, prev, l.Index)
	if f.observer != nil {
		if f.hashEvery > 0 && l.Index%f.hashEvery == 0 {
			if b, err := f.st.encode(); err == nil {
				out.StateHash = sha256.Sum256(b)
			}
			out.NonFinite = countNonFinite(f.st.params.theta) + countNonFinite(f.st.params.velocity)
		}
		f.observer(out)
	}
	return out
}

// ErrDiverged: the replica found its state is not its shard's (the
// agreement check) and applies nothing more.
var ErrDiverged = errors.New("replica diverged")

// Damaged is told by the log store that this replica's copy of the entry
// at index is damaged (raftstore's checksum): the replica diverges at
// once, before it applies it or serves it to a follower.
func (f *FSM) Damaged(index uint64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.chk.diverged != nil {
		return
	}
	d := shardapi.Divergence{At: index, Damaged: true, Reason: fmt.Sprintf("its log's copy of the entry at index %d is damaged: %v", index, err)}
	f.chk.diverge(d, nil)
	if f.observer != nil {
		f.observer(shardapi.Applied{Index: index, Diverged: &d})
	}
}

// Claims are the evaluation claims this replica applied, oldest first
// (claims.go).
func (f *FSM) Claims() []shardapi.Claim {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.claims.list()
}

// check is the agreement check's state on this replica, copied at once
// under the read lock.
func (f *FSM) check() checkView {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.chk.view(&f.st.agree)
}

// read runs fn on the state under the FSM's read lock (the leader's reads).
func (f *FSM) read(fn func(st *state)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(&f.st)
}

// replyFor decides the reply to (w, iter) from the applied state, and when
// it is OK returns the state's version and, if slice, the parameters
// encoded in the shard's wire precision, read under the same lock
// (docs/design.md, "The read guarantee"). The encoding is made once per
// applied index and shared by every reply at that index: the caller must
// not modify it.
func (f *FSM) replyFor(w clock.WorkerID, iter int64, slice bool) (replyState, []byte, shardapi.Version) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	st := &f.st
	if !st.job.initialized {
		return replyPending, nil, shardapi.Version{}
	}
	if rs := st.gate.reply(w, iter); rs != replyOK {
		return rs, nil, shardapi.Version{}
	}
	ver := shardapi.Version{Index: uint64(st.index), Min: st.gate.g.Min(), Samples: st.tally.samples}
	switch {
	case !slice:
		return replyOK, nil, ver
	case faults.On(faults.StaleRead):
		b, v := f.stale.slice(st.params.theta, st.job.spec.Precision.Params(), ver) // broken build only
		return replyOK, b, v
	}
	return replyOK, f.enc.get(st.params.theta, st.job.spec.Precision.Params(), ver.Index, f.gen), ver
}

// replyCache is θ encoded for replies at one applied index.
type replyCache struct {
	mu         sync.Mutex
	b          []byte
	index, gen uint64
}

// get returns theta in prec as of index, encoding it on the first call
// after an Apply or Restore. Under the FSM's read lock θ does not change;
// mu orders the readers that build it.
func (c *replyCache) get(theta []float32, prec shardapi.Precision, index, gen uint64) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.b == nil || c.index != index || c.gen != gen {
		// A new slice every time: replies still being sent hold the old.
		c.b, c.index, c.gen = prec.Append(nil, theta), index, gen
	}
	return c.b
}

// Params copies the parameter slice into dst (grown if short) and returns it.
func (f *FSM) Params(dst []float32) []float32 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return append(dst[:0], f.st.params.theta...)
}

// Status returns the current view.
func (f *FSM) Status() shardapi.Status {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := shardapi.Status{Shard: f.st.shard, Initialized: f.st.job.initialized, Spec: f.st.job.spec, AppliedIndex: uint64(f.st.index)}
	f.st.tally.report(&s)
	f.st.gate.report(&s)
	return s
}

// IsRevoked reports whether node id is revoked in this shard.
func (f *FSM) IsRevoked(id mesh.NodeID) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.ids.isRevoked(clock.WorkerID(id))
}

// Identities returns a copy of the shard's identity state.
func (f *FSM) Identities() shardapi.Identities {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.ids.view()
}

// StateHash is SHA-256 of the state's snapshot encoding: equal on replicas
// that applied the same entries.
func (f *FSM) StateHash() [32]byte {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b, err := f.st.encode()
	if err != nil {
		return [32]byte{}
	}
	return sha256.Sum256(b)
}

// AppliedIndex is the raft index of the last applied entry.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return uint64(f.st.index)
}

// pushLimits is what the leader checks a push against before proposing
// it: the shard's spec (its length 0 before Init).
func (f *FSM) pushLimits() shardapi.Spec {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.job.spec
}

// stateBytes is the size of the parameters and optimizer state a
// snapshot holds (fp32), 0 before Init.
func (f *FSM) stateBytes() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.params.bytes()
}

// Snapshot captures the state; raft persists it on another goroutine.
// It encodes the header and takes θ and the velocity as they are, copying
// nothing: until Persist has written them an Apply steps a copy of them
// instead (params.step), a copy snapshotMem bounds (its wait is taken
// before the FSM's lock).
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	n := f.stateBytes()
	snapshotMem.acquire(n)
	f.mu.Lock()
	defer f.mu.Unlock()
	head, err := f.st.head()
	if err != nil {
		snapshotMem.release(n)
		return nil, err
	}
	f.snaps++
	f.st.params.frozen = f.snaps
	return &fsmSnapshot{f: f, id: f.snaps, head: head, theta: f.st.params.theta, velocity: f.st.params.velocity, held: n}, nil
}

// Restore replaces the state with a snapshot's. It reads no more than
// the snapshot's own header says it holds, plus one byte to refuse a longer
// one (see readState).
//
// It refuses a snapshot older than the state it would replace
// (raftstore.ErrOlderSnapshot). Raft's installSnapshot (hashicorp/raft v1.7.2) takes
// whatever snapshot a leader sends: a leader whose nextIndex for this
// follower fell behind it (a resent batch of entries this replica had
// already compacted is answered as a failure) sends its newest snapshot,
// which can be older than what this replica applied. Restored, it moved
// raft's applied index back below entries this replica's own snapshots had
// compacted away, and the next commit panicked the process reading them
// ("log not found"; docs/reliability.md bug 30). Refused, raft answers the
// leader with the error, keeps its applied index, and the leader sends a
// newer snapshot or the entries this replica lacks.
//
// The state knows the index of its last command, not raft's index of the
// snapshot (a no-op, barrier or configuration entry may follow the
// command). So a snapshot whose last command is this replica's own is
// refused too when raft applied entries past that command here: it may
// end before them. The cost: a replica lacking only such entries, which
// its leader compacted, waits for the leader's next snapshot with a newer
// command (one push away while the mesh trains).
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	cr := &restoreCounter{r: rc}
	st, err := readState(cr)
	if err != nil {
		return fmt.Errorf("shard %d: read snapshot: %w", f.st.shard, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	applied := uint64(f.st.index)
	if f.raftApplied != nil {
		applied = max(applied, f.raftApplied())
	}
	if st.index < f.st.index || st.index == f.st.index && applied > uint64(f.st.index) {
		return fmt.Errorf("shard %d: %w: its state ends at index %d, this replica applied up to %d", f.st.shard, raftstore.ErrOlderSnapshot, st.index, applied)
	}
	st.shard = f.st.shard
	f.st = *st // a snapshot being persisted keeps the arrays it took
	f.gen++
	f.restored, f.restoredAt = cr.n, time.Now()
	f.chk.digests = digestRing{} // digests of the state it replaced
	f.signal()
	return nil
}

// restoreCounter counts the bytes a Restore reads through it.
type restoreCounter struct {
	r io.Reader
	n int64
}

func (c *restoreCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// restores is how many snapshots the FSM restored and the last one's
// bytes.
func (f *FSM) restores() shardapi.Restores {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return shardapi.Restores{Count: f.gen, Bytes: f.restored, At: f.restoredAt}
}

type fsmSnapshot struct {
	f               *FSM
	id              uint64
	head            []byte
	theta, velocity []float32 // the FSM's own until unfreeze, read only
	held            int64     // of snapshotMem, given back by Release
	once            sync.Once
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	_, err := sink.Write(s.head)
	if err == nil {
		err = writeBody(sink, s.theta, s.velocity)
	}
	s.unfreeze() // the bytes are in the sink; its fsync needs no state
	if err != nil {
		return errors.Join(err, sink.Cancel())
	}
	return sink.Close()
}

// unfreeze lets the FSM step θ in place again, unless an Apply has
// already stepped a copy (or a Restore replaced it, or a later snapshot
// froze it).
func (s *fsmSnapshot) unfreeze() {
	s.f.mu.Lock()
	if s.f.st.params.frozen == s.id {
		s.f.st.params.frozen = 0
	}
	s.f.mu.Unlock()
}

// Release unfreezes the FSM and gives the bytes back to snapshotMem (raft
// calls it once the snapshot is persisted or abandoned).
func (s *fsmSnapshot) Release() {
	s.once.Do(func() {
		s.unfreeze()
		s.theta, s.velocity, s.head = nil, nil, nil
		snapshotMem.release(s.held)
	})
}

// The faultinject build's broken reply cache (faults.StaleRead): each FSM
// keeps one copy of its parameters and serves it, with its version, until
// the state is staleReadEntries applied entries past it. Normal builds never
// call it (faults.On is the constant false).

const staleReadEntries = 256

type staleCache struct {
	mu    sync.Mutex
	theta []float32
	v     shardapi.Version
}

// slice returns the cached copy, encoded in prec, and its version,
// refreshing the copy from theta (at version cur) first when it is
// staleReadEntries behind.
func (c *staleCache) slice(theta []float32, prec shardapi.Precision, cur shardapi.Version) ([]byte, shardapi.Version) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.theta == nil || len(c.theta) != len(theta) || cur.Index >= c.v.Index+staleReadEntries || cur.Index < c.v.Index {
		c.theta, c.v = append([]float32(nil), theta...), cur
	}
	return prec.Append(nil, c.theta), c.v
}
