package node_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"dsspmesh/mesh"
	"dsspmesh/node"
	"dsspmesh/node/eval"
	"dsspmesh/node/records"
	"dsspmesh/node/status"
)

// controlFrame is the control channel's frame header (node/control.go).
type controlFrame struct {
	Op   string `msgpack:"op"`
	Spec []byte `msgpack:"spec,omitempty"`
	Eval []byte `msgpack:"eval,omitempty"`
	Err  string `msgpack:"err,omitempty"`
}

// TestEvalClaimsOverTheControlChannel runs three in-process training
// nodes and sends evaluations over the control channel as real members
// (their own transports, so the stream's peer is who they are): a
// non-evaluator's forged evaluation (accuracy 0.99, seq MaxUint64,
// diverged) is refused by name and shown nowhere; the evaluator's claim
// that the job diverged, while the parameters are finite, is checked by
// the receiver and ignored: its worker goes on training, its phase stays
// training, and /status counts the claims dropped (an unsigned claim from
// the evaluator is dropped as not signed); the evaluator's
// evaluation with a sequence far ahead of the shards' samples is refused,
// and its honest ones are still shown.
func TestEvalClaimsOverTheControlChannel(t *testing.T) {
	rec := newRecorder()
	m := startMesh(t, 3, 2, rec, func(i int, c *node.Config) { c.EvalEvery, c.EvalSamples = 500*time.Millisecond, 256 })
	httpOf, trOf, keyOf := map[mesh.NodeID]string{}, map[mesh.NodeID]*mesh.InmemTransport{}, map[mesh.NodeID]ed25519.PrivateKey{}
	m.mu.Lock()
	for id, nd := range m.nodes {
		httpOf[id], trOf[id], keyOf[id] = nd.http, nd.tr, nd.key
	}
	m.mu.Unlock()
	statusOf := func(id mesh.NodeID) (status.Status, bool) {
		res, err := http.Get("http://" + httpOf[id] + "/status")
		if err != nil {
			return status.Status{}, false
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		var s status.Status
		return s, err == nil && res.StatusCode == 200 && json.Unmarshal(b, &s) == nil
	}
	var evaluator mesh.NodeID
	// Every node must host an initialized replica of each shard (pushes
	// applied there): a node with none has no sample count to bound an
	// evaluation's Seq by (eval.ClaimDeps.SeqBound), and a joiner's
	// replicas are non-voters still catching up for a while.
	rec.wait(t, "every node knows the evaluator, an evaluation, iterates and hosts each shard", func() bool {
		for id := range httpOf {
			s, ok := statusOf(id)
			if !ok || s.Eval == nil || s.Evaluator == "" || len(s.Members) != 3 || s.Worker == nil || s.Worker.Iter < 3 || len(s.Shards) != 2 {
				return false
			}
			for _, sh := range s.Shards {
				if sh.Local == "" || sh.Pushes == 0 {
					return false
				}
			}
			evaluator = mesh.NodeID(s.Evaluator)
		}
		// The lease settled: it names the lowest id, every node a worker
		// with pushes applied (until then it may move to a lower id whose
		// first push lands later, and the test's "forger" would be it).
		least := evaluator
		for id := range httpOf {
			least = min(least, id)
		}
		if evaluator != least {
			return false
		}
		for id := range httpOf {
			if s, ok := statusOf(id); !ok || s.Evaluator != string(least) || s.Eval == nil || s.Eval.By != string(least) {
				return false
			}
		}
		return true
	})
	var others []mesh.NodeID
	for id := range httpOf {
		if id != evaluator {
			others = append(others, id)
		}
	}
	forger, target := others[0], others[1]
	// Claims dropped before the lease settled (an evaluator's first
	// evaluation can reach a node that has not heard of its lease yet)
	// are not this test's: it counts the drops from here on.
	settled, ok := statusOf(target)
	if !ok {
		t.Fatal("the target's status")
	}
	before := settled.EvalClaimsDropped
	send := func(from mesh.NodeID, e map[string]any) string {
		t.Helper()
		b, _ := json.Marshal(e)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := trOf[from].Dial(ctx, target, trOf[target].Addr(), mesh.Channel{Kind: mesh.KindRPC, Shard: node.ControlShard})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.SendFrame(controlFrame{Op: "eval", Eval: b}, nil); err != nil {
			t.Fatal(err)
		}
		var rep controlFrame
		if _, err := s.RecvFrame(&rep); err != nil {
			t.Fatal(err)
		}
		return rep.Err
	}
	if msg := send(forger, map[string]any{"accuracy": 0.99, "loss": 0.01, "by": string(forger), "seq": uint64(math.MaxUint64), "diverged": true, "at": time.Now()}); !strings.Contains(msg, "not the evaluator") {
		t.Fatalf("a non-evaluator's evaluation answered %q", msg)
	}
	if msg := send(evaluator, map[string]any{"accuracy": 0.99, "loss": 0.01, "by": string(evaluator), "seq": uint64(math.MaxInt64), "at": time.Now()}); !strings.Contains(msg, "far ahead") {
		t.Fatalf("the evaluator's sequence far ahead answered %q", msg)
	}
	s, _ := statusOf(target)
	if msg := send(evaluator, map[string]any{"accuracy": 0.1, "loss": nil, "by": string(evaluator), "seq": s.Eval.Seq + 1, "diverged": true, "at": time.Now()}); !strings.Contains(msg, "not signed") {
		t.Fatalf("the evaluator's unsigned claim answered %q", msg)
	}
	// Signed with the evaluator's key, as its own claims are.
	claim := records.EvalResult{Accuracy: 0.1, By: string(evaluator), Seq: s.Eval.Seq + 1, Diverged: true, At: time.Now()}
	eval.SignClaim(keyOf[evaluator], &claim)
	var signed map[string]any
	b, _ := json.Marshal(claim)
	json.Unmarshal(b, &signed)
	if msg := send(evaluator, signed); msg != "" {
		t.Fatalf("the evaluator's claim answered %q", msg)
	}
	var iter uint64
	rec.wait(t, "the target counts both claims dropped and trains 5 iterations further", func() bool {
		s, ok := statusOf(target)
		if !ok || s.Worker == nil {
			return false
		}
		if s.Eval != nil && (s.Eval.By == string(forger) || s.Eval.Accuracy == 0.99) {
			t.Fatalf("the forged evaluation is shown: %+v", s.Eval)
		}
		if s.Worker.Stopped != "" || s.Phase != "training" || s.Stopped != "" {
			t.Fatalf("training stopped on a claim: phase %q, stopped %q, worker %q", s.Phase, s.Stopped, s.Worker.Stopped)
		}
		if s.EvalClaimsDropped-before < 4 {
			iter = s.Worker.Iter
			return false
		}
		return s.Worker.Iter >= iter+5
	})
	for id := range httpOf {
		if s, ok := statusOf(id); ok && s.Eval != nil && (s.Eval.Seq == math.MaxUint64 || s.Eval.Seq == math.MaxInt64) {
			t.Fatalf("%s shows the forged sequence: %+v", id, s.Eval)
		}
	}
	// The evaluator's honest evaluations are still taken: the one shown
	// moves on, and no more claims are dropped.
	seq := s.Eval.Seq
	rec.wait(t, "a newer honest evaluation shown on the target", func() bool {
		s, ok := statusOf(target)
		return ok && s.Eval != nil && s.Eval.By == string(evaluator) && s.Eval.Seq > seq+1 && !s.Eval.Diverged
	})
	// The evaluator's own next claim may carry the sequence number the
	// signed one above took (s.Eval.Seq + 1): it is then dropped as not
	// newer, the one drop that is not of a claim sent here.
	if s, _ := statusOf(target); s.EvalClaimsDropped-before < 4 || s.EvalClaimsDropped-before > 5 {
		t.Fatalf("%d claims dropped since the lease settled, want the 4 sent (the forger's, the far-ahead, the unsigned and the checked diverged), and at most the evaluator's claim of the same sequence number", s.EvalClaimsDropped-before)
	}
}
