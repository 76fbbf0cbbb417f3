package eval

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/mesh"
	"dsspmesh/modelfile"
	"dsspmesh/node/records"
)

// The audit (docs/design.md, "The evaluator"): a second member, drawn at
// random, re-evaluates a fraction of the claims. Every training node that
// accepts a claim ([Room.Audit], from Claims.Receive) draws itself with
// probability Evaluation.AuditFraction ÷ the training members other than
// the evaluator, by its own random source (nobody, the evaluator
// included, can tell who audits which claim), so about AuditFraction
// audits are made per claim across the mesh. A drawn node fetches the
// evaluated model through the evaluator as a forwarding node does (the
// claim checked against shard 0's record, the bytes against its digest),
// scores it with its own evaluation (the built-in model on its test set,
// or its trainer) and compares: an accuracy beyond the claim's sampling
// noise (auditTolerance) raises the alarm — one ERROR line, an
// eval-audit-disagrees event, a /status warning for AlarmFor, a count
// (dssp_eval_audits_total{result="disagree"}). One audit runs at a time,
// on the evaluation loop's goroutine (the node is not the evaluator), and
// a model of LendBytes or more is not audited (it would need a second
// copy of the model on the auditor).

// AlarmFor is how long a disagreeing audit stays a /status warning.
const AlarmFor = 30 * time.Minute

// auditTimeout bounds one audit: the fetch and the evaluation.
const auditTimeout = 2 * time.Minute

// auditSlack is the difference in accuracy beyond sampling noise an audit
// allows: the same parameters scored on other hardware, in another
// precision or order of summation.
const auditSlack = 0.02

// auditTolerance is the largest difference between an accuracy claimed
// on n1 samples and one measured on n2 that sampling noise explains: four
// standard errors of the difference of two proportions at their pooled
// value, plus auditSlack. n ≤ 0 counts as no noise on that side.
func auditTolerance(a1 float64, n1 int, a2 float64, n2 int) float64 {
	inv := func(n int) float64 {
		if n <= 0 {
			return 0
		}
		return 1 / float64(n)
	}
	p := a2
	if n1 > 0 && n2 > 0 {
		p = (a1*float64(n1) + a2*float64(n2)) / float64(n1+n2)
	}
	p = min(max(p, 0), 1)
	return 4*math.Sqrt(p*(1-p)*(inv(n1)+inv(n2))) + auditSlack
}

// Audit is told of each claim this node accepted from the evaluator; it
// queues it for the evaluation loop, which draws whether to audit it
// (dropped while another waits).
func (r *Room) Audit(e records.EvalResult) {
	select {
	case r.audit.queue <- e:
	default:
	}
}

// AuditStatus is the last audit made here (nil: none), the audits by
// result, and the alarm ("" unless an audit disagreed within AlarmFor).
func (r *Room) AuditStatus(now time.Time) (*records.AuditResult, map[string]uint64, string) {
	a := &r.audit
	a.mu.Lock()
	defer a.mu.Unlock()
	alarm := a.alarm
	if now.Sub(a.alarmedAt) > AlarmFor {
		alarm = ""
	}
	counts := maps.Clone(a.counts)
	if counts == nil {
		counts = map[string]uint64{}
	}
	return copyOf(a.last), counts, alarm
}

// drawn reports whether this node audits a claim of evaluator: with
// probability fraction ÷ the training members other than it.
func (r *Room) drawn(fraction float64, evaluator string) bool {
	if fraction <= 0 || r.d.Members == nil {
		return false
	}
	others := 0
	for _, m := range r.d.Members.Members() {
		if m.Trains && string(m.ID) != evaluator {
			others++
		}
	}
	return others > 0 && rand.Float64() < fraction/float64(others)
}

// maybeAudit audits the claim heard if this node is drawn and its
// evaluator still holds the lease.
func (r *Room) maybeAudit(ctx context.Context, e Evaluation, heard records.EvalResult) {
	ev := r.d.Evaluator()
	if ev == string(r.d.ID) || ev != heard.By || !r.drawn(e.AuditFraction, ev) {
		return
	}
	res, err := r.auditNow(ctx, e, mesh.NodeID(ev))
	switch {
	case errors.Is(err, errSkip):
		r.d.Logger.Debug("evaluation not audited", "evaluator", ev, "why", err)
	case errors.Is(err, errDigestMismatch): // raised already
	case err != nil && ctx.Err() == nil:
		r.count("failed")
		r.d.Logger.Warn("evaluation audit failed", "evaluator", ev, "err", err)
	case err != nil:
	default:
		r.judge(e, res)
	}
}

