package shard

import (
	"crypto/ed25519"
	"encoding/binary"
	"fmt"

	"dsspmesh/mesh"
	"dsspmesh/shardapi"

	"github.com/vmihailenco/msgpack/v5"

	"dsspmesh/clock"
	"dsspmesh/internal/boundedmsgpack"
)

// Entry layout in the raft log (integers big-endian):
//
//	0    u8   kind (entryInit, entryPush, entryAddWorker, entryRemoveWorker,
//	          entrySuspendWorker, entryIdentity, entryAgree, entryClaim)
//	1    u32  H: header length
//	5    H bytes: msgpack header (initHeader, the entry's own fields for a push
//	     entry: its Push headers, workerHeader, identityHeader, agreeHeader or a shardapi.Claim)
//	5+H  raw payload: the θ-slice (Init, fp32) or, for Push, the sum of the
//	     group's gradients (when the header's Summed > 0) followed by the
//	     other pushes' gradients back to back, tensors in shardapi's codec
//	     (tensor.go) in the shard's wire precision
//
// A push entry's first Summed pushes are the leader's summed group.
//
// Gradients never travel as msgpack float arrays (10–60× slower).
type entryKind uint8

const (
	entryInit entryKind = iota + 1
	entryPush
	entryAddWorker
	entryRemoveWorker
	entrySuspendWorker // workerHeader; From: the clock the leader saw (suspect.go)
	entryIdentity      // identityHeader: a revocation or a pinned key (identity.go)
	entryAgree         // agreeHeader: the agreement check's digests, or an eviction (agreement.go)
	entryClaim         // shardapi.Claim: an evaluation claim (claims.go)
)

const entryPrefix = 5

// Push is one worker's gradient for one shard and iteration as it is
// replicated: one push's header in a push entry (keys w, i, s, c, r, t, n),
// its Grad, the encoded tensor (shardapi's codec), in the entry's payload.
// On the leader it is part of a ticket (conn.go).
type Push struct {
	shardapi.PushMeta       // keys w, i, s, c, r
	RecvNanos         int64 `msgpack:"t"` // leader's receipt time, the gate's A[w][0]
	// Bytes is the length of the push's gradient in the entry's payload:
	// len(Grad), 0 for a push of a summed group (its gradient is in the
	// group's sum). encodeGroup sets it.
	Bytes int    `msgpack:"n"`
	Grad  []byte `msgpack:"-"`
}

type initHeader struct {
	Spec shardapi.Spec `msgpack:"spec"`
}

type workerHeader struct {
	Worker clock.WorkerID `msgpack:"w"`
	// From (AddWorker only) is the clock the worker has on its other
	// shards: the shard places it at no less, and advances it there if it
	// is present below.
	From int64 `msgpack:"f,omitempty"`
}

// identityHeader is an identity entry's header (identity.go): "revoke"
// or "pin" of a node id.
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

func encodeClaim(c shardapi.Claim) ([]byte, error) {
	return appendEntry(entryClaim, c, 0)
}

func encodeAgree(h agreeHeader) ([]byte, error) {
	return appendEntry(entryAgree, h, 0)
}

// encodeSuspend is a suspend entry for w, seen by the leader at clock clk.
func encodeSuspend(w clock.WorkerID, clk int64) ([]byte, error) {
	return encodeWorker(entrySuspendWorker, w, clk)
}

// entry is a decoded log entry; payload slices alias the log's bytes. Its
// exported fields are a push entry's header (keys p, sm, sb): Summed > 0
// makes Pushes[:Summed] a group whose gradients are summed in sum,
// SumBytes long (their Grad is empty).
type entry struct {
	kind     entryKind
	spec     shardapi.Spec
	theta    []byte
	Pushes   []Push `msgpack:"p"`
	Summed   int    `msgpack:"sm,omitempty"`
	SumBytes int    `msgpack:"sb,omitempty"`
	sum      []byte
	worker   clock.WorkerID
	from     int64
	ident    identityHeader
	agree    agreeHeader
	claim    shardapi.Claim
}

func appendEntry(kind entryKind, header any, payloadLen int) ([]byte, error) {
	h, err := msgpack.Marshal(header)
	if err != nil {
		return nil, fmt.Errorf("shard: encode entry header: %w", err)
	}
	b := make([]byte, entryPrefix, entryPrefix+len(h)+payloadLen)
	b[0] = byte(kind)
	binary.BigEndian.PutUint32(b[1:], uint32(len(h)))
	return append(b, h...), nil
}

func encodeInit(spec shardapi.Spec, theta []float32) ([]byte, error) {
	b, err := appendEntry(entryInit, initHeader{Spec: spec}, shardapi.FP32.Bytes(len(theta)))
	if err != nil {
		return nil, err
	}
	return shardapi.FP32.Append(b, theta), nil
}

