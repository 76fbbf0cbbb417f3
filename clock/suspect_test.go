package clock

import "testing"

// TestSuspendedWorkerReadmitted: a dead-looking worker at t_min holding
// others is suspended (a removal), the held workers are released within
// s_U, and when it pushes again it is re-admitted (AddWorker +
// AdvanceWorker to its own next iteration) at or past the clock it had:
// no clock goes back, its next push is accepted, and the gate keeps every
// worker within s_U of t_min.
func TestSuspendedWorkerReadmitted(t *testing.T) {
	g := newGate(t, "ssp:2", "a", "b", "c")
	now := int64(0)
	step := func(w WorkerID) Outcome {
		now += 10
		c, _ := g.Clock(w)
		o, err := g.Push(w, c, now)
		if err != nil {
			t.Fatalf("push %s@%d: %v", w, c, err)
		}
		return o
	}
	// c stalls at 1; a and b run until the gate holds them (gap > s_L = 2).
	step("c")
	for range 4 {
		step("a")
		step("b")
	}
	if g.Suspectable("a") || !g.Suspectable("c") {
		t.Fatalf("suspectable: a %v (ahead), c %v (at t_min, holding a and b)", g.Suspectable("a"), g.Suspectable("c"))
	}
	if !g.IsWaiting("a") || !g.IsWaiting("b") {
		t.Fatal("a and b should be held behind c")
	}
	info, _ := g.Worker("c")
	if Overdue(info.Times, info.NTimes, info.Times.Latest, info.Times.Latest+5, 4, 20) {
		t.Fatal("overdue before the floor")
	}
	if !Overdue(info.Times, info.NTimes, info.Times.Latest, info.Times.Latest+21, 4, 20) {
		t.Fatal("not overdue past the floor with one timestamp")
	}
	cAt := info.Clock
	before := map[WorkerID]int64{}
	for _, w := range g.Workers() {
		before[w], _ = g.Clock(w)
	}
	rel, err := g.RemoveWorker("c") // suspended
	if err != nil {
		t.Fatal(err)
	}
	if len(rel) != 2 || g.IsWaiting("a") || g.IsWaiting("b") {
		t.Fatalf("suspension released %v; a and b should both go", rel)
	}
	if g.Min() < cAt {
		t.Fatalf("t_min %d fell below the suspended clock %d", g.Min(), cAt)
	}
	// The living go on; c comes back with its own next iteration, cAt.
	step("a")
	step("b")
	if _, err := g.AddWorker("c"); err != nil {
		t.Fatal(err)
	}
	got, _, err := g.AdvanceWorker("c", cAt)
	if err != nil {
		t.Fatal(err)
	}
	if got < cAt {
		t.Fatalf("re-admitted at %d, below its clock %d: an iteration would apply twice", got, cAt)
	}
	for w, c := range before {
		if now, _ := g.Clock(w); now < c {
			t.Fatalf("%s's clock went back %d → %d", w, c, now)
		}
	}
	if o := step("c"); o.Gap < 0 {
		t.Fatalf("re-admitted worker's push gap %d", o.Gap)
	}
	for _, w := range g.Workers() {
		info, _ := g.Worker(w)
		if !info.Waiting && info.Gap > g.Policy().SU() {
			t.Fatalf("%s released at gap %d > s_U %d", w, info.Gap, g.Policy().SU())
		}
	}
}