// errSkip: the claim is not audited (said at DEBUG).
var errSkip = errors.New("audit skipped")

// auditNow fetches evaluator's evaluated model and scores it here.
func (r *Room) auditNow(ctx context.Context, e Evaluation, evaluator mesh.NodeID) (records.AuditResult, error) {
	job, ok := r.d.Job()
	if !ok {
		return records.AuditResult{}, fmt.Errorf("%w: the node has not joined the mesh's shards", errSkip)
	}
	if modelBytes := 4 * int64(job.Layout.Total()); modelBytes >= int64(LendBytes) {
		return records.AuditResult{}, fmt.Errorf("%w: a model of %d bytes (from %d, no second copy is made)", errSkip, modelBytes, LendBytes)
	}
	actx, cancel := context.WithTimeout(ctx, auditTimeout)
	defer cancel()
	a, _, err := r.askEvaluated(actx, evaluator)
	if err != nil {
		return records.AuditResult{}, err
	}
	defer a.s.Close()
	var buf bytes.Buffer
	buf.Grow(int(a.size))
	if _, err := a.copyTo(&buf); err != nil {
		if errors.Is(err, errDigestMismatch) {
			r.raise(fmt.Sprintf("the evaluator %s served for its claim at sequence %d bytes its claim does not name: %v", evaluator, a.claim.Seq, err), evaluator)
		}
		return records.AuditResult{}, err
	}
	f, err := modelfile.Decode(buf.Bytes())
	if err != nil {
		return records.AuditResult{}, err
	}
	theta, err := f.Params(job.Layout)
	if err != nil {
		return records.AuditResult{}, err
	}
	var got cudaops.Eval
	if got, err = e.Evaluate(actx, theta); errors.Is(err, ErrNotNow) {
		return records.AuditResult{}, fmt.Errorf("%w: %v", errSkip, err)
	} else if err != nil {
		return records.AuditResult{}, err
	}
	c := a.claim
	tol := auditTolerance(c.Accuracy, c.Samples, got.Accuracy, got.Samples)
	return records.AuditResult{At: r.d.Now(), By: c.By, Seq: c.Seq, Digest: c.Digest, Claimed: c.Accuracy, ClaimedSamples: c.Samples,
		Measured: got.Accuracy, Samples: got.Samples, Tolerance: tol,
		Agrees: finite(got.Accuracy) && math.Abs(c.Accuracy-got.Accuracy) <= tol}, nil
}

// judge keeps an audit's result and raises the alarm when it disagrees.
func (r *Room) judge(e Evaluation, res records.AuditResult) {
	a := &r.audit
	a.mu.Lock()
	a.last = &res
	a.mu.Unlock()
	if res.Agrees {
		r.count("agree")
		r.d.Logger.Debug("evaluation audited: agrees", "evaluator", res.By, "seq", res.Seq, "claimed", res.Claimed, "measured", res.Measured, "tolerance", res.Tolerance)
		return
	}
	r.raise(fmt.Sprintf("the evaluator %s claims accuracy %.4f on %d samples at sequence %d (digest %s); this node scored that file %.4f on %d samples, beyond the %.4f sampling noise allows",
		res.By, res.Claimed, res.ClaimedSamples, res.Seq, res.Digest, res.Measured, res.Samples, res.Tolerance), mesh.NodeID(res.By))
}

// raise says a disagreement: the alarm, one ERROR line, the count and the
// event (Deps.Event).
func (r *Room) raise(what string, evaluator mesh.NodeID) {
	a := &r.audit
	a.mu.Lock()
	a.alarm, a.alarmedAt = "evaluation audit disagrees: "+what, r.d.Now()
	a.mu.Unlock()
	r.count("disagree")
	r.d.Logger.Error("evaluation audit disagrees", "detail", what)
	if r.d.Event != nil {
		r.d.Event(records.Event{Kind: records.EventAuditDisagrees, Node: string(evaluator), Detail: what})
	}
}

func (r *Room) count(result string) {
	a := &r.audit
	a.mu.Lock()
	if a.counts == nil {
		a.counts = map[string]uint64{}
	}
	a.counts[result]++
	a.mu.Unlock()
}