// encodeGroup encodes one push entry: the group whose gradients are summed
// in sum (their Grad is ignored), then the pushes ps with their own.
func encodeGroup(group []Push, sum []byte, ps []Push) ([]byte, error) {
	h := &entry{Pushes: make([]Push, 0, len(group)+len(ps)), Summed: len(group)}
	n := 0
	if len(group) > 0 {
		h.SumBytes, n = len(sum), len(sum)
	}
	for _, p := range group {
		p.Bytes = 0
		h.Pushes = append(h.Pushes, p)
	}
	for _, p := range ps {
		p.Bytes = len(p.Grad)
		h.Pushes = append(h.Pushes, p)
		n += len(p.Grad)
	}
	b, err := appendEntry(entryPush, h, n)
	if err != nil {
		return nil, err
	}
	if len(group) > 0 {
		b = append(b, sum...)
	}
	for _, p := range ps {
		b = append(b, p.Grad...)
	}
	return b, nil
}

func encodeWorker(kind entryKind, w clock.WorkerID, from int64) ([]byte, error) {
	return appendEntry(kind, workerHeader{Worker: w, From: from}, 0)
}

// decodeEntry parses b; it never panics and never allocates more than the
// header's size beyond the slice of pushes, whose count the header bounds.
func decodeEntry(b []byte) (entry, error) {
	bad := func(format string, args ...any) (entry, error) {
		return entry{}, fmt.Errorf("%w: %s", shardapi.ErrBadEntry, fmt.Sprintf(format, args...))
	}
	if len(b) < entryPrefix {
		return bad("%d bytes", len(b))
	}
	e := entry{kind: entryKind(b[0])}
	hl := binary.BigEndian.Uint32(b[1:])
	if uint64(hl) > uint64(len(b)-entryPrefix) {
		return bad("header length %d exceeds entry", hl)
	}
	hb, payload := b[entryPrefix:entryPrefix+int(hl)], b[entryPrefix+int(hl):]
	switch e.kind {
	case entryInit:
		var h initHeader
		if err := boundedmsgpack.Unmarshal(hb, &h); err != nil {
			return bad("init header: %v", err)
		}
		if len(payload) != shardapi.FP32.Bytes(h.Spec.Len) {
			return bad("init payload %d bytes for %d parameters", len(payload), h.Spec.Len)
		}
		e.spec, e.theta = h.Spec, payload
	case entryPush:
		if err := boundedmsgpack.Unmarshal(hb, &e); err != nil {
			return bad("push header: %v", err)
		}
		if e.Summed < 0 || e.Summed > len(e.Pushes) || e.SumBytes < 0 || e.SumBytes > len(payload) || (e.Summed == 0) != (e.SumBytes == 0) {
			return bad("group of %d pushes with %d bytes in an entry of %d pushes and %d payload bytes", e.Summed, e.SumBytes, len(e.Pushes), len(payload))
		}
		e.sum, payload = payload[:e.SumBytes:e.SumBytes], payload[e.SumBytes:]
		for i := range e.Pushes {
			p := &e.Pushes[i]
			if i < e.Summed && p.Bytes != 0 {
				return bad("push %d of the summed group carries %d bytes of its own", i, p.Bytes)
			}
			if p.Bytes < 0 || p.Bytes > len(payload) {
				return bad("push %d: %d gradient bytes, %d left", i, p.Bytes, len(payload))
			}
			p.Grad, payload = payload[:p.Bytes:p.Bytes], payload[p.Bytes:]
		}
		if len(payload) != 0 {
			return bad("%d trailing payload bytes", len(payload))
		}
	case entryAddWorker, entryRemoveWorker, entrySuspendWorker:
		var h workerHeader
		if err := boundedmsgpack.Unmarshal(hb, &h); err != nil {
			return bad("worker header: %v", err)
		}
		if h.Worker == "" {
			return bad("empty worker id")
		}
		if h.From < 0 {
			return bad("negative start clock %d", h.From)
		}
		e.worker, e.from = h.Worker, h.From
	case entryIdentity:
		if err := boundedmsgpack.Unmarshal(hb, &e.ident); err != nil {
			return bad("identity header: %v", err)
		}
		if err := checkIdentityHeader(e.ident); err != nil {
			return bad("identity: %v", err)
		}
		if len(payload) != 0 {
			return bad("identity entry with %d payload bytes", len(payload))
		}
	case entryAgree:
		if err := boundedmsgpack.Unmarshal(hb, &e.agree); err != nil {
			return bad("agreement header: %v", err)
		}
		if err := checkAgreeHeader(e.agree); err != nil {
			return bad("agreement: %v", err)
		}
		if len(payload) != 0 {
			return bad("agreement entry with %d payload bytes", len(payload))
		}
	case entryClaim:
		if len(hb) > shardapi.MaxClaimBytes {
			return bad("claim header of %d bytes, at most %d", len(hb), shardapi.MaxClaimBytes)
		}
		if err := boundedmsgpack.Unmarshal(hb, &e.claim); err != nil {
			return bad("claim header: %v", err)
		}
		if err := e.claim.Check(); err != nil {
			return bad("%v", err)
		}
		if e.claim.Index != 0 || len(payload) != 0 {
			return bad("claim entry with index %d and %d payload bytes", e.claim.Index, len(payload))
		}
	default:
		return bad("unknown kind %d", b[0])
	}
	return e, nil
}
