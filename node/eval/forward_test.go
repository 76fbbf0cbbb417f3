package eval

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/mesh"
	"dsspmesh/modelfile"
	"dsspmesh/node/records"
	"dsspmesh/shardapi"
)

// askPair is an evaluator room "n1" and a room "n2" that is not, over
// the in-memory transport and membership; n1 answers control op
// "evaluated" on ch as the node's control server does.
func askPair(t *testing.T, mlp *cudaops.Model, answer func(rm *Room, s mesh.Stream)) (evaluator, other *Room) {
	t.Helper()
	book := &memBook{}
	ch := mesh.Channel{Kind: mesh.KindRPC, Shard: 1 << 30}
	nw, cl := mesh.NewInmemNetwork(), mesh.NewInmemCluster()
	rooms := map[mesh.NodeID]*Room{}
	var trs []*mesh.InmemTransport
	for _, id := range []mesh.NodeID{"n1", "n2"} {
		tr, err := nw.NewTransport(id, "q"+string(id), mesh.DefaultFrameLimits())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		trs = append(trs, tr)
		mem, err := cl.NewMember(mesh.Meta{ID: id, QUICAddr: tr.Addr(), Trains: true, Proto: mesh.ProtocolVersion}, "g"+string(id))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mem.Join(context.Background(), []string{"gn1"}); err != nil {
			t.Fatal(err)
		}
		rooms[id] = New(Deps{ID: id, Transport: tr, Members: mem, Logger: slog.New(slog.DiscardHandler),
			Evaluator: func() string { return "n1" }, Book: book, Now: time.Now, Job: func() (Job, bool) { return Job{Layout: mlp.Layout()}, true },
			AskControl: func(ctx context.Context, m mesh.Member, op string) (mesh.Stream, error) {
				s, err := tr.Dial(ctx, m.ID, m.QUICAddr, ch)
				if err != nil {
					return nil, err
				}
				return s, s.SendFrame(struct {
					Op string `msgpack:"op"`
				}{op}, nil)
			}}, nil)
	}
	ln, err := trs[0].Listen(ch)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			s, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			var req struct {
				Op string `msgpack:"op"`
			}
			if _, err := s.RecvFrame(&req); err != nil || req.Op != "evaluated" {
				s.Close()
				continue
			}
			answer(rooms["n1"], s)
			s.Close()
		}
	}()
	return rooms["n1"], rooms["n2"]
}

// memBook is shard 0's claims in memory: the newest claim of each (By,
// Seq), oldest first (shard/claims.go holds the rules).
type memBook struct {
	mu   sync.Mutex
	recs []shardapi.Claim
}

func (b *memBook) Claim(_ context.Context, c shardapi.Claim) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.recs = slices.DeleteFunc(b.recs, func(r shardapi.Claim) bool { return r.By == c.By && r.Seq == c.Seq })
	c.Index = uint64(len(b.recs) + 1)
	b.recs = append(b.recs, c)
	return nil
}

func (b *memBook) Claims(context.Context) ([]shardapi.Claim, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.recs), nil
}

// serve makes rm serve snap (or the file at path) as its evaluated
// model with claim, recorded first as the evaluation loop does.
func serve(t *testing.T, rm *Room, snap *Snapshot, path string, claim *records.EvalResult) {
	t.Helper()
	if claim != nil && claim.Digest != "" {
		if err := rm.d.Book.Claim(context.Background(), claimOf(*claim)); err != nil {
			t.Fatal(err)
		}
	}
	rm.evaluated.set(snap, path, claim)
}

// TestEvaluatedFromAnyNode: GET /model.safetensors?evaluated on a node
// that is not the evaluator answers the evaluator's evaluated model, the
// same bytes, fetched over the control channel in parts: from memory, from
// its data-dir file (several parts), and the evaluator's 404 when it holds
// none; an announced size beyond the job's model file is refused.
func TestEvaluatedFromAnyNode(t *testing.T) {
	mlp, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	ev, other := askPair(t, mlp, func(rm *Room, s mesh.Stream) { rm.SendEvaluated(s) })
	get := func(rm *Room) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		rm.ServeModel(rec, httptest.NewRequest("GET", "/model.safetensors?evaluated", nil))
		return rec
	}
	if rec := get(other); rec.Code != 404 || !strings.Contains(rec.Body.String(), "evaluator n1 holds no evaluated model") {
		t.Fatalf("before any evaluation: %d %q, want the evaluator's 404", rec.Code, rec.Body.String())
	}

	theta := mlp.Init(3)
	meta := modelfile.Meta{Model: "mlp", Clock: 4, Eval: &modelfile.Eval{Accuracy: 0.5, Samples: 10}}
	digest, err := Digest(mlp.Layout(), theta, meta)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ev, &Snapshot{Theta: theta, Meta: meta}, "", &records.EvalResult{By: "n1", Digest: digest})
	want, got := get(ev), get(other)
	if want.Code != 200 || got.Code != 200 || !bytes.Equal(want.Body.Bytes(), got.Body.Bytes()) || got.Header().Get("Content-Length") != want.Header().Get("Content-Length") {
		t.Fatalf("from memory: evaluator %d (%d bytes), other node %d (%d bytes) %q: not the same file", want.Code, want.Body.Len(), got.Code, got.Body.Len(), got.Body.String()[:min(200, got.Body.Len())])
	}
	if h := got.Header().Get(records.DigestHeader); h != digest || want.Header().Get(records.DigestHeader) != digest {
		t.Fatalf("digest headers: evaluator %q, other node %q, want %q", want.Header().Get(records.DigestHeader), h, digest)
	}
	if _, err := modelfile.Decode(got.Body.Bytes()); err != nil {
		t.Fatal(err)
	}
	t.Logf("from memory: %d bytes, the same on both nodes", got.Body.Len())

	// A file of 2.5 parts: the evaluator's data-dir copy, sent as is.
	path := filepath.Join(t.TempDir(), EvaluatedFile)
	file := make([]byte, 5*evaluatedChunk/2)
	for i := range file {
		file[i] = byte(rand.Uint32())
	}
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	digest, err = FileDigest(path)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ev, nil, path, &records.EvalResult{By: "n1", Digest: digest})
	if got := get(other); got.Code != 200 || !bytes.Equal(got.Body.Bytes(), file) {
		t.Fatalf("from the file: %d, %d bytes, want the file's %d", got.Code, got.Body.Len(), len(file))
	}

	_, liar := askPair(t, mlp, func(rm *Room, s mesh.Stream) {
		s.SendFrame(evaluatedHead{Size: 1 << 40}, nil)
	})
	if got := get(liar); got.Code != 502 || !strings.Contains(got.Body.String(), "at most") {
		t.Fatalf("an evaluator announcing 1 TiB: %d %q, want a 502", got.Code, got.Body.String())
	}
}

