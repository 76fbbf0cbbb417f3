package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Sentinel errors of a node id and of a member's metadata (errors.go has the others).
var ErrBadNodeID, ErrBadMeta = errors.New("mesh: bad node id"), errors.New("mesh: bad member metadata")

// NodeID names one node for its whole life, across restarts. It is the
// memberlist node name, the common name of the node's certificate and the
// raft server address.
type NodeID string

// maxNodeIDLen keeps ids short enough for certificates, metadata and logs.
const maxNodeIDLen = 64

// Validate reports whether id is 1–64 characters of [A-Za-z0-9._-].
func (id NodeID) Validate() error {
	if len(id) == 0 || len(id) > maxNodeIDLen {
		return fmt.Errorf("%w: %q must be 1 to %d characters", ErrBadNodeID, string(id), maxNodeIDLen)
	}
	for _, c := range []byte(id) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%w: %q has character %q (allowed: letters, digits, '.', '_', '-')", ErrBadNodeID, string(id), c)
		}
	}
	return nil
}

// ProtocolVersion is the wire protocol this binary speaks; members gossip it
// so that incompatible nodes can be told apart.
const ProtocolVersion uint16 = 1

// MaxMetaSize is memberlist's limit on node metadata.
const MaxMetaSize = 512

// Meta is what every member announces about itself.
type Meta struct {
	ID       NodeID
	QUICAddr string // host:port of the node's QUIC socket
	Trains   bool   // whether the node runs a worker
	Backend  string // compute backend, e.g. "cpu" or "cuda"
	Proto    uint16 // ProtocolVersion of the binary
	// Leaving is set by Membership.Leave just before the node departs, so
	// that peers can tell a graceful leave from a failure.
	Leaving bool
	// Joining: the node is a member but has not yet adopted the mesh's job
	// spec and checked its own identity and data dir (a node starts so and
	// clears it then): placement leaves it out (PlacedIDs), so a joiner
	// that is refused, for another job's spec or a wrong identity, never
	// becomes a shard's replica and moves no leadership.
	Joining bool
}

// metaVersion is the first byte of encoded metadata; bump on layout change.
const metaVersion = 1

// Encoded metadata layout (all integers big-endian):
//
//	0     u8   metaVersion
//	1     u16  Proto
//	3     u8   flags (bit 0: Trains, bit 1: Leaving, bit 2: Joining)
//	4     u8   len(ID),       then ID bytes
//	.     u8   len(QUICAddr), then QUICAddr bytes
//	.     u8   len(Backend),  then Backend bytes
//
// Strings are at most 255 bytes each, so the whole is far below MaxMetaSize.

// Encode returns the compact wire form of m.
func (m Meta) Encode() ([]byte, error) {
	for _, s := range []struct{ name, v string }{{"id", string(m.ID)}, {"quic address", m.QUICAddr}, {"backend", m.Backend}} {
		if len(s.v) > 255 {
			return nil, fmt.Errorf("%w: %s is %d bytes, at most 255", ErrBadMeta, s.name, len(s.v))
		}
	}
	b := make([]byte, 0, 7+len(m.ID)+len(m.QUICAddr)+len(m.Backend))
	b = append(b, metaVersion)
	b = binary.BigEndian.AppendUint16(b, m.Proto)
	var flags byte
	if m.Trains {
		flags |= 1
	}
	if m.Leaving {
		flags |= 2
	}
	if m.Joining {
		flags |= 4
	}
	b = append(b, flags)
	for _, s := range []string{string(m.ID), m.QUICAddr, m.Backend} {
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	return b, nil
}

// DecodeMeta parses metadata received from a peer. It never panics; any
// malformed input gives an error wrapping ErrBadMeta.
func DecodeMeta(b []byte) (Meta, error) {
	if len(b) > MaxMetaSize {
		return Meta{}, fmt.Errorf("%w: %d bytes, at most %d", ErrBadMeta, len(b), MaxMetaSize)
	}
	if len(b) < 4 {
		return Meta{}, fmt.Errorf("%w: %d bytes, too short", ErrBadMeta, len(b))
	}
	if b[0] != metaVersion {
		return Meta{}, fmt.Errorf("%w: layout version %d, want %d", ErrBadMeta, b[0], metaVersion)
	}
	m := Meta{Proto: binary.BigEndian.Uint16(b[1:3]), Trains: b[3]&1 != 0, Leaving: b[3]&2 != 0, Joining: b[3]&4 != 0}
	rest := b[4:]
	var strs [3]string
	for i := range strs {
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			return Meta{}, fmt.Errorf("%w: string %d truncated", ErrBadMeta, i)
		}
		n := int(rest[0])
		strs[i] = string(rest[1 : 1+n])
		rest = rest[1+n:]
	}
	if len(rest) != 0 {
		return Meta{}, fmt.Errorf("%w: %d trailing bytes", ErrBadMeta, len(rest))
	}
	m.ID, m.QUICAddr, m.Backend = NodeID(strs[0]), strs[1], strs[2]
	if err := m.ID.Validate(); err != nil {
		return Meta{}, fmt.Errorf("%w: %v", ErrBadMeta, err)
	}
	return m, nil
}
