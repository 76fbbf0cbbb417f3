package shard

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"maps"
	"slices"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// The identity state a shard replicates (shardapi.Identities): the node
// ids an operator revoked and the key pinned for each legacy node id.
//
// Every shard's group holds it, not one group for the mesh: a revocation
// must take the node's worker out of every shard's gate (or its silence
// holds the others) and refuse its pushes on every replica of every shard
// alike, which only an entry in each shard's own log orders against that
// shard's pushes; and a node learns the state from whichever replicas it
// hosts, with no group whose loss of quorum stops revocations everywhere.
//
// Entry (kind entryIdentity): an identityHeader. "revoke" adds ID to the
// revoked ids (idempotent) and removes its worker from the gate; "pin"
// records Key for the legacy ID unless one is pinned (first pin wins; a
// pin of another key is refused and changes nothing). Each table holds at
// most shardapi.MaxIdentities ids; beyond, the entry is refused.
type identityHeader struct {
	Op  string `msgpack:"op"` // "revoke" or "pin"
	ID  string `msgpack:"id"`
	Key []byte `msgpack:"k,omitempty"`
}

// identitySnapshot is the identity state in a snapshot's header, sorted
// by id so equal states give equal bytes; absent when both are empty, so
// a shard that never saw one hashes as before.
type identitySnapshot struct {
	Revoked []string    `msgpack:"rev,omitempty"`
	Pins    []pinRecord `msgpack:"pins,omitempty"`
}

type pinRecord struct {
	ID  string `msgpack:"id"`
	Key []byte `msgpack:"k"`
}

// identityState is the FSM's; guarded by FSM.mu.
type identityState struct {
	revoked map[mesh.NodeID]bool
	pins    map[mesh.NodeID]ed25519.PublicKey
}

func encodeIdentity(h identityHeader) ([]byte, error) {
	return appendEntry(entryIdentity, h, 0)
}

// checkIdentityHeader holds the rules of an identity entry's fields.
func checkIdentityHeader(h identityHeader) error {
	if err := mesh.NodeID(h.ID).Validate(); err != nil {
		return err
	}
	switch h.Op {
	case "revoke":
		if len(h.Key) != 0 {
			return fmt.Errorf("revoke of %q carries a key", h.ID)
		}
	case "pin":
		if mesh.NodeID(h.ID).SelfCertifying() {
			return fmt.Errorf("pin of %q: a self-certifying id is bound to its key already", h.ID)
		}
		if len(h.Key) != ed25519.PublicKeySize {
			return fmt.Errorf("pin of %q: key of %d bytes, want %d", h.ID, len(h.Key), ed25519.PublicKeySize)
		}
	default:
		return fmt.Errorf("identity op %q unknown (known: revoke, pin)", h.Op)
	}
	return nil
}

// applyIdentity applies a checked identity entry.
func (f *FSM) applyIdentity(h identityHeader, out *shardapi.Applied) {
	id := mesh.NodeID(h.ID)
	out.Kind, out.Worker = h.Op, clock.WorkerID(id)
	refuse := func(detail string) {
		f.rejected[shardapi.ReasonBadRequest] = satAddU(f.rejected[shardapi.ReasonBadRequest], 1)
		out.Err = &shardapi.RejectError{Op: h.Op, Shard: f.shard, Worker: clock.WorkerID(id), Reason: shardapi.ReasonBadRequest, Detail: detail}
	}
	switch h.Op {
	case "revoke":
		if !f.ids.revoked[id] {
			if len(f.ids.revoked) >= shardapi.MaxIdentities {
				refuse(fmt.Sprintf("%d ids revoked already, the most a shard keeps", len(f.ids.revoked)))
				return
			}
			if f.ids.revoked == nil {
				f.ids.revoked = map[mesh.NodeID]bool{}
			}
			f.ids.revoked[id] = true
		}
		if f.initialized {
			if _, ok := f.gate.Clock(clock.WorkerID(id)); ok {
				out.Released, out.Err = f.removeWorker(clock.WorkerID(id))
			}
		}
	case "pin":
		if old, ok := f.ids.pins[id]; ok {
			if !bytes.Equal(old, h.Key) {
				refuse(fmt.Sprintf("node %q is pinned to another key", id))
			}
			return
		}
		if len(f.ids.pins) >= shardapi.MaxIdentities {
			refuse(fmt.Sprintf("%d keys pinned already, the most a shard keeps", len(f.ids.pins)))
			return
		}
		if f.ids.pins == nil {
			f.ids.pins = map[mesh.NodeID]ed25519.PublicKey{}
		}
		f.ids.pins[id] = slices.Clone(ed25519.PublicKey(h.Key))
	}
}

