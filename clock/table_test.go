package clock

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestTableMatchesNaive checks min, max, counts and clocks against a plain
// map after random adds, removes and advances.
func TestTableMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	tab, naive := NewTable(), map[WorkerID]int64{}
	for i := range 20000 {
		w := WorkerID(fmt.Sprintf("w%d", rng.IntN(20)))
		_, present := naive[w]
		switch op := rng.IntN(10); {
		case op == 0 && present:
			if err := tab.Remove(w); err != nil {
				t.Fatal(err)
			}
			delete(naive, w)
		case op == 1 && !present:
			c := tab.Min() + rng.Int64N(3)
			if err := tab.Add(w, c); err != nil {
				t.Fatal(err)
			}
			naive[w] = c
		case present:
			c, err := tab.Advance(w)
			if err != nil || c != naive[w]+1 {
				t.Fatalf("advance %s: %d %v, want %d", w, c, err, naive[w]+1)
			}
			naive[w] = c
		}
		var lo, hi int64
		first := true
		count := map[int64]int{}
		for _, c := range naive {
			if first {
				lo, hi, first = c, c, false
			}
			lo, hi = min(lo, c), max(hi, c)
			count[c]++
		}
		if tab.Len() != len(naive) || tab.Min() != lo || tab.Max() != hi || tab.Spread() != hi-lo {
			t.Fatalf("step %d: len %d min %d max %d, want %d %d %d", i, tab.Len(), tab.Min(), tab.Max(), len(naive), lo, hi)
		}
		if tab.CountAt(lo) != count[lo] {
			t.Fatalf("step %d: %d at min, want %d", i, tab.CountAt(lo), count[lo])
		}
	}
}

func TestTableErrors(t *testing.T) {
	tab := NewTable()
	if err := tab.Add("a", -1); err == nil {
		t.Error("negative clock accepted")
	}
	if _, err := tab.Advance("a"); err == nil {
		t.Error("advance of unknown worker accepted")
	}
	if err := tab.Remove("a"); err == nil {
		t.Error("remove of unknown worker accepted")
	}
}
