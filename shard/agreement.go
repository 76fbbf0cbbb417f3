package shard

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"

	"dsspmesh/internal/faults"
	"dsspmesh/mesh"
)

// The agreement check's sub-machine (docs/design.md, "Replicas agree"):
// the replicas of a shard prove, while they run, that they hold the same
// state. Every replica digests its state (state.digest) each time its
// applied index crosses a multiple of Config.CheckEvery; the leader asks
// the shard's servers for their digests of one such index (OpDigest,
// checker.go) and proposes a check entry carrying them. Applying it, every
// replica settles the check when a strict majority of the voters sent one
// digest, and names the servers that sent another one or said they
// diverged; each replica also compares its own digest with the settled
// one (FSM.Apply). The leader evicts the named servers from the raft
// configuration and records the eviction with an evict entry, so that the
// evicted replica's node may rebuild it from its peers.
//
// Its section is "agree", absent until the first settled check. The
// digest of the state leaves this section out, so a check does not change
// the next check's digest except through the applied index.

// agreeHeader is an agreement entry's header: Op "check" (At, Servers,
// Voters, Digests, Own) or "evict" (ID, At).
type agreeHeader struct {
	Op string `msgpack:"op"`
	// At is the index whose state the digests are of (check), or the
	// check that named the server evicted (evict).
	At uint64 `msgpack:"at"`
	// Servers are the shard's raft servers when the leader asked, its
	// voters first (Voters of them); Digests, aligned with them, what each
	// answered: 32 bytes, or nothing (no answer, or no digest of At).
	Servers []string `msgpack:"srv,omitempty"`
	Voters  int      `msgpack:"nv,omitempty"`
	Digests [][]byte `msgpack:"d,omitempty"`
	// Own are the servers that answered that they diverged (their own
	// word: a damaged log, a failed comparison of their own).
	Own []string `msgpack:"own,omitempty"`
	ID  string   `msgpack:"id,omitempty"` // evict: the server removed
}

// maxCheckServers bounds an agreement entry's servers (a shard has its
// replication factor of them, and a few non-voters while it moves).
const maxCheckServers = 64

// maxNamed bounds the servers named and evicted the section keeps each; a
// server named beyond it is named again by a later check.
const maxNamed = 64

// checkAgreeHeader holds the rules of an agreement entry's fields.
func checkAgreeHeader(h agreeHeader) error {
	switch h.Op {
	case "check":
		if h.At == 0 {
			return fmt.Errorf("check of index 0")
		}
		if len(h.Servers) == 0 || len(h.Servers) > maxCheckServers || h.Voters < 1 || h.Voters > len(h.Servers) || len(h.Digests) != len(h.Servers) {
			return fmt.Errorf("check of %d servers (%d voters) with %d digests, at most %d servers", len(h.Servers), h.Voters, len(h.Digests), maxCheckServers)
		}
		for i, id := range h.Servers {
			if err := mesh.NodeID(id).Validate(); err != nil {
				return err
			}
			if slices.Index(h.Servers, id) != i {
				return fmt.Errorf("server %q listed twice", id)
			}
			if n := len(h.Digests[i]); n != 0 && n != sha256.Size {
				return fmt.Errorf("digest of %q is %d bytes, want %d", id, n, sha256.Size)
			}
		}
		for _, id := range h.Own {
			if !slices.Contains(h.Servers, id) {
				return fmt.Errorf("%q says it diverged but is not a server of the check", id)
			}
		}
		if len(h.Own) > len(h.Servers) || h.ID != "" {
			return fmt.Errorf("check with %d servers diverged by their word and an id %q", len(h.Own), h.ID)
		}
	case "evict":
		if err := mesh.NodeID(h.ID).Validate(); err != nil {
			return err
		}
		if len(h.Servers) != 0 || len(h.Digests) != 0 || len(h.Own) != 0 || h.Voters != 0 {
			return fmt.Errorf("evict of %q carries a check's fields", h.ID)
		}
	default:
		return fmt.Errorf("agreement op %q unknown (known: check, evict)", h.Op)
	}
	return nil
}

// agreement is the sub-machine: the last settled check, the servers named
// diverged and not yet evicted, and those evicted, each with the index of
// the check that named it.
type agreement struct {
	at      uint64 // the last settled check's index, 0 before any
	digest  []byte // the digest a majority of the voters sent for it
	named   map[mesh.NodeID]uint64
	evicted map[mesh.NodeID]uint64
}

// verdict is what applying a check settled.
type verdict struct {
	settled bool
	digest  []byte
	agreed  int // voters that sent it
	named   []mesh.NodeID
}

