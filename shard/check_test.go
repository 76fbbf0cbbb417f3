package shard

import (
	"dsspmesh/shardapi"
	"errors"
	"reflect"
	"testing"

	"dsspmesh/clock"
)

type pushKey struct {
	w    clock.WorkerID
	iter int64
}

// replay checks a replica's complete applied log against a fresh clock.Gate
// fed the same sequence and a serial reference of the optimizer. It fails t
// on a differing gate decision, a push applied twice, a worker's applied
// iterations that are not consecutive, or a release with gap > s_U. It
// returns the pushes applied and the reference's final parameters.
func replay(t testing.TB, log []shardapi.Applied, spec shardapi.Spec, theta0 []float32) (map[pushKey]bool, []float32) {
	t.Helper()
	pol, err := clock.ParsePolicy(spec.Policy)
	if err != nil {
		t.Fatal(err)
	}
	gate, _ := clock.NewGate(pol)
	theta := append([]float32(nil), theta0...)
	vel := make([]float32, len(theta))
	var samples int64
	applied := map[pushKey]bool{}
	next := map[clock.WorkerID]int64{}
	checkGap := func(rs []clock.Release) {
		for _, r := range rs {
			c, _ := gate.Clock(r.Worker)
			if pol.Bounded() && c-gate.Min() > pol.SU() {
				t.Errorf("release of (%s, %d) at gap %d > s_U %d", r.Worker, r.Iter, c-gate.Min(), pol.SU())
			}
		}
	}
	for _, a := range log {
		switch a.Kind {
		case "add-worker":
			c, ok := gate.Clock(a.Worker)
			if !ok {
				c, _ = gate.AddWorker(a.Worker)
			}
			if c != a.StartClock {
				t.Errorf("add %s: start clock %d, reference %d", a.Worker, a.StartClock, c)
			}
			next[a.Worker] = c
		case "remove-worker":
			rs, _ := gate.RemoveWorker(a.Worker)
			if !reflect.DeepEqual(rs, a.Released) && (len(rs) > 0 || len(a.Released) > 0) {
				t.Errorf("remove %s released %v, reference %v", a.Worker, a.Released, rs)
			}
			checkGap(rs)
		case "push":
			sum := make([]float32, len(theta))
			n := 0
			var batchSamples int64
			for _, p := range a.Pushes {
				if p.Err != nil {
					continue
				}
				out, err := gate.Push(p.Worker, p.Iter, p.RecvNanos)
				if p.Duplicate {
					var dup *clock.DuplicatePushError
					if !errors.As(err, &dup) {
						t.Errorf("(%s, %d) counted duplicate, reference says %v", p.Worker, p.Iter, err)
					}
					continue
				}
				if err != nil || !reflect.DeepEqual(out, p.Outcome) {
					t.Errorf("(%s, %d) at index %d: outcome %+v, reference %+v (%v)", p.Worker, p.Iter, a.Index, p.Outcome, out, err)
				}
				k := pushKey{p.Worker, p.Iter}
				if applied[k] {
					t.Errorf("(%s, %d) applied twice", p.Worker, p.Iter)
				}
				applied[k] = true
				if p.Iter != next[p.Worker] {
					t.Errorf("%s applied iteration %d, expected %d", p.Worker, p.Iter, next[p.Worker])
				}
				next[p.Worker] = p.Iter + 1
				if out.Released && pol.Bounded() && out.Gap > pol.SU() {
					t.Errorf("(%s, %d) released at gap %d > s_U", p.Worker, p.Iter, out.Gap)
				}
				checkGap(out.Others)
				for i, g := range gradFor(p.Worker, p.Iter, len(theta)) {
					sum[i] += g
				}
				n++
				batchSamples += p.Samples
			}
			if n > 0 {
				lr := float32(spec.Optimizer.Schedule.Rate(samples))
				mu := float32(spec.Optimizer.Momentum)
				for i := range theta {
					if spec.Optimizer.Kind == shardapi.SGD {
						theta[i] -= float32(lr * sum[i])
					} else {
						vel[i] = float32(mu*vel[i]) + sum[i]
						theta[i] -= float32(lr * vel[i])
					}
				}
				samples += batchSamples
			}
		}
	}
	return applied, theta
}

// checkLeaderReplay replays the leader's applied log serially and checks that
// every acknowledged push is in it and that the leader's parameters equal the
// replay's; it returns the log for further checks.
func checkLeaderReplay(t *testing.T, c *cluster, leader *Replica, spec shardapi.Spec, theta0 []float32, acked map[pushKey]bool) []shardapi.Applied {
	t.Helper()
	log := c.logs[leader.cfg.ID].snapshot()
	applied, ref := replay(t, log, spec, theta0)
	for k := range acked {
		if !applied[k] {
			t.Errorf("acked %v not applied", k)
		}
	}
	if got := leader.FSM().Params(nil); !reflect.DeepEqual(got, ref) {
		t.Errorf("parameters differ from the serial replay")
	}
	return log
}
