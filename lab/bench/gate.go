package bench

import (
	"fmt"
	"time"

	"dsspmesh/clock"
)

// GateCost is the measured cost of one paradigm's gate.
type GateCost struct {
	Policy   string
	Pushes   int
	NsPerOp  float64 // per push, the driver's own bookkeeping included
	XASP     float64 // NsPerOp over ASP's, measured by the same driver in the same run
	Held     int     // pushes the gate held (0 for ASP)
	Controls int     // pushes for which the DSSP controller ran
}

// MeasureGate drives a clock.Gate per policy with workers whose compute
// times follow slowdown (cycled; e.g. 1,1,2,4 so the bounded paradigms
// hold pushes and the controller runs), in simulated time, for pushes
// pushes each, after the same pushes through an ASP gate as the baseline.
func MeasureGate(policies []string, workers, pushes int, slowdown []float64) ([]GateCost, error) {
	if workers < 1 || pushes < 1 {
		return nil, fmt.Errorf("bench: gate workers %d and pushes %d must be >= 1", workers, pushes)
	}
	if len(slowdown) == 0 {
		slowdown = []float64{1}
	}
	asp, err := gateRun("asp", workers, pushes, slowdown)
	if err != nil {
		return nil, err
	}
	asp.XASP = 1
	out := []GateCost{asp}
	for _, p := range policies {
		if p == "asp" {
			continue
		}
		c, err := gateRun(p, workers, pushes, slowdown)
		if err != nil {
			return nil, err
		}
		c.XASP = c.NsPerOp / asp.NsPerOp
		out = append(out, c)
	}
	return out, nil
}

// gateRun is a small discrete-event loop: each worker is ready to push at
// its next time; the earliest ready worker pushes; a released worker is
// ready again one compute time (1 ms × its slowdown) later; a held one when
// a later push releases it.
func gateRun(policy string, workers, pushes int, slowdown []float64) (GateCost, error) {
	c := GateCost{Policy: policy, Pushes: pushes}
	pol, err := clock.ParsePolicy(policy)
	if err != nil {
		return c, err
	}
	g, err := clock.NewGate(pol)
	if err != nil {
		return c, err
	}
	const never = int64(1) << 62
	ids := make([]clock.WorkerID, workers)
	next := make([]int64, workers)
	step := make([]int64, workers)
	index := map[clock.WorkerID]int{}
	for i := range ids {
		ids[i] = clock.WorkerID(fmt.Sprintf("w%04d", i))
		index[ids[i]] = i
		step[i] = int64(float64(time.Millisecond) * slowdown[i%len(slowdown)])
		next[i] = step[i]
		if _, err := g.AddWorker(ids[i]); err != nil {
			return c, err
		}
	}
	start := time.Now()
	for n := 0; n < pushes; n++ {
		w := 0
		for i := range next {
			if next[i] < next[w] {
				w = i
			}
		}
		now := next[w]
		if now == never {
			return c, fmt.Errorf("bench: gate %s holds every worker", policy)
		}
		iter, _ := g.Clock(ids[w])
		out, err := g.Push(ids[w], iter, now)
		if err != nil {
			return c, err
		}
		if out.ControllerCalled {
			c.Controls++
		}
		if out.Released {
			next[w] = now + step[w]
		} else {
			next[w] = never
			c.Held++
		}
		for _, r := range out.Others {
			i := index[r.Worker]
			next[i] = now + step[i]
		}
	}
	c.NsPerOp = float64(time.Since(start).Nanoseconds()) / float64(pushes)
	return c, nil
}
