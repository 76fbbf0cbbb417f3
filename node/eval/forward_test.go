package eval

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dsspmesh/cudaops"
	"dsspmesh/mesh"
	"dsspmesh/modelfile"
)

// askPair is an evaluator room "n1" and a room "n2" that is not, over
// the in-memory transport and membership; n1 answers control op
// "evaluated" on ch as the node's control server does.
func askPair(t *testing.T, mlp *cudaops.Model, answer func(rm *Room, s mesh.Stream)) (evaluator, other *Room) {
	t.Helper()
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
			Evaluator: func() string { return "n1" }, Job: func() (Job, bool) { return Job{Layout: mlp.Layout()}, true },
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
	ev.evaluated.set(&Snapshot{Theta: theta, Meta: meta}, "")
	want, got := get(ev), get(other)
	if want.Code != 200 || got.Code != 200 || !bytes.Equal(want.Body.Bytes(), got.Body.Bytes()) || got.Header().Get("Content-Length") != want.Header().Get("Content-Length") {
		t.Fatalf("from memory: evaluator %d (%d bytes), other node %d (%d bytes) %q: not the same file", want.Code, want.Body.Len(), got.Code, got.Body.Len(), got.Body.String()[:min(200, got.Body.Len())])
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
	ev.evaluated.set(nil, path)
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
