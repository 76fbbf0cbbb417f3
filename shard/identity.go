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
	// MAC (revoke) is the operator's authentication of the revocation
	// (mesh.MeshKey.OperatorMAC), kept so that a node can pass the
	// revocation on to one that checks it itself; the shard does not
	// check it (it holds no key).
	MAC []byte `msgpack:"mac,omitempty"`
}

// maxMAC bounds a revocation's MAC (an HMAC-SHA256 is 32 bytes).
const maxMAC = 64

// identitySnapshot is the identity state in a snapshot's header, sorted
// by id so equal states give equal bytes; absent when both are empty, so
// a shard that never saw one hashes as before.
type identitySnapshot struct {
	Revoked []revokedRecord `msgpack:"rev,omitempty"`
	Pins    []pinRecord     `msgpack:"pins,omitempty"`
}

type revokedRecord struct {
	ID  string `msgpack:"id"`
	MAC []byte `msgpack:"mac,omitempty"`
}

type pinRecord struct {
	ID  string `msgpack:"id"`
	Key []byte `msgpack:"k"`
}

// identityState is the FSM's; guarded by FSM.mu.
type identityState struct {
	revoked map[mesh.NodeID][]byte // revoked id → the operator's MAC (may be empty)
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
		if len(h.Key) != 0 || len(h.MAC) > maxMAC {
			return fmt.Errorf("revoke of %q carries a key, or a MAC of %d bytes (at most %d)", h.ID, len(h.MAC), maxMAC)
		}
	case "pin":
		if mesh.NodeID(h.ID).SelfCertifying() {
			return fmt.Errorf("pin of %q: a self-certifying id is bound to its key already", h.ID)
		}
		if len(h.Key) != ed25519.PublicKeySize || len(h.MAC) != 0 {
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
		if mac, ok := f.ids.revoked[id]; !ok {
			if len(f.ids.revoked) >= shardapi.MaxIdentities {
				refuse(fmt.Sprintf("%d ids revoked already, the most a shard keeps", len(f.ids.revoked)))
				return
			}
			if f.ids.revoked == nil {
				f.ids.revoked = map[mesh.NodeID][]byte{}
			}
			f.ids.revoked[id] = slices.Clone(h.MAC)
		} else if len(mac) == 0 && len(h.MAC) > 0 {
			f.ids.revoked[id] = slices.Clone(h.MAC)
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
func (f *FSM) revokedLocked(w clock.WorkerID) bool {
	_, ok := f.ids.revoked[mesh.NodeID(w)]
	return ok
}

// IsRevoked reports whether node id is revoked in this shard.
func (f *FSM) IsRevoked(id mesh.NodeID) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.revokedLocked(clock.WorkerID(id))
}

// Identities returns a copy of the shard's identity state.
func (f *FSM) Identities() shardapi.Identities {
	f.mu.RLock()
	defer f.mu.RUnlock()
	ids := shardapi.Identities{Revoked: slices.Sorted(maps.Keys(f.ids.revoked))}
	for id, mac := range f.ids.revoked {
		if len(mac) > 0 {
			if ids.MACs == nil {
				ids.MACs = map[mesh.NodeID][]byte{}
			}
			ids.MACs[id] = slices.Clone(mac)
		}
	}
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
		out.Revoked = append(out.Revoked, revokedRecord{ID: string(id), MAC: s.revoked[id]})
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
	for _, r := range snap.Revoked {
		if err := checkIdentityHeader(identityHeader{Op: "revoke", ID: r.ID, MAC: r.MAC}); err != nil {
			return s, err
		}
		if s.revoked == nil {
			s.revoked = map[mesh.NodeID][]byte{}
		}
		s.revoked[mesh.NodeID(r.ID)] = slices.Clone(r.MAC)
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
// add-workers. mac, the operator's authentication of it, is kept with it
// (unchecked here). Idempotent.
func (r *Replica) Revoke(ctx context.Context, id mesh.NodeID, mac []byte) error {
	return r.proposeIdentity(ctx, identityHeader{Op: "revoke", ID: string(id), MAC: mac})
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
	return r.proposeChecked(ctx, b)
}

// Identities is the shard's identity state as this replica applied it.
func (r *Replica) Identities() shardapi.Identities { return r.fsm.Identities() }
