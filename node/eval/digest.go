package eval

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"os"

	"dsspmesh/cudaops"
	"dsspmesh/mesh"
	"dsspmesh/modelfile"
	"dsspmesh/node/records"
)

// What is served is what was evaluated. An evaluation claim
// (records.EvalResult) carries Digest, the SHA-256 of the model file the
// evaluator scored: the bytes of modelfile.Encode of the evaluated
// snapshot, its Eval metadata included — exactly what
// GET /model.safetensors?evaluated serves, from memory or from the data
// dir's file. The evaluator signs the claim with its node key
// ([SignClaim]); a receiver takes a claim by a self-certifying id only
// with a valid signature by the key the id derives from ([VerifyClaim]).
// The evaluator answers op "evaluated" with the claim of the file it
// sends; a forwarding node takes that claim as it takes a broadcast one
// (Deps.Claim) and hashes the bytes as they pass, holding back the last
// part until the digest matches (forward.go).

// Digest is the hex SHA-256 of the model file modelfile.Encode writes
// for theta and meta: the evaluated snapshot's digest.
func Digest(layout cudaops.Layout, theta []float32, meta modelfile.Meta) (string, error) {
	h := sha256.New()
	if err := modelfile.Encode(h, layout, theta, meta); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// FileDigest is the hex SHA-256 of the file at path.
func FileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("digest of %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// claimLabel separates a claim's signature from any other use of the
// node key.
const claimLabel = "dssp evaluation claim v1\x00"

// claimMessage is what a claim's signature covers: the evaluator, the
// digest, the sequence, clock, test samples, accuracy and loss (0 when
// not finite: Diverged says so), the time and Diverged, in a fixed
// binary form (a JSON round trip turns a NaN loss into null).
func claimMessage(e records.EvalResult) []byte {
	b := []byte(claimLabel)
	b = binary.AppendUvarint(b, uint64(len(e.By)))
	b = append(b, e.By...)
	b = binary.AppendUvarint(b, uint64(len(e.Digest)))
	b = append(b, e.Digest...)
	fin := func(v float64) uint64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0
		}
		return math.Float64bits(v)
	}
	var at int64
	if !e.At.IsZero() {
		at = e.At.UnixNano()
	}
	for _, v := range []uint64{e.Seq, e.Iter, uint64(int64(e.Samples)), fin(e.Accuracy), fin(e.Loss), uint64(at)} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	if e.Diverged {
		return append(b, 1)
	}
	return append(b, 0)
}

// SignClaim sets e's Key and Sig: key's signature of the claim. A nil
// key signs nothing (an in-memory test's node without one).
func SignClaim(key ed25519.PrivateKey, e *records.EvalResult) {
	if key == nil {
		return
	}
	e.Key = key.Public().(ed25519.PublicKey)
	e.Sig = ed25519.Sign(key, claimMessage(*e))
}

// ErrUnsigned: a claim whose signature is missing or wrong.
var ErrUnsigned = errors.New("evaluation claim not signed by its evaluator's key")

// VerifyClaim checks e's signature: a claim by a self-certifying id must
// carry the key that id derives from and that key's signature; a claim
// by a legacy id is checked against the key it carries when it carries
// a signature (the id does not name a key to check it against).
func VerifyClaim(e records.EvalResult) error {
	id := mesh.NodeID(e.By)
	if !id.SelfCertifying() && len(e.Sig) == 0 {
		return nil
	}
	if len(e.Key) != ed25519.PublicKeySize || len(e.Sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w: claim by %q carries a key of %d bytes and a signature of %d", ErrUnsigned, e.By, len(e.Key), len(e.Sig))
	}
	if id.SelfCertifying() {
		if got := mesh.DeriveID(ed25519.PublicKey(e.Key)); got != id {
			return fmt.Errorf("%w: claim by %q carries the key of %q", ErrUnsigned, e.By, got)
		}
	}
	if !ed25519.Verify(ed25519.PublicKey(e.Key), claimMessage(e), e.Sig) {
		return fmt.Errorf("%w: claim by %q, digest %s: the signature does not verify", ErrUnsigned, e.By, e.Digest)
	}
	return nil
}

// digestCheck hashes bytes as they pass to w, holding back the last part
// written until [digestCheck.finish] compares the digest: a forwarding
// node completes a response only with bytes that match the claim.
type digestCheck struct {
	w    io.Writer
	h    hash.Hash
	held []byte
}

func newDigestCheck(w io.Writer) *digestCheck { return &digestCheck{w: w, h: sha256.New()} }

// part takes the next part: the one held before goes to w, this one is
// held. b is copied.
func (d *digestCheck) part(b []byte) error {
	d.h.Write(b)
	if len(d.held) > 0 {
		if _, err := d.w.Write(d.held); err != nil {
			return err
		}
	}
	d.held = append(d.held[:0], b...)
	return nil
}

// errDigestMismatch: the bytes of the evaluated model are not the ones
// its claim names.
var errDigestMismatch = errors.New("digest mismatch")

// finish writes the part held if the bytes' digest is want, else returns
// an error wrapping errDigestMismatch naming both digests and writes
// nothing more.
func (d *digestCheck) finish(want string) error {
	got := hex.EncodeToString(d.h.Sum(nil))
	if got != want {
		return fmt.Errorf("%w: the evaluated model's bytes have digest %s, its claim says %s: refused", errDigestMismatch, got, want)
	}
	_, err := d.w.Write(d.held)
	return err
}
