package trust

import (
	"crypto/ed25519"
	"fmt"
	"maps"
	"slices"
	"sync"

	"dsspmesh/mesh"
	"dsspmesh/node/datadir"
	"dsspmesh/shardapi"
)

// identities is this node's view of other nodes' identities: the ids
// revoked and the key pinned for each legacy id (one not derived from its
// key, mesh.NodeID.SelfCertifying). It is the union of what the shards'
// replicas here replicated (shardapi.Identities, merged by sync) and what
// the data dir recorded (identities.json, with the pins an earlier build
// made on first use), so a restart refuses a revoked node before its
// replicas replay their logs. A legacy id pinned nowhere here is refused:
// no pin is made on first use any more.
//
// check runs inside every TLS handshake of the node's transport (and
// admit inside memberlist's alive handling): both take only mu, briefly.
// Safe for concurrent use.
type identities struct {
	self mesh.NodeID
	// syncMu serialises the node's syncs (trust.go: the ticker's and a
	// revocation's), so one writes identities.json at a time; taken
	// before mu, never inside it.
	syncMu sync.Mutex

	mu      sync.RWMutex
	revoked map[mesh.NodeID]bool
	// macs are the operator's MACs of the revocations that came with one:
	// what this node passes on to others (gossip), each checking it.
	macs map[mesh.NodeID][]byte
	pins map[mesh.NodeID]ed25519.PublicKey
	// conflicts are legacy ids different shards pinned to different keys:
	// two parties held a certificate for the id; refused until revoked
	// and rejoined under a self-certifying id.
	conflicts map[mesh.NodeID]bool
	// unreplicated is this node's own pin (a legacy self) until it is
	// seen in a shard's state: sync proposes it on the shards it leads.
	unreplicated map[mesh.NodeID]ed25519.PublicKey
	dirty        bool // not yet persisted
	// refused are the (id, MAC) revocations passed on by peers whose MAC
	// was not the operator's (refusedBefore); at most 1024, then cleared.
	refused map[string]bool
}

// newIdentities starts from the data dir's record; a legacy self pins its
// own key, so no one else's key is taken for it here.
func newIdentities(self mesh.NodeID, selfKey ed25519.PublicKey, saved datadir.Identities) *identities {
	b := &identities{self: self, revoked: map[mesh.NodeID]bool{}, macs: map[mesh.NodeID][]byte{}, pins: map[mesh.NodeID]ed25519.PublicKey{},
		conflicts: map[mesh.NodeID]bool{}, unreplicated: map[mesh.NodeID]ed25519.PublicKey{}}
	for _, id := range saved.Revoked {
		b.revoked[id] = true
	}
	maps.Copy(b.macs, saved.MACs)
	maps.Copy(b.pins, saved.Pins)
	if !self.SelfCertifying() && len(selfKey) == ed25519.PublicKeySize {
		if old, ok := b.pins[self]; !ok || !old.Equal(selfKey) {
			b.pins[self], b.dirty = selfKey, true
		}
		b.unreplicated[self] = selfKey
	}
	return b
}

// check is the node's mesh.PeerCheck.
func (b *identities) check(id mesh.NodeID, key ed25519.PublicKey) error {
	b.mu.RLock()
	revoked, conflict := b.revoked[id], b.conflicts[id]
	pin, pinned := b.pins[id]
	b.mu.RUnlock()
	switch {
	case revoked:
		return fmt.Errorf("node %q is revoked", id)
	case id.SelfCertifying():
		return nil // the mesh checked that the id derives from key
	case conflict:
		return fmt.Errorf("node %q (a legacy id) was pinned to two keys by different shards; refused until revoked", id)
	case !pinned:
		return unpinnedLegacy(id)
	case !pin.Equal(key):
		// Another lifelong key, or a certificate of an earlier build (a
		// key of one start, nil here): a certificate minted for the id.
		return fmt.Errorf("node %q (a legacy id) is pinned to another key: a certificate minted for its id", id)
	}
	return nil
}

// unpinnedLegacy is the refusal of a legacy id this node's view pins
// nowhere (neither its record nor its replicas' state): a new member,
// which must use a self-certifying id. A legacy id is not derived from
// its key, so whoever holds the mesh key could take one (one that sorts
// first, say) and no node could tell it from a real one.
func unpinnedLegacy(id mesh.NodeID) error {
	return fmt.Errorf("node %q has a legacy id (not derived from its key) that this mesh never pinned: a new member must use a self-certifying id (start it with a fresh --data-dir)", id)
}

// admit is memberlist's verdict: the alive messages of a revoked node,
// and of a legacy id pinned nowhere in the view, are ignored.
func (b *identities) admit(id mesh.NodeID) error {
	b.mu.RLock()
	revoked := b.revoked[id]
	_, pinned := b.pins[id]
	b.mu.RUnlock()
	switch {
	case revoked:
		return fmt.Errorf("node %q is revoked", id)
	case !id.SelfCertifying() && !pinned:
		return unpinnedLegacy(id)
	}
	return nil
}

