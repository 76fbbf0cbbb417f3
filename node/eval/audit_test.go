package eval

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/mesh"
	"dsspmesh/modelfile"
	"dsspmesh/node/records"
)

// TestAuditTolerance: four standard errors of the difference of two
// proportions, plus the slack; no noise on a side of no samples.
func TestAuditTolerance(t *testing.T) {
	for _, c := range []struct {
		a1     float64
		n1     int
		a2     float64
		n2     int
		within float64 // a difference that must be tolerated
		beyond float64 // one that must not
	}{
		{0.9, 500, 0.9, 500, 0.09, 0.11},
		{0.97, 10000, 0.97, 10000, 0.029, 0.03},
		{0.99, 500, 0.5, 500, 0.02, 0.2},
	} {
		tol := auditTolerance(c.a1, c.n1, c.a2, c.n2)
		if tol < c.within || tol > c.beyond {
			t.Errorf("tolerance of %.2f on %d against %.2f on %d: %.4f, want within [%.3f, %.3f]", c.a1, c.n1, c.a2, c.n2, tol, c.within, c.beyond)
		}
	}
	if tol := auditTolerance(0.5, 0, 0.5, 0); tol != auditSlack {
		t.Errorf("no samples on either side: %v, want the slack alone", tol)
	}
}

// TestAuditRaisesTheAlarm: a node drawn to audit fetches the evaluator's
// file through the control channel (its claim checked against shard 0's
// record), scores it, and agrees within sampling noise; when its own
// score is beyond it, the alarm is raised — a /status alarm, an event
// naming the evaluator, a count — and a file whose bytes are not its
// claim's raises it too. A node that is the evaluator, or a claim of
// another evaluator than the lease's holder, is not audited.
func TestAuditRaisesTheAlarm(t *testing.T) {
	mlp, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	ev, auditor := askPair(t, mlp, func(rm *Room, s mesh.Stream) { rm.SendEvaluated(s) })
	var mu sync.Mutex
	var events []records.Event
	auditor.d.Event = func(e records.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }
	theta := mlp.Init(3)
	meta := modelfile.Meta{Model: "mlp", Clock: 4, Eval: &modelfile.Eval{Accuracy: 0.9, Samples: 500}}
	digest, err := Digest(mlp.Layout(), theta, meta)
	if err != nil {
		t.Fatal(err)
	}
	claim := records.EvalResult{By: "n1", Seq: 10, Accuracy: 0.9, Samples: 500, Digest: digest}
	serve(t, ev, &Snapshot{Theta: theta, Meta: meta}, "", &claim)
	score := 0.89
	var scored []float32
	e := Evaluation{AuditFraction: 1, Evaluate: func(_ context.Context, th []float32) (cudaops.Eval, error) {
		scored = th
		return cudaops.Eval{Accuracy: score, Samples: 500}, nil
	}}
	ctx := context.Background()

	auditor.maybeAudit(ctx, e, claim)
	last, counts, alarm := auditor.AuditStatus(time.Now())
	if last == nil || !last.Agrees || counts["agree"] != 1 || alarm != "" || len(scored) != len(theta) || scored[7] != theta[7] {
		t.Fatalf("an audit within noise: %+v %v %q, scored %d parameters", last, counts, alarm, len(scored))
	}

	score = 0.4
	auditor.maybeAudit(ctx, e, claim)
	last, counts, alarm = auditor.AuditStatus(time.Now())
	if last == nil || last.Agrees || counts["disagree"] != 1 || !strings.Contains(alarm, "claims accuracy 0.9000 on 500 samples") || !strings.Contains(alarm, "0.4000") {
		t.Fatalf("an audit beyond noise: %+v %v %q", last, counts, alarm)
	}
	mu.Lock()
	if len(events) != 1 || events[0].Kind != records.EventAuditDisagrees || events[0].Node != "n1" {
		t.Fatalf("events: %+v", events)
	}
	mu.Unlock()
	if _, _, later := auditor.AuditStatus(time.Now().Add(AlarmFor + time.Minute)); later != "" {
		t.Fatalf("the alarm still up after %v: %q", AlarmFor, later)
	}

	// The evaluator serves other bytes under its (recorded) claim.
	forged := append([]float32(nil), theta...)
	forged[0]++
	ev.evaluated.set(&Snapshot{Theta: forged, Meta: meta}, "", &claim)
	score = 0.9
	auditor.maybeAudit(ctx, e, claim)
	if _, counts, alarm = auditor.AuditStatus(time.Now()); counts["disagree"] != 2 || !strings.Contains(alarm, "bytes its claim does not name") {
		t.Fatalf("a file not its claim's: %v %q", counts, alarm)
	}

	before := counts
	ev.maybeAudit(ctx, e, claim) // the evaluator itself
	other := claim
	other.By = "n3"
	auditor.maybeAudit(ctx, e, other) // not the lease's holder
	auditor.maybeAudit(ctx, Evaluation{Evaluate: e.Evaluate}, claim)
	if _, counts, _ := auditor.AuditStatus(time.Now()); counts["agree"]+counts["disagree"]+counts["failed"] != before["agree"]+before["disagree"]+before["failed"] {
		t.Fatalf("audits made where none is due: %v, before %v", counts, before)
	}
	if _, counts, _ := ev.AuditStatus(time.Now()); len(counts) != 0 {
		t.Fatalf("the evaluator audited its own claim: %v", counts)
	}

	// A trainer that cannot evaluate now: not audited, not a failure.
	e.Evaluate = func(context.Context, []float32) (cudaops.Eval, error) { return cudaops.Eval{}, errors.Join(ErrNotNow) }
	serve(t, ev, &Snapshot{Theta: theta, Meta: meta}, "", &claim)
	auditor.maybeAudit(ctx, e, claim)
	if _, counts, _ := auditor.AuditStatus(time.Now()); counts["failed"] != 0 {
		t.Fatalf("an audit the trainer could not score counted failed: %v", counts)
	}
}