// apply applies a checked agreement entry; refused says why it changed
// nothing ("" when it did). A check of an index at or below the last
// settled one (a leader's resend) changes nothing; one whose voters share
// no digest by a strict majority settles nothing but names the servers
// that said they diverged.
func (a *agreement) apply(h agreeHeader) (v verdict, refused string) {
	if h.Op == "evict" {
		id := mesh.NodeID(h.ID)
		at, ok := a.named[id]
		if !ok || at != h.At {
			return v, fmt.Sprintf("%q is not named by the check of index %d", id, h.At)
		}
		delete(a.named, id)
		a.evicted = put(a.evicted, id, at)
		return v, ""
	}
	if h.At <= a.at {
		return v, fmt.Sprintf("check of index %d, at or before the last settled one (%d)", h.At, a.at)
	}
	for i := range h.Voters {
		d := h.Digests[i]
		if len(d) == 0 {
			continue
		}
		if n := agreedVoters(h, d); 2*n > h.Voters {
			v.settled, v.digest, v.agreed = true, d, n
			break
		}
	}
	for i, id := range h.Servers {
		nid := mesh.NodeID(id)
		differs := v.settled && len(h.Digests[i]) > 0 && !bytes.Equal(h.Digests[i], v.digest)
		if faults.On(faults.BlindAgreement) {
			continue // broken build only: no one is named
		}
		if differs || slices.Contains(h.Own, id) {
			if _, ok := a.named[nid]; !ok && len(a.named) < maxNamed {
				a.named = put(a.named, nid, h.At)
				v.named = append(v.named, nid)
			}
		} else if v.settled && len(h.Digests[i]) > 0 {
			delete(a.evicted, nid) // rebuilt: it agrees again
		}
	}
	if v.settled {
		a.at, a.digest = h.At, slices.Clone(v.digest)
	}
	return v, ""
}

// agreedVoters counts the voters of check h that sent digest d.
func agreedVoters(h agreeHeader, d []byte) int {
	n := 0
	for _, o := range h.Digests[:h.Voters] {
		if bytes.Equal(o, d) {
			n++
		}
	}
	return n
}

func put(m map[mesh.NodeID]uint64, id mesh.NodeID, at uint64) map[mesh.NodeID]uint64 {
	if m == nil {
		m = map[mesh.NodeID]uint64{}
	}
	if len(m) < maxNamed {
		m[id] = at
	}
	return m
}

// agreementSnapshot is the section, named and evicted sorted by id.
type agreementSnapshot struct {
	At      uint64        `msgpack:"at,omitempty"`
	Digest  []byte        `msgpack:"d,omitempty"`
	Named   []namedRecord `msgpack:"named,omitempty"`
	Evicted []namedRecord `msgpack:"evicted,omitempty"`
}

type namedRecord struct {
	ID string `msgpack:"id"`
	At uint64 `msgpack:"at"`
}

func namedRecords(m map[mesh.NodeID]uint64) []namedRecord {
	var out []namedRecord
	for _, id := range slices.Sorted(maps.Keys(m)) {
		out = append(out, namedRecord{ID: string(id), At: m[id]})
	}
	return out
}

// save writes the section, "agree", none before the first check.
func (a *agreement) save(h *header) error {
	if a.at == 0 && len(a.named) == 0 && len(a.evicted) == 0 {
		return nil
	}
	h.put("agree", &agreementSnapshot{At: a.at, Digest: a.digest, Named: namedRecords(a.named), Evicted: namedRecords(a.evicted)})
	return nil
}

// load reads the section, checked as the entries that made it were.
func (a *agreement) load(h *header, _ job) error {
	var snap *agreementSnapshot
	if _, err := h.get("agree", &snap); err != nil || snap == nil {
		return err
	}
	if n := len(snap.Digest); n != 0 && n != sha256.Size || (n == 0) != (snap.At == 0) {
		return fmt.Errorf("agreement: digest of %d bytes at index %d", n, snap.At)
	}
	if len(snap.Named) > maxNamed || len(snap.Evicted) > maxNamed {
		return fmt.Errorf("agreement: %d named and %d evicted, at most %d each", len(snap.Named), len(snap.Evicted), maxNamed)
	}
	a.at, a.digest = snap.At, slices.Clone(snap.Digest)
	for _, l := range []struct {
		recs []namedRecord
		m    *map[mesh.NodeID]uint64
	}{{snap.Named, &a.named}, {snap.Evicted, &a.evicted}} {
		for _, r := range l.recs {
			if err := mesh.NodeID(r.ID).Validate(); err != nil {
				return fmt.Errorf("agreement: %v", err)
			}
			*l.m = put(*l.m, mesh.NodeID(r.ID), r.At)
		}
	}
	return nil
}