func (b *identities) isRevoked(id mesh.NodeID) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.revoked[id]
}

// revoke records id as revoked here (before the shards have it) with the
// operator's mac, checked by the caller; it reports whether it was new,
// and an error when shardapi.MaxIdentities ids are revoked already (the
// most every shard keeps: revocations are bounded, so an operator's key
// revoking made-up ids cannot grow the state without end).
func (b *identities) revoke(id mesh.NodeID, mac []byte) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.revoked[id] {
		if len(b.macs[id]) == 0 && len(mac) > 0 {
			b.macs[id], b.dirty = slices.Clone(mac), true
		}
		return false, nil
	}
	if len(b.revoked) >= shardapi.MaxIdentities {
		return false, fmt.Errorf("revoke %s: %d node ids are revoked already, the most a mesh keeps (shardapi.MaxIdentities)", id, len(b.revoked))
	}
	if len(mac) > 0 {
		b.macs[id] = slices.Clone(mac)
	}
	b.revoked[id], b.dirty = true, true
	return true, nil
}

// refusedBefore reports whether a revocation of id with mac was refused
// before (its MAC is not the operator's), recording it if not: a peer
// that keeps passing on a bogus one is logged once, not every second.
func (b *identities) refusedBefore(id mesh.NodeID, mac []byte) bool {
	k := string(id) + "\x00" + string(mac)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.refused[k] {
		return true
	}
	if b.refused == nil || len(b.refused) >= 1024 {
		b.refused = map[string]bool{}
	}
	b.refused[k] = true
	return false
}

// revocations are the revocations this node can pass on: each with the
// operator's MAC.
func (b *identities) revocations() map[mesh.NodeID][]byte {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return maps.Clone(b.macs)
}

// merge takes in the shards' state: new revocations (returned, to cut
// their connections), the replicated pins (which replace a different key
// this node pinned first: the mesh's pin is the one every node agrees
// on; returned too) and the conflicting pins.
func (b *identities) merge(rep shardapi.Identities, conflicts []mesh.NodeID) (newlyRevoked, repinned []mesh.NodeID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range rep.Revoked {
		if !b.revoked[id] {
			b.revoked[id], b.dirty = true, true
			newlyRevoked = append(newlyRevoked, id)
		}
		if mac := rep.MACs[id]; len(mac) > 0 && len(b.macs[id]) == 0 {
			b.macs[id], b.dirty = slices.Clone(mac), true
		}
	}
	for id, k := range rep.Pins {
		if old, ok := b.pins[id]; !ok || !old.Equal(k) {
			if ok {
				repinned = append(repinned, id)
			}
			b.pins[id], b.dirty = slices.Clone(k), true
		}
		delete(b.unreplicated, id)
	}
	for _, id := range conflicts {
		delete(b.unreplicated, id) // refused by the shards: proposing it again changes nothing
		if !b.conflicts[id] {
			b.conflicts[id] = true
			repinned = append(repinned, id)
		}
	}
	return newlyRevoked, repinned
}

// toReplicate returns the pins this node made that no shard here holds.
func (b *identities) toReplicate() map[mesh.NodeID]ed25519.PublicKey {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return maps.Clone(b.unreplicated)
}

// record returns the state to persist, and whether it changed since the
// last record (which it then takes as persisted).
func (b *identities) record() (datadir.Identities, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.dirty {
		return datadir.Identities{}, false
	}
	b.dirty = false
	return datadir.Identities{Revoked: slices.Sorted(maps.Keys(b.revoked)), MACs: maps.Clone(b.macs), Pins: maps.Clone(b.pins)}, true
}

// markDirty makes the next record write again (a write that failed).
func (b *identities) markDirty() { b.mu.Lock(); b.dirty = true; b.mu.Unlock() }

// status is what /status shows: the revoked ids, the legacy ids pinned,
// the conflicting ones.
func (b *identities) status() (revoked []string, pinned int, conflicts []string) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, id := range slices.Sorted(maps.Keys(b.revoked)) {
		revoked = append(revoked, string(id))
	}
	for _, id := range slices.Sorted(maps.Keys(b.conflicts)) {
		conflicts = append(conflicts, string(id))
	}
	return revoked, len(b.pins), conflicts
}

// admittedMembers is the node's membership view without the nodes admit
// refuses (revoked, or a legacy id pinned nowhere): placement, the
// evaluator, shard candidates and /status never count one, even while
// memberlist still lists it (a node revoked after it joined stays until
// it fails or leaves; its alive messages are ignored).
type admittedMembers struct {
	mesh.Membership
	ids *identities
}

func (m admittedMembers) Members() []mesh.Member {
	all := m.Membership.Members()
	return slices.DeleteFunc(all, func(x mesh.Member) bool { return m.ids.admit(x.ID) != nil })
}
