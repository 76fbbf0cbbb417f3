package clock

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// checkInternals verifies the table's buckets, positions and free list and
// the gate's waiter buckets against each worker's own record.
func checkInternals(t *testing.T, g *Gate) {
	t.Helper()
	tab, live, waiting := g.table, 0, 0
	for i, id := range tab.ids {
		if id == "" {
			continue
		}
		live++
		if j, ok := tab.index[id]; !ok || j != int32(i) {
			t.Fatalf("index of %q is %d, slot %d", id, j, i)
		}
		b := tab.bk[i]
		if int(tab.pos[i]) >= len(b.at) || b.at[tab.pos[i]] != int32(i) || tab.find(b.clock) != b {
			t.Fatalf("%q not at its position %d in bucket %d", id, tab.pos[i], b.clock)
		}
		if g.ws[i].waiting != slices.Contains(b.wait, int32(i)) {
			t.Fatalf("%q waiting %v, in the wait list of %d: %v", id, g.ws[i].waiting, b.clock, b.wait)
		}
		if g.ws[i].waiting {
			waiting++
		}
	}
	if live != tab.Len() || live+len(tab.free) != len(tab.ids) || waiting != g.nWaiting {
		t.Fatalf("live %d len %d free %d slots %d waiting %d/%d", live, tab.Len(), len(tab.free), len(tab.ids), waiting, g.nWaiting)
	}
	n := 0
	var prev *bucket
	for b := tab.head; b != nil; prev, b = b, b.next {
		if len(b.at) == 0 || b.clock < tab.min || b.clock > tab.max || b.prev != prev || (prev != nil && prev.clock >= b.clock) {
			t.Fatalf("bucket %d of %d outside [%d, %d] or out of order", b.clock, len(b.at), tab.min, tab.max)
		}
		n += len(b.at)
	}
	if prev != tab.tail || (prev != nil && (tab.head.clock != tab.min || prev.clock != tab.max)) {
		t.Fatalf("head/tail do not match min %d max %d", tab.min, tab.max)
	}
	if n != live {
		t.Fatalf("%d in buckets, %d live", n, live)
	}
}

// TestIndexedGateMatchesRestoredGate applies random pushes, adds, removals
// and advances (up to 40 workers, so many share t_min) to one long-lived
// gate and, op by op, to a gate restored from its state just before: the
// restored gate has other indices, no spare buckets and no cached slowest
// worker, so equal answers show that none of those reach a decision.
func TestIndexedGateMatchesRestoredGate(t *testing.T) {
	for seed := range seeds() / 4 {
		rng := rand.New(rand.NewPCG(seed, 11))
		pol := randomPolicy(rng)
		g, _ := NewGate(pol)
		ready := map[WorkerID]bool{}
		next := 0
		var now int64
		for step := range 1500 {
			snap, _ := g.MarshalBinary()
			var fresh Gate
			if err := fresh.UnmarshalBinary(snap); err != nil {
				t.Fatal(err)
			}
			ids := g.Workers()
			var do func(*Gate) any
			switch k := rng.IntN(100); {
			case k < 3 || len(ids) < 2:
				w := WorkerID(fmt.Sprintf("w%03d", next))
				next++
				do = func(g *Gate) any { c, err := g.AddWorker(w); return fmt.Sprint(c, err) }
				ready[w] = true
			case k < 5:
				w := ids[rng.IntN(len(ids))]
				do = func(g *Gate) any { rel, err := g.RemoveWorker(w); return fmt.Sprint(rel, err) }
				delete(ready, w)
			case k < 7:
				w := ids[rng.IntN(len(ids))]
				c, _ := g.Clock(w)
				to := c + rng.Int64N(4)
				do = func(g *Gate) any { c, rel, err := g.AdvanceWorker(w, to); return fmt.Sprint(c, rel, err) }
				ready[w] = true
			default:
				var cands []WorkerID
				for _, id := range ids {
					if ready[id] {
						cands = append(cands, id)
					}
				}
				if len(cands) == 0 {
					continue
				}
				w := cands[rng.IntN(len(cands))]
				now += rng.Int64N(50)
				iter, _ := g.Clock(w)
				at := now
				do = func(g *Gate) any { out, err := g.Push(w, iter, at); return fmt.Sprintf("%+v %v", out, err) }
			}
			got, want := do(g), do(&fresh)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d %s step %d: long-lived %v, restored %v", seed, pol, step, got, want)
			}
			a, _ := g.MarshalBinary()
			b, _ := fresh.MarshalBinary()
			if !bytes.Equal(a, b) {
				t.Fatalf("seed %d step %d: encodings differ", seed, step)
			}
			checkInternals(t, g)
			for _, id := range g.Workers() {
				ready[id] = !g.IsWaiting(id)
			}
		}
	}
}

// TestPushSlotIsPush: pushes through slots (PushSlot, and PushSlotInto
// reusing one Outcome) decide as pushes through ids, and a slot of no live
// worker is refused.
func TestPushSlotIsPush(t *testing.T) {
	pol := Policy{Paradigm: DSSP, SL: 1, RMax: 4}
	a, _ := NewGate(pol)
	b, _ := NewGate(pol)
	c3, _ := NewGate(pol)
	ids := []WorkerID{"c", "a", "b"}
	slots := map[WorkerID]Slot{}
	for _, id := range ids {
		a.AddWorker(id)
		b.AddWorker(id)
		c3.AddWorker(id)
		slots[id], _ = b.Slot(id)
	}
	var reused Outcome
	rng := rand.New(rand.NewPCG(1, 1))
	for step := range 300 {
		w := ids[rng.IntN(len(ids))]
		if a.IsWaiting(w) {
			continue
		}
		c, _ := a.Clock(w)
		oa, ea := a.Push(w, c, int64(step)*10)
		ob, eb := b.PushSlot(slots[w], c, int64(step)*10)
		if !reflect.DeepEqual(oa, ob) || (ea == nil) != (eb == nil) {
			t.Fatalf("step %d %s: Push %+v %v, PushSlot %+v %v", step, w, oa, ea, ob, eb)
		}
		ec := c3.PushSlotInto(slots[w], c, int64(step)*10, &reused)
		oc := reused
		if len(oc.Others) == 0 {
			oc.Others = nil
		}
		if !reflect.DeepEqual(oa, oc) || (ea == nil) != (ec == nil) {
			t.Fatalf("step %d %s: Push %+v %v, PushSlotInto %+v %v", step, w, oa, ea, oc, ec)
		}
	}
	if _, err := b.PushSlot(slots["a"], 0, 0); err == nil {
		t.Error("PushSlot with a stale iteration accepted")
	}
	b.RemoveWorker("a")
	for _, s := range []Slot{slots["a"], -1, 3, 100} {
		if _, err := b.PushSlot(s, 0, 0); !errors.Is(err, ErrUnknownWorker) {
			t.Errorf("PushSlot(%d) after removal: %v", s, err)
		}
	}
}
