package clock

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

func newGate(t *testing.T, policy string, workers ...WorkerID) *Gate {
	t.Helper()
	p, err := ParsePolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGate(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range workers {
		if _, err := g.AddWorker(w); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

// push applies a push of w's current iteration and checks its outcome.
func push(t *testing.T, g *Gate, w WorkerID, now int64, want Rule, others ...Release) Outcome {
	t.Helper()
	c, _ := g.Clock(w)
	out, err := g.Push(w, c, now)
	if err != nil {
		t.Fatalf("push %s iter %d: %v", w, c, err)
	}
	if out.Rule != want || out.Released != (want != RuleWait) {
		t.Fatalf("push %s iter %d: rule %v released %v, want %v", w, c, out.Rule, out.Released, want)
	}
	if !slices.Equal(out.Others, others) {
		t.Fatalf("push %s iter %d: released others %v, want %v", w, c, out.Others, others)
	}
	return out
}

func TestBSPReleasesWhenSlowestArrives(t *testing.T) {
	g := newGate(t, "bsp", "a", "b")
	push(t, g, "a", 1, RuleWait)
	push(t, g, "b", 2, RuleWithin, Release{"a", 0})
	if g.Min() != 1 || g.Max() != 1 {
		t.Fatalf("t_min %d t_max %d, want 1 1", g.Min(), g.Max())
	}
}

func TestASPNeverWaits(t *testing.T) {
	g := newGate(t, "asp", "a", "b")
	for i := range 50 {
		push(t, g, "a", int64(i), RuleAsync)
	}
	if g.Max()-g.Min() != 50 {
		t.Fatalf("spread %d, want 50", g.Max()-g.Min())
	}
}

func TestOneStragglerPushReleasesSeveralWaiters(t *testing.T) {
	g := newGate(t, "ssp:1", "a", "b", "c", "s")
	for _, w := range []WorkerID{"c", "a", "b"} {
		push(t, g, w, 1, RuleWithin)
	}
	for _, w := range []WorkerID{"c", "a", "b"} {
		push(t, g, w, 2, RuleWait)
	}
	if got := g.Waiting(); !slices.Equal(got, []Release{{"a", 1}, {"b", 1}, {"c", 1}}) {
		t.Fatalf("waiting %v", got)
	}
	push(t, g, "s", 3, RuleWithin, Release{"a", 1}, Release{"b", 1}, Release{"c", 1})
	if len(g.Waiting()) != 0 {
		t.Fatalf("still waiting: %v", g.Waiting())
	}
}

// grantSetup brings p to a controller grant: A[p] = (3, 2) and
// A[s] = (1000, 0) give r* = r_max (the straggler's next push is far).
func grantSetup(t *testing.T, policy string) *Gate {
	g := newGate(t, policy, "p", "s")
	push(t, g, "p", 1, RuleWait) // cold start: p has one timestamp
	push(t, g, "s", 0, RuleWithin, Release{"p", 0})
	push(t, g, "s", 1000, RuleWait) // cold start: p has one timestamp
	push(t, g, "p", 2, RuleWithin, Release{"s", 1})
	return g
}

func TestColdStartReturnsZero(t *testing.T) {
	g := newGate(t, "dssp:0:12", "p", "s")
	out := push(t, g, "p", 1, RuleWait)
	if !out.ControllerCalled || out.Grant != 0 {
		t.Fatalf("cold start: %+v, want the controller called and no grant", out)
	}
	if got := g.Totals().ControllerCalls; got != 1 {
		t.Fatalf("controller calls %d, want 1", got)
	}
}

func TestGrantReleasesTriggerAndNextRMinusOne(t *testing.T) {
	g := grantSetup(t, "dssp:0:4")
	out := push(t, g, "p", 3, RuleController)
	if out.Grant != 4 {
		t.Fatalf("grant %d, want 4", out.Grant)
	}
	for i := range 3 {
		push(t, g, "p", int64(4+i), RuleGrant)
	}
	// The grant is used up: the next push goes through the rules again, and
	// at gap 5 > s_U the clamp allows nothing.
	out = push(t, g, "p", 7, RuleWait)
	if !out.ControllerCalled || out.Gap != 5 {
		t.Fatalf("after the grant: %+v, want the controller called at gap 5", out)
	}
	// Calls: the cold start, the grant, and this one.
	info, _ := g.Worker("p")
	if info.Stats.Grants != 1 || info.Stats.GrantedPushes != 4 || info.Stats.ControllerCalls != 3 {
		t.Fatalf("stats %+v", info.Stats)
	}
}

func TestPaperGrantReleasesTriggerAndNextR(t *testing.T) {
	g := grantSetup(t, "dssp-paper:0:4")
	if out := push(t, g, "p", 3, RuleController); out.Grant != 4 {
		t.Fatalf("grant %d, want 4", out.Grant)
	}
	for i := range 4 {
		push(t, g, "p", int64(4+i), RuleGrant)
	}
	// No clamp and no s_U check: gap 6 > s_U = 4, the controller grants again.
	out := push(t, g, "p", 8, RuleController)
	if out.Gap != 6 || out.Grant != 4 {
		t.Fatalf("second grant %+v", out)
	}
}

func TestClampLimitsGrantToSU(t *testing.T) {
	// s_L=2, r_max=2, s_U=4. The controller wants 2 at every push of p.
	g := newGate(t, "dssp:2:2", "p", "s")
	push(t, g, "p", 1, RuleWithin)
	push(t, g, "p", 2, RuleWithin)
	push(t, g, "p", 3, RuleWait) // gap 3, cold start
	push(t, g, "s", 0, RuleWithin, Release{"p", 2})
	push(t, g, "s", 1000, RuleWithin)
	push(t, g, "p", 1001, RuleWithin)
	if out := push(t, g, "p", 1002, RuleController); out.Grant != 2 || out.Gap != 3 {
		t.Fatalf("grant %+v, want r*=2 at gap 3", out)
	}
	push(t, g, "p", 1003, RuleGrant) // gap 4 = s_U
	out := push(t, g, "p", 1004, RuleWait)
	if !out.ControllerCalled || out.Gap != 5 {
		t.Fatalf("gap 5: %+v, want controller called and wait", out)
	}
	if got := SyncController(Timestamps{1004, 1003}, Timestamps{1000, 0}, 2, ObjectiveAbs); got != 2 {
		t.Fatalf("unclamped controller %d, want 2", got)
	}
}

func TestControllerOnlyForFastest(t *testing.T) {
	g := grantSetup(t, "dssp:0:4")
	push(t, g, "p", 3, RuleController)
	push(t, g, "p", 4, RuleGrant) // p=4, s=2
	if c, err := g.AddWorker("q"); err != nil || c != 2 {
		t.Fatalf("AddWorker: clock %d err %v, want t_min 2", c, err)
	}
	out := push(t, g, "q", 5, RuleWait) // q=3: gap 1 > s_L, but p is at 4
	if out.ControllerCalled {
		t.Fatal("controller ran for a worker that is not a fastest one")
	}
}

func TestSlowestTieGoesToLatestPredictedPush(t *testing.T) {
	// Two workers tie at t_min; the one predicted to push later decides.
	g := newGate(t, "dssp:0:12", "p", "a", "b")
	push(t, g, "p", 1, RuleWait)
	push(t, g, "a", 0, RuleWait)
	push(t, g, "b", 0, RuleWithin, Release{"a", 0}, Release{"p", 0})
	push(t, g, "a", 100, RuleWait)
	push(t, g, "b", 96, RuleWait)
	push(t, g, "p", 99, RuleWithin, Release{"a", 1}, Release{"b", 1})
	// A[a] = (100, 0) predicts 200; A[b] = (96, 0) predicts 192: a is slowest.
	// A[p] = (100, 99): Sim_p = 100..112, Sim_a = 200.. → r* = 12, clamp 12.
	out := push(t, g, "p", 100, RuleController)
	if out.Grant != 12 {
		t.Fatalf("grant %d, want 12 (against the latest predicted worker)", out.Grant)
	}
}

func TestRejectedPushLeavesStateUnchanged(t *testing.T) {
	g := newGate(t, "bsp", "a", "b")
	push(t, g, "a", 1, RuleWait)
	before, _ := g.MarshalBinary()
	var dup *DuplicatePushError
	if _, err := g.Push("a", 0, 2); !errors.As(err, &dup) || dup.Iter != 0 || dup.Clock != 1 {
		t.Fatalf("duplicate: %v", err)
	}
	if !g.IsWaiting("a") {
		t.Fatal("a should still be waiting")
	}
	var fut *FuturePushError
	if _, err := g.Push("b", 3, 2); !errors.As(err, &fut) || fut.Iter != 3 || fut.Clock != 0 {
		t.Fatalf("future: %v", err)
	}
	var unk *UnknownWorkerError
	if _, err := g.Push("z", 0, 2); !errors.As(err, &unk) || !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("unknown: %v", err)
	}
	if _, err := g.Push("a", 1, 2); !errors.Is(err, ErrWorkerWaiting) {
		t.Fatalf("push while held: %v", err)
	}
	if _, err := g.AddWorker("a"); !errors.Is(err, ErrWorkerExists) {
		t.Fatalf("add twice: %v", err)
	}
	if _, err := g.AddWorker(""); !errors.Is(err, ErrBadWorkerID) {
		t.Fatalf("empty id: %v", err)
	}
	if _, err := g.RemoveWorker("z"); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("remove unknown: %v", err)
	}
	after, _ := g.MarshalBinary()
	if !bytes.Equal(before, after) {
		t.Fatal("a rejected call changed the state")
	}
}

func TestRemoveReleasesWaitersAndDropsOwnHold(t *testing.T) {
	g := newGate(t, "bsp", "a", "b", "c")
	push(t, g, "a", 1, RuleWait)
	push(t, g, "b", 1, RuleWait)
	rel, err := g.RemoveWorker("b") // b's own hold is dropped, c still holds a
	if err != nil || len(rel) != 0 {
		t.Fatalf("remove b: %v %v", rel, err)
	}
	rel, err = g.RemoveWorker("c")
	if err != nil || !slices.Equal(rel, []Release{{"a", 0}}) {
		t.Fatalf("remove c: %v %v, want a released", rel, err)
	}
	// Alone, a never waits; removed, the gate keeps t_min for the next joiner.
	push(t, g, "a", 2, RuleWithin)
	if _, err := g.RemoveWorker("a"); err != nil {
		t.Fatal(err)
	}
	if c, _ := g.AddWorker("d"); c != 2 {
		t.Fatalf("joiner clock %d, want the last t_min 2", c)
	}
}

func TestReceiptTimeRegressionIsClamped(t *testing.T) {
	g := newGate(t, "asp", "a")
	push(t, g, "a", 100, RuleAsync)
	push(t, g, "a", 50, RuleAsync)
	info, _ := g.Worker("a")
	if info.Times != (Timestamps{100, 100}) {
		t.Fatalf("times %+v, want (100, 100)", info.Times)
	}
}

func TestAdvanceWorkerReleasesAndNeverMovesBack(t *testing.T) {
	g := newGate(t, "ssp:1", "a", "b")
	push(t, g, "a", 1, RuleWithin) // a: 1, b: 0
	push(t, g, "a", 2, RuleWait)   // a: 2, gap 2 > 1: held
	if c, rel, err := g.AdvanceWorker("b", 0); err != nil || c != 0 || rel != nil {
		t.Fatalf("advance b to its own clock: %d %v %v", c, rel, err)
	}
	c, rel, err := g.AdvanceWorker("b", 3) // t_min rises to 2: a's hold is released
	if err != nil || c != 3 || !slices.Equal(rel, []Release{{"a", 1}}) {
		t.Fatalf("advance b to 3: clock %d released %v err %v, want 3, a's iteration 1", c, rel, err)
	}
	if c, rel, err := g.AdvanceWorker("b", 2); err != nil || c != 3 || rel != nil {
		t.Fatalf("advance b back to 2: clock %d %v %v, want it left at 3", c, rel, err)
	}
	if _, _, err := g.AdvanceWorker("zed", 5); err == nil {
		t.Fatal("advancing an unknown worker succeeded")
	}
	// b's advanced clock is its next iteration; anything else is refused.
	if _, err := g.Push("b", 2, 3); err == nil {
		t.Fatal("b pushed an iteration it skipped")
	}
	push(t, g, "b", 4, RuleWait) // b: 4 against a: 2 is beyond ssp:1
}

func TestAdvanceWorkerDropsOwnHold(t *testing.T) {
	g := newGate(t, "bsp", "a", "b")
	push(t, g, "a", 1, RuleWait)
	if _, rel, err := g.AdvanceWorker("a", 5); err != nil || rel != nil {
		t.Fatalf("advance a: %v %v", rel, err)
	}
	if st, _ := g.Worker("a"); st.Waiting {
		t.Fatal("a still waits after its hold was dropped")
	}
}
