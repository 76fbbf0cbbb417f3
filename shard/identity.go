package shard

import (
	"bytes"
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
// Every shard's group holds it (docs/design.md, "Revoked nodes and
// pinned keys").
//
// An entry revokes (idempotent) or pins (first pin wins), each table at
// most shardapi.MaxIdentities ids. Its section is "ids".

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

// identityState is the sub-machine of the two tables.
type identityState struct {
	revoked map[mesh.NodeID][]byte // revoked id → the operator's MAC (may be empty)
	pins    map[mesh.NodeID]ed25519.PublicKey
}

// apply applies a checked identity entry to the tables; it returns why it
// refused it, "" when it did not (the entry's applier then takes a revoked
// node's worker out of the gate).
func (s *identityState) apply(h identityHeader) (refused string) {
	id := mesh.NodeID(h.ID)
	switch h.Op {
	case "revoke":
		if mac, ok := s.revoked[id]; !ok {
			if len(s.revoked) >= shardapi.MaxIdentities {
				return fmt.Sprintf("%d ids revoked already, the most a shard keeps", len(s.revoked))
			}
			if s.revoked == nil {
				s.revoked = map[mesh.NodeID][]byte{}
			}
			s.revoked[id] = slices.Clone(h.MAC)
		} else if len(mac) == 0 && len(h.MAC) > 0 {
			s.revoked[id] = slices.Clone(h.MAC)
		}
	case "pin":
		if old, ok := s.pins[id]; ok {
			if !bytes.Equal(old, h.Key) {
				return fmt.Sprintf("node %q is pinned to another key", id)
			}
			return ""
		}
		if len(s.pins) >= shardapi.MaxIdentities {
			return fmt.Sprintf("%d keys pinned already, the most a shard keeps", len(s.pins))
		}
		if s.pins == nil {
			s.pins = map[mesh.NodeID]ed25519.PublicKey{}
		}
		s.pins[id] = slices.Clone(ed25519.PublicKey(h.Key))
	}
	return ""
}

// isRevoked reports whether w's node is revoked.
func (s *identityState) isRevoked(w clock.WorkerID) bool {
	_, ok := s.revoked[mesh.NodeID(w)]
	return ok
}

// view is a copy of the tables.
func (s *identityState) view() shardapi.Identities {
	ids := shardapi.Identities{Revoked: slices.Sorted(maps.Keys(s.revoked))}
	for id, mac := range s.revoked {
		if len(mac) > 0 {
			if ids.MACs == nil {
				ids.MACs = map[mesh.NodeID][]byte{}
			}
			ids.MACs[id] = slices.Clone(mac)
		}
	}
	if len(s.pins) > 0 {
		ids.Pins = make(map[mesh.NodeID]ed25519.PublicKey, len(s.pins))
		for id, k := range s.pins {
			ids.Pins[id] = slices.Clone(k)
		}
	}
	return ids
}

// save writes the section, "ids", none when both tables are empty.
func (s *identityState) save(h *header) error {
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
	h.put("ids", out)
	return nil
}

// load reads the section, checked as the entries that made it were.
func (s *identityState) load(h *header, _ job) error {
	var snap *identitySnapshot
	if _, err := h.get("ids", &snap); err != nil || snap == nil {
		return err
	}
	if err := s.decode(snap); err != nil {
		return fmt.Errorf("identities: %v", err)
	}
	return nil
}

func (s *identityState) decode(snap *identitySnapshot) error {
	if len(snap.Revoked) > shardapi.MaxIdentities || len(snap.Pins) > shardapi.MaxIdentities {
		return fmt.Errorf("%d revoked ids and %d pins, at most %d each", len(snap.Revoked), len(snap.Pins), shardapi.MaxIdentities)
	}
	for _, r := range snap.Revoked {
		if err := checkIdentityHeader(identityHeader{Op: "revoke", ID: r.ID, MAC: r.MAC}); err != nil {
			return err
		}
		if s.revoked == nil {
			s.revoked = map[mesh.NodeID][]byte{}
		}
		s.revoked[mesh.NodeID(r.ID)] = slices.Clone(r.MAC)
	}
	for _, p := range snap.Pins {
		if err := checkIdentityHeader(identityHeader{Op: "pin", ID: p.ID, Key: p.Key}); err != nil {
			return err
		}
		if s.pins == nil {
			s.pins = map[mesh.NodeID]ed25519.PublicKey{}
		}
		s.pins[mesh.NodeID(p.ID)] = slices.Clone(ed25519.PublicKey(p.Key))
	}
	return nil
}
