package sim

import (
	"slices"
	"testing"
	"time"

	"dsspmesh/clock"
)

func mustParse(t *testing.T, policy string) clock.Policy {
	t.Helper()
	p, err := clock.ParsePolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func runBalance(t *testing.T, c Config, policy string, balanced bool) BalanceResult {
	t.Helper()
	r, err := RunBalance(c, mustParse(t, policy), DefaultBalanceConfig(), balanced)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestBalanceUsesTheMixedMesh is issue 16's simulated figure: speeds
// 1,1,2,4 with ±10% jitter, 4 and 16 workers. Bounded gates alone use
// about 36% of the compute; with the balance layer BSP uses ≥ 90% and
// SSP(1) ≥ 95%, at the gate's own staleness bound.
func TestBalanceUsesTheMixedMesh(t *testing.T) {
	for _, n := range []int{4, 16} {
		c := heteroConfig(Jitter, 1, 1, 2, 4)
		c.Workers, c.Iters = n, 1000
		bsp := runBalance(t, c, "bsp", false)
		if bsp.Utilisation > 0.40 {
			t.Errorf("n=%d: plain bsp uses %.1f%%, want about 36%%", n, 100*bsp.Utilisation)
		}
		for _, tc := range []struct {
			policy string
			want   float64
		}{{"bsp", 0.90}, {"ssp:1", 0.95}} {
			r := runBalance(t, c, tc.policy, true)
			if r.Utilisation < tc.want || r.MaxGap > r.Policy.SU() {
				t.Errorf("n=%d %s+balance: utilisation %.1f%% (want ≥ %.0f%%), max gap %d; batches %v",
					n, tc.policy, 100*r.Utilisation, 100*tc.want, r.MaxGap, r.Batches)
			}
			t.Logf("n=%d %s+balance: %.1f%% (plain bsp %.1f%%), %d moves, batches %v",
				n, tc.policy, 100*r.Utilisation, 100*bsp.Utilisation, r.Moves, r.Batches)
		}
	}
}

func TestBalanceRunIsDeterministic(t *testing.T) {
	c := heteroConfig(LogNormal, 1, 3, 2)
	c.Iters = 300
	a, b := runBalance(t, c, "ssp:1", true), runBalance(t, c, "ssp:1", true)
	if a.Samples != b.Samples || a.SimTime != b.SimTime || a.Moves != b.Moves {
		t.Fatalf("two runs differ:\n%+v\n%+v", a, b)
	}
}

// TestBalanceSizesLocalSteps: with rounds of 16 local steps and a push
// latency of 20 ms, speeds 1,1,2,4 with ±10% jitter, the balance layer
// sizes each worker's round (its local steps at the base batch) to its
// speed, so BSP uses ≥ 90% of the compute, more than with one step a
// push (the latency paid once a round, not once a step); the fastest
// worker's round has about 4× the slowest's steps.
func TestBalanceSizesLocalSteps(t *testing.T) {
	c := heteroConfig(Jitter, 1, 1, 2, 4)
	c.Workers, c.Iters = 4, 1000
	c.Latency = 20 * time.Millisecond
	run := func(h int) BalanceResult {
		bc := DefaultBalanceConfig()
		bc.LocalSteps, bc.Overhead = h, time.Millisecond
		r, err := RunBalance(c, mustParse(t, "bsp"), bc, true)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	one, rounds := run(1), run(16)
	t.Logf("bsp+balance: one step a push %.1f%%, rounds of 16 %.1f%%, rounds %v", 100*one.Utilisation, 100*rounds.Utilisation, rounds.Batches)
	if rounds.Utilisation < 0.90 || rounds.Utilisation <= one.Utilisation {
		t.Errorf("rounds of 16: utilisation %.1f%% (one step a push %.1f%%), want ≥ 90%% and above it", 100*rounds.Utilisation, 100*one.Utilisation)
	}
	b := rounds.Batches
	fast, slow := RoundSteps(slices.Max(b), 64, 16), RoundSteps(slices.Min(b), 64, 16)
	if fast < 3*slow || slices.Max(b)+slices.Min(b) < 64*16 {
		t.Errorf("rounds %v: fastest %d steps, slowest %d: not sized to speed", b, fast, slow)
	}
}

// TestBalanceProbesTheFirstRounds: a run as short as a mesh's run to 97 %
// (40 rounds of 16 steps a worker, speeds 1,1,2,4, ±10% jitter, 20 ms
// latency): until the balancer has modelled every worker, each takes probe
// rounds of 2 steps, not full rounds at an even share in which the
// others wait for the slowest's whole round, so BSP with balance uses
// ≥ 90% of the compute over the whole run (83.4% with full first rounds,
// the build before probes).
func TestBalanceProbesTheFirstRounds(t *testing.T) {
	c := heteroConfig(Jitter, 1, 1, 2, 4)
	c.Workers, c.Iters = 4, 40
	c.Latency = 20 * time.Millisecond
	bc := DefaultBalanceConfig()
	bc.LocalSteps, bc.Overhead = 16, time.Millisecond
	r, err := RunBalance(c, mustParse(t, "bsp"), bc, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("40 rounds: %.1f%% of the compute used, %d moves", 100*r.Utilisation, r.Moves)
	if r.Utilisation < 0.90 {
		t.Errorf("40 rounds of 16 under bsp+balance: %.1f%% of the compute used, want ≥ 90%%", 100*r.Utilisation)
	}
}
