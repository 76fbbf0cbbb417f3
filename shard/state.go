package shard

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"

	"dsspmesh/clock"
	"dsspmesh/shardapi"
)

// state is a shard's replicated state: its sub-machines, each with its own
// apply and snapshot section, called in order by the entry kinds'
// appliers (apply.go, pushapply.go). doc.go says how to add one.
type state struct {
	shard  uint32 // for errors; not replicated state
	job    job
	tally  tally
	gate   gateState
	index  appliedIndex
	bal    balanceState // shard 0 with the balance layer only
	params params
	ids    identityState
	agree  agreement
	claims claimBook // shard 0's evaluation claims
}

// A section is one sub-machine's part of a snapshot (snapshot.go). save
// writes the header keys it owns, none while the machine is empty; load
// reads them back, checked as the entries that made them were, given the
// job they belong to.
type section interface {
	save(h *header) error
	load(h *header, j job) error
}

// sections are the state's, in the order their keys are written: the
// header of a snapshot of version 2 is init, spec (the job), samples,
// pushes, dups, rejected (the tally), gate, index, bal, arr (the
// parameters' outer count), ids, agree, claims. A new section comes last.
func (st *state) sections() []section {
	return []section{&st.tally, &st.gate, &st.index, &st.bal, &st.params, &st.ids, &st.agree, &st.claims}
}

// A follower is a sub-machine that follows the gate: the pushes it
// applies, the workers that join or leave it, the end of each entry (tick).
type follower interface {
	observe(p Push, g *clock.Gate)
	join(w clock.WorkerID, g *clock.Gate)
	leaving(w clock.WorkerID, g *clock.Gate)
	leave(w clock.WorkerID, g *clock.Gate)
	tick(g *clock.Gate)
}

// followers are the sub-machines that follow the gate now.
func (st *state) followers() []follower {
	if st.bal.on() {
		return []follower{&st.bal}
	}
	return nil
}

// appliedIndex is the raft index of the last applied entry; its section
// is "index".
type appliedIndex uint64

func (i *appliedIndex) save(h *header) error { h.put("index", uint64(*i)); return nil }

func (i *appliedIndex) load(h *header, _ job) error {
	_, err := h.get("index", (*uint64)(i))
	return err
}

// head encodes the snapshot's prefix and header: everything before θ.
func (st *state) head() ([]byte, error) { return st.headOf(st.sections()) }

// headOf is head with the sections secs only.
func (st *state) headOf(secs []section) ([]byte, error) {
	var h header
	if err := st.job.save(&h); err != nil {
		return nil, err
	}
	for _, s := range secs {
		if err := s.save(&h); err != nil {
			return nil, fmt.Errorf("shard %d: %w", st.shard, err)
		}
	}
	hb, err := h.marshal()
	if err != nil {
		return nil, fmt.Errorf("shard %d: encode snapshot header: %w", st.shard, err)
	}
	b := make([]byte, 0, len(snapshotMagic)+5+len(hb))
	b = append(b, snapshotMagic...)
	b = append(b, snapshotVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(hb)))
	return append(b, hb...), nil
}

// encode is the whole snapshot in one slice (for the state hash).
func (st *state) encode() ([]byte, error) {
	head, err := st.head()
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(head)+int(st.params.bytes()))
	b = append(b, head...)
	b = shardapi.FP32.Append(b, st.params.theta)
	return shardapi.FP32.Append(b, st.params.velocity), nil
}

// readState reads one snapshot from r and checks it: the header (bounded,
// snapshot.go), each section against the job, then the body, decoded
// chunk by chunk straight into θ and the velocity, allocated once the
// body's first chunk has arrived, and refused if r has even one byte more.
// So a restore holds the state and one chunk, never a second copy of the
// state in bytes (25 MB for a large shard), and a reader that never ends,
// or a header that lies about its size, costs at most the largest valid
// state (bounded by shardapi.MaxShardLen) plus a chunk.
func readState(r io.Reader) (*state, error) {
	bad := func(format string, args ...any) (*state, error) {
		return nil, fmt.Errorf("%w: %s", shardapi.ErrBadSnapshot, fmt.Sprintf(format, args...))
	}
	version, h, err := readHeader(r)
	if err != nil {
		return bad("%v", err)
	}
	st := &state{}
	if err := st.job.load(h); err != nil {
		return bad("header: %v", err)
	}
	if st.job.initialized {
		if err := st.job.spec.Validate(); err != nil {
			return bad("%v", err)
		}
	}
	for _, s := range st.sections() {
		if err := s.load(h, st.job); err != nil {
			return bad("%v", err)
		}
	}
	if err := h.rest(); err != nil {
		return bad("%v", err)
	}
	if !st.job.initialized {
		if err := readEnd(r); err != nil {
			return bad("%v", err)
		}
		return st, nil
	}
	if err := st.params.loadBody(r, version, st.gate.g.Len()); err != nil {
		return bad("%v", err)
	}
	return st, nil
}

// digest is the agreement check's digest of the state: SHA-256 of its
// snapshot encoding without the agreement's own section (equal on replicas
// that applied the same entries, as StateHash is).
func (st *state) digest() ([sha256.Size]byte, error) {
	var out [sha256.Size]byte
	var secs []section
	for _, s := range st.sections() {
		if s != section(&st.agree) {
			secs = append(secs, s)
		}
	}
	head, err := st.headOf(secs)
	if err != nil {
		return out, err
	}
	h := sha256.New()
	h.Write(head)
	writeBody(h, st.params.theta, st.params.velocity) // nothing before Init
	h.Sum(out[:0])
	return out, nil
}
