package shardapi

import (
	"encoding/hex"
	"fmt"
	"math"

	"dsspmesh/mesh"
)

// Claim is an evaluation claim as shard 0 records it (shard/claims.go;
// docs/design.md, "The evaluator"): what the evaluation lease's holder
// says it scored, and the SHA-256 of the model file it scored. Shard 0
// records a claim only from the worker its lease names at the entry's
// index, and one digest per (By, Seq): an evaluator cannot claim two
// files for one evaluation, and a node forwarding the evaluated model
// checks the bytes against the digest recorded here, not only against
// what the evaluator sends with them.
type Claim struct {
	By       string  `msgpack:"by"`
	Seq      uint64  `msgpack:"seq"` // the samples applied when read, summed over the shards
	Iter     uint64  `msgpack:"it"`  // the snapshot's mesh clock
	Accuracy float64 `msgpack:"acc"`
	Loss     float64 `msgpack:"loss"`
	Samples  int64   `msgpack:"n"`
	Digest   string  `msgpack:"d"` // hex SHA-256 of the evaluated model file
	// Index is the raft index of the entry that recorded it (set by the
	// shard; 0 in a request).
	Index uint64 `msgpack:"x,omitempty"`
}

// NotHolder is in the detail of a claim refused because its maker does
// not hold the evaluation lease at the entry's index (the lease moved on).
const NotHolder = "does not hold the evaluation lease"

// MaxClaims is how many claims shard 0 keeps, the newest.
const MaxClaims = 16

// MaxClaimBytes bounds a claim's encoding in a request or an entry.
const MaxClaimBytes = 512

// Check holds the rules of a claim's fields.
func (c Claim) Check() error {
	if err := mesh.NodeID(c.By).Validate(); err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	if d, err := hex.DecodeString(c.Digest); err != nil || len(d) != 32 || hex.EncodeToString(d) != c.Digest {
		return fmt.Errorf("claim of %q: digest %q is not a lowercase hex SHA-256", c.By, c.Digest)
	}
	if c.Seq > math.MaxInt64 || c.Iter > math.MaxInt64 || c.Samples < 0 {
		return fmt.Errorf("claim of %q: sequence %d, iteration %d or samples %d out of range", c.By, c.Seq, c.Iter, c.Samples)
	}
	return nil
}