// TestForwardRefusesForgedEvaluated: a node forwarding ?evaluated
// completes the response only when the bytes' SHA-256 is the digest of
// the evaluator's claim. An evaluator whose file does not match its
// claim (from memory, and from its data-dir file of several parts) gets
// the response cut before its last part, the node's ERROR naming both
// digests; a claim by another node, one with no digest and none at all
// are refused with a 502 before any byte.
func TestForwardRefusesForgedEvaluated(t *testing.T) {
	mlp, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	ev, other := askPair(t, mlp, func(rm *Room, s mesh.Stream) { rm.SendEvaluated(s) })
	other.d.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	srv := httptest.NewServer(http.HandlerFunc(other.ServeModel))
	t.Cleanup(srv.Close)
	get := func() (int, []byte, error) {
		resp, err := http.Get(srv.URL + "/model.safetensors?evaluated")
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}

	theta := mlp.Init(3)
	meta := modelfile.Meta{Model: "mlp", Clock: 4, Eval: &modelfile.Eval{Accuracy: 0.5, Samples: 10}}
	honest, err := Digest(mlp.Layout(), theta, meta)
	if err != nil {
		t.Fatal(err)
	}
	forged := slices.Clone(theta)
	forged[0] += 1
	serve(t, ev, &Snapshot{Theta: forged, Meta: meta}, "", &records.EvalResult{By: "n1", Digest: honest})
	code, b, err := get()
	if err == nil {
		t.Fatalf("a file not matching its claim, from memory: %d, %d bytes, no error; want the response cut", code, len(b))
	}
	served, _ := Digest(mlp.Layout(), forged, meta)
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), served) || !strings.Contains(logs.String(), honest) {
		t.Fatalf("the forwarding node's log names not both digests (%s, %s):\n%s", served, honest, logs.String())
	}
	t.Logf("from memory: %d of the file's bytes reached the client, then %v", len(b), err)

	path := filepath.Join(t.TempDir(), EvaluatedFile)
	file := make([]byte, 5*evaluatedChunk/2)
	for i := range file {
		file[i] = byte(rand.Uint32())
	}
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	fileDigest, _ := FileDigest(path)
	serve(t, ev, nil, path, &records.EvalResult{By: "n1", Digest: honest})
	if code, b, err := get(); err == nil || len(b) > 2*evaluatedChunk {
		t.Fatalf("a file of 2.5 parts not matching its claim: %d, %d bytes, %v; want at most 2 parts and an error", code, len(b), err)
	}
	serve(t, ev, nil, path, &records.EvalResult{By: "n1", Digest: fileDigest})
	if code, b, err := get(); err != nil || code != 200 || !bytes.Equal(b, file) {
		t.Fatalf("the file matching its claim: %d, %d bytes, %v", code, len(b), err)
	}

	// A claim whose bytes match, signed or not, is still refused when shard
	// 0 recorded none for its sequence, or another digest for it: the
	// evaluator cannot serve a file its recorded claim does not name.
	ev.evaluated.set(nil, path, &records.EvalResult{By: "n1", Seq: 7, Digest: fileDigest})
	if code, b, err := get(); err != nil || code != 502 || !strings.Contains(string(b), "shard 0 recorded no claim of n1 at sequence 7") {
		t.Fatalf("an unrecorded claim: %d %q %v, want a 502 naming it", code, b, err)
	}
	if err := ev.d.Book.Claim(context.Background(), claimOf(records.EvalResult{By: "n1", Seq: 8, Digest: honest})); err != nil {
		t.Fatal(err)
	}
	ev.evaluated.set(nil, path, &records.EvalResult{By: "n1", Seq: 8, Digest: fileDigest})
	if code, b, err := get(); err != nil || code != 502 || !strings.Contains(string(b), "shard 0 recorded its claim of sequence 8 with digest "+honest) {
		t.Fatalf("a claim recorded with another digest: %d %q %v, want a 502 naming the recorded digest", code, b, err)
	}

	for _, c := range []struct {
		claim *records.EvalResult
		want  string
	}{
		{&records.EvalResult{By: "n3", Digest: fileDigest}, "not the evaluator"},
		{&records.EvalResult{By: "n1"}, "no SHA-256 digest"},
		{nil, "no evaluation claim"},
	} {
		serve(t, ev, nil, path, c.claim)
		if code, b, err := get(); err != nil || code != 502 || !strings.Contains(string(b), c.want) {
			t.Fatalf("claim %+v: %d %q %v, want a 502 saying %q", c.claim, code, b, err, c.want)
		}
	}
}