// revokedLocked reports whether w's node is revoked.
func (f *FSM) revokedLocked(w clock.WorkerID) bool { return f.ids.revoked[mesh.NodeID(w)] }

// IsRevoked reports whether node id is revoked in this shard.
func (f *FSM) IsRevoked(id mesh.NodeID) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.ids.revoked[id]
}

// Identities returns a copy of the shard's identity state.
func (f *FSM) Identities() shardapi.Identities {
	f.mu.RLock()
	defer f.mu.RUnlock()
	ids := shardapi.Identities{Revoked: slices.Sorted(maps.Keys(f.ids.revoked))}
	if len(f.ids.pins) > 0 {
		ids.Pins = make(map[mesh.NodeID]ed25519.PublicKey, len(f.ids.pins))
		for id, k := range f.ids.pins {
			ids.Pins[id] = slices.Clone(k)
		}
	}
	return ids
}

// encode is the snapshot form; nil when empty.
func (s *identityState) encode() *identitySnapshot {
	if len(s.revoked) == 0 && len(s.pins) == 0 {
		return nil
	}
	out := &identitySnapshot{}
	for _, id := range slices.Sorted(maps.Keys(s.revoked)) {
		out.Revoked = append(out.Revoked, string(id))
	}
	for _, id := range slices.Sorted(maps.Keys(s.pins)) {
		out.Pins = append(out.Pins, pinRecord{ID: string(id), Key: s.pins[id]})
	}
	return out
}

// decodeIdentities checks a snapshot's identity state as the entries that
// made it would have been checked.
func decodeIdentities(snap *identitySnapshot) (identityState, error) {
	var s identityState
	if snap == nil {
		return s, nil
	}
	if len(snap.Revoked) > shardapi.MaxIdentities || len(snap.Pins) > shardapi.MaxIdentities {
		return s, fmt.Errorf("%d revoked ids and %d pins, at most %d each", len(snap.Revoked), len(snap.Pins), shardapi.MaxIdentities)
	}
	for _, id := range snap.Revoked {
		if err := checkIdentityHeader(identityHeader{Op: "revoke", ID: id}); err != nil {
			return s, err
		}
		if s.revoked == nil {
			s.revoked = map[mesh.NodeID]bool{}
		}
		s.revoked[mesh.NodeID(id)] = true
	}
	for _, p := range snap.Pins {
		if err := checkIdentityHeader(identityHeader{Op: "pin", ID: p.ID, Key: p.Key}); err != nil {
			return s, err
		}
		if s.pins == nil {
			s.pins = map[mesh.NodeID]ed25519.PublicKey{}
		}
		s.pins[mesh.NodeID(p.ID)] = slices.Clone(ed25519.PublicKey(p.Key))
	}
	return s, nil
}

// Revoke revokes node id in this shard (leader only): its worker leaves
// the gate (its held push is answered with a rejection, workers it held
// back are released) and every replica refuses its later pushes and
// add-workers. Idempotent.
func (r *Replica) Revoke(ctx context.Context, id mesh.NodeID) error {
	return r.proposeIdentity(ctx, identityHeader{Op: "revoke", ID: string(id)})
}

// Pin records key as legacy id's key in this shard (leader only) unless
// one is pinned; a pin of another key is a *shardapi.RejectError.
func (r *Replica) Pin(ctx context.Context, id mesh.NodeID, key ed25519.PublicKey) error {
	return r.proposeIdentity(ctx, identityHeader{Op: "pin", ID: string(id), Key: key})
}

func (r *Replica) proposeIdentity(ctx context.Context, h identityHeader) error {
	if err := checkIdentityHeader(h); err != nil {
		return fmt.Errorf("shard %d: %w", r.cfg.Shard, err)
	}
	b, err := encodeIdentity(h)
	if err != nil {
		return err
	}
	a, err := r.propose(ctx, b)
	if err != nil {
		return err
	}
	return a.Err
}

// Identities is the shard's identity state as this replica applied it.
func (r *Replica) Identities() shardapi.Identities { return r.fsm.Identities() }
