//go:build faultinject

package test

import (
	"os"
	"strings"
	"testing"
	"time"

	"dsspmesh/internal/faults"
)

// TestCheckersCatchBrokenBuilds proves every checker can fail: each subtest
// runs a mesh of dssp binaries built with -tags faultinject and one
// deliberate bug switched on through DSSP_FAULTS (internal/faults), and
// waits until the checker meant to catch it reports a violation.
//
// DSSP_FAULT_CONTROL=1 runs each case's scenario with its fault off
// instead, for a minute after the kick, and requires every checker clean:
// the scenario alone is no violation, the bug is.
//
//	go test -tags faultinject ./test -run TestCheckersCatchBrokenBuilds -v
func TestCheckersCatchBrokenBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test; skipped with -short")
	}
	dssp := []string{"--model", "mlp", "--paradigm", "dssp", "--s-lower", "3", "--r-max", "12"}
	pipelined := func(spec ...string) []string { return append(spec, "--pipeline") }
	balanced := append(dssp[:len(dssp):len(dssp)], "--balance")
	tenfold := map[int]string{2: "10"} // the gate holds the others for node 2
	cases := []struct {
		fault faults.Fault
		// with is a scenario switched on with the fault and in its
		// control run alike (a replica that diverges); the control then
		// tolerates the hash checker's mismatches, which the scenario is.
		with   faults.Fault
		spec   []string
		policy string
		pipe   bool           // the job runs with --pipeline
		slow   map[int]string // --slowdown per node (with --compute-delay 10ms)
		nan    bool           // node 1's every 10th gradient is NaN (--fault-nan-every 10)
		kick   func(c *FaultCluster)
		caught func(r *Report) bool
	}{
		{fault: faults.AckUncommitted, spec: dssp, policy: "dssp:3:12",
			caught: func(r *Report) bool { return r.Lost > 0 }},
		{fault: faults.SkipDedupe, spec: dssp, policy: "dssp:3:12",
			// A restarted worker's first push resends an applied iteration.
			kick:   func(c *FaultCluster) { c.Kill(1); c.Restart(1) },
			caught: func(r *Report) bool { return r.AppliedTwice > 0 && r.ClockBack > 0 }},
		{fault: faults.SkipStaleness, spec: []string{"--model", "mlp", "--paradigm", "ssp", "--s-lower", "1"}, policy: "ssp:1", slow: tenfold,
			caught: func(r *Report) bool { return r.GapOver > 0 && r.ReplayMismatch > 0 }},
		{fault: faults.Diverge, spec: dssp, policy: "dssp:3:12",
			caught: func(r *Report) bool { return r.HashMismatch > 0 }},
		{fault: faults.SplitBrain, spec: dssp, policy: "dssp:3:12",
			caught: func(r *Report) bool { return r.TwoLeaders > 0 }},
		{fault: faults.SkipNonFinite, spec: dssp, policy: "dssp:3:12", nan: true,
			caught: func(r *Report) bool { return r.NonFinite > 0 }},
		{fault: faults.StaleRead, spec: dssp, policy: "dssp:3:12",
			caught: func(r *Report) bool { return r.ReadStale > 0 }},
		// The same two bounds with the pipelined loop, whose gate releases
		// at s_L − 1 (ssp:1's at gap 0) and whose reads keep s_U.
		{fault: faults.SkipStaleness, spec: pipelined("--model", "mlp", "--paradigm", "ssp", "--s-lower", "1"), policy: "ssp:1", pipe: true, slow: tenfold,
			caught: func(r *Report) bool { return r.GapOver > 0 && r.ReplayMismatch > 0 }},
		{fault: faults.StaleRead, spec: pipelined(dssp...), policy: "dssp:3:12", pipe: true,
			caught: func(r *Report) bool { return r.ReadStale > 0 }},
		// The balance layer's shares: a killed worker's share must go to
		// the survivors, and no two shares may overlap.
		{fault: faults.KeepLeaverShare, spec: balanced, policy: "dssp:3:12",
			kick:   func(c *FaultCluster) { c.Kill(1) },
			caught: func(r *Report) bool { return r.ShareUnread > 0 }},
		{fault: faults.OverlapShares, spec: balanced, policy: "dssp:3:12",
			caught: func(r *Report) bool { return r.ShareTiling > 0 }},
		// The worker at t_max dies after its pushes of iterations the
		// others have not reached were acknowledged: the next allocation
		// must not cut those iterations again.
		{fault: faults.ForgetRemovedMax, spec: balanced, policy: "dssp:3:12", slow: map[int]string{0: "100", 2: "100"},
			kick: func(c *FaultCluster) {
				c.WaitFor("node 1 ahead of the others", 2*time.Minute, func() bool { return c.Iter(1) >= max(c.Iter(0), c.Iter(2))+5 })
				c.Kill(1)
			},
			caught: func(r *Report) bool { return r.ShareTiling > 0 }},
		// A replica flips a parameter in memory: the agreement check must
		// name it (and its node rebuild it); a build whose checks name
		// no one leaves it voting and serving.
		{fault: faults.BlindAgreement, with: faults.FlipState, spec: dssp, policy: "dssp:3:12",
			caught: func(r *Report) bool { return r.Unnamed > 0 }},
	}
	control := os.Getenv("DSSP_FAULT_CONTROL") != ""
	for _, tc := range cases {
		name := string(tc.fault)
		if tc.pipe {
			name += "+pipeline"
		}
		t.Run(name, func(t *testing.T) {
			fault := string(tc.fault)
			if control {
				fault = ""
			}
			if tc.with != "" {
				fault = strings.Trim(fault+","+string(tc.with), ",")
			}
			t.Setenv("DSSP_FAULTS", fault) // inherited by the nodes
			c := NewFaultCluster(t, FaultOptions{Nodes: 3, Policy: tc.policy, Pipeline: tc.pipe, Tags: "faultinject",
				Args: []string{"--threads", "1", "--eval-every", "5s", "--eval-samples", "500", "--log-level", "error"},
				Spec: tc.spec})
			for i, f := range tc.slow {
				c.Mesh.AddArgs(i, "--slowdown", f, "--compute-delay", "10ms")
			}
			if tc.nan {
				c.Mesh.AddArgs(1, "--fault-nan-every", "10")
			}
			for i := range c.Mesh.Procs {
				c.Start(i)
			}
			for i := range c.Mesh.Procs {
				c.killed[i] = true // a broken build may exit; the history is what counts
			}
			if tc.kick != nil {
				c.WaitFor("some training", 2*time.Minute, func() bool { return c.Iter(1) >= 5 })
				tc.kick(c)
			}
			var rep *Report
			if control {
				c.holdUntil(time.Now().Add(time.Minute))
				rep = c.Check()
				clean := len(rep.Violations) == 0
				if tc.with != "" { // the scenario's divergence is in the hashes
					r := *rep
					r.HashMismatch = 0
					clean = r.OK() && rep.Named > 0
				}
				if !clean {
					t.Fatalf("%s's scenario with the fault off: %s; e.g. %v", tc.fault, rep, rep.Violations)
				}
				t.Logf("%s's scenario with the fault off, clean: %s", tc.fault, rep)
				return
			}
			c.WaitFor("the checker to catch "+string(tc.fault), 3*time.Minute, func() bool {
				rep = c.Check()
				return tc.caught(rep)
			})
			t.Logf("%s caught: %s", tc.fault, rep)
			for _, v := range rep.Violations[:min(3, len(rep.Violations))] {
				t.Logf("  e.g. %s", v)
			}
		})
	}
}
