package eval

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"log/slog"
	"math"
	"testing"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/mesh"
	"dsspmesh/modelfile"
	"dsspmesh/node/records"
)

// TestDigestIsTheServedBytes: the claim's digest is the SHA-256 of the
// very bytes an export writes (modelfile.Encode, the Eval metadata
// included), the same at every encoding, and changes with one parameter
// or the recorded accuracy.
func TestDigestIsTheServedBytes(t *testing.T) {
	mlp, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	theta := mlp.Init(1)
	meta := modelfile.Meta{Model: "mlp", Source: "evaluation", Clock: 7, TakenAt: time.Unix(5, 0),
		Eval: &modelfile.Eval{Accuracy: 0.9, Loss: 0.3, Samples: 100}, Shards: []modelfile.ShardClock{{Shard: 0, Min: 7}}}
	d1, err := Digest(mlp.Layout(), theta, meta)
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	modelfile.Encode(&a, mlp.Layout(), theta, meta)
	modelfile.Encode(&b, mlp.Layout(), theta, meta)
	d2, _ := Digest(mlp.Layout(), theta, meta)
	if !bytes.Equal(a.Bytes(), b.Bytes()) || d1 != d2 {
		t.Fatalf("two encodings of one snapshot differ: %d and %d bytes, digests %s %s", a.Len(), b.Len(), d1, d2)
	}
	check := newDigestCheck(&bytes.Buffer{})
	check.part(a.Bytes())
	if err := check.finish(d1); err != nil {
		t.Fatalf("the encoded bytes against their digest: %v", err)
	}
	theta[3] = math.Nextafter32(theta[3], 1)
	d3, _ := Digest(mlp.Layout(), theta, meta)
	meta.Eval.Accuracy = 0.99
	d4, _ := Digest(mlp.Layout(), theta, meta)
	if d3 == d1 || d4 == d3 {
		t.Fatalf("one ulp of one parameter (%s) or the accuracy (%s) does not change the digest %s", d3, d4, d1)
	}
}

// TestClaimSignature: a claim signed with the key its self-certifying id
// derives from verifies; changing its digest, accuracy or Seq, dropping
// the signature, or signing with another key does not, and Claims.Receive
// drops such a claim from the evaluator itself.
func TestClaimSignature(t *testing.T) {
	key, err := mesh.GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	id := mesh.DeriveID(key.Public().(ed25519.PublicKey))
	good := records.EvalResult{By: string(id), Digest: "ab12", Seq: 9, Accuracy: 0.9, Loss: math.NaN(), Diverged: true, At: time.Unix(3, 4)}
	SignClaim(key, &good)
	if err := VerifyClaim(good); err != nil {
		t.Fatalf("a signed claim: %v", err)
	}
	other, _ := mesh.GenerateNodeKey()
	for name, bad := range map[string]func(e *records.EvalResult){
		"digest":    func(e *records.EvalResult) { e.Digest = "ab13" },
		"accuracy":  func(e *records.EvalResult) { e.Accuracy = 0.99 },
		"seq":       func(e *records.EvalResult) { e.Seq++ },
		"unsigned":  func(e *records.EvalResult) { e.Key, e.Sig = nil, nil },
		"other key": func(e *records.EvalResult) { SignClaim(other, e) },
	} {
		e := good
		bad(&e)
		if err := VerifyClaim(e); !errors.Is(err, ErrUnsigned) {
			t.Errorf("%s changed: %v, want ErrUnsigned", name, err)
		}
	}
	if err := VerifyClaim(finiteClaim(good)); err != nil {
		t.Fatalf("the claim as sent (loss NaN as 0): %v", err)
	}
	c := NewClaims(ClaimDeps{Evaluator: func() string { return string(id) }, Logger: slog.New(slog.DiscardHandler), Now: time.Now})
	e := good
	e.Diverged, e.Loss = false, 0.3
	if err := c.Receive(t.Context(), id, e); err == nil {
		t.Fatal("Receive took a claim whose signature does not cover it")
	}
	SignClaim(key, &e)
	if err := c.Receive(t.Context(), id, e); err != nil {
		t.Fatalf("Receive of a signed claim: %v", err)
	}
	if held, _ := c.Held(); held == nil || held.Digest != "ab12" {
		t.Fatalf("held %+v", held)
	}
}
