package balance

import (
	"container/heap"
	"fmt"
	"math"
)

// Bounds are one worker's batch limits: Min ≤ b ≤ Max (Max 0: no limit but
// the global batch).
type Bounds struct{ Min, Max int64 }

// Allocate returns integer batches b (len(models)) with Σb = total and
// bounds[i].Min ≤ b[i] ≤ bounds[i].Max that minimise max_i models[i].Time(b[i]);
// among optimal allocations it returns one chosen deterministically (ties
// to the lower index). bounds may be shorter than models: missing entries
// are {0, 0}. It fails when the bounds cannot hold total.
//
// The continuous solution is the equal finish T with
// Σ clamp((T − A_i)/P_i, Min_i, Max_i) = total, found by bisection and
// taken from below; its floors never exceed an optimal integer allocation,
// and the remaining samples (fewer than one per worker before clamping)
// go one at a time to the worker whose finish with one more sample is
// earliest.
func Allocate(models []Model, total int64, bounds []Bounds) ([]int64, error) {
	n := len(models)
	if n == 0 {
		if total == 0 {
			return nil, nil
		}
		return nil, fmt.Errorf("balance: %d samples for no worker", total)
	}
	lo, hi := make([]int64, n), make([]int64, n)
	var sumLo, sumHi int64
	for i := range n {
		var b Bounds
		if i < len(bounds) {
			b = bounds[i]
		}
		lo[i], hi[i] = max(b.Min, 0), b.Max
		if hi[i] <= 0 || hi[i] > total {
			hi[i] = total
		}
		if lo[i] > hi[i] {
			return nil, fmt.Errorf("balance: worker %d: minimum batch %d above its maximum %d", i, lo[i], hi[i])
		}
		if !(models[i].P > 0) || math.IsInf(models[i].P, 0) || math.IsNaN(models[i].A) || math.IsInf(models[i].A, 0) {
			return nil, fmt.Errorf("balance: worker %d: bad model A=%g P=%g", i, models[i].A, models[i].P)
		}
		sumLo += lo[i]
		sumHi += hi[i]
	}
	if total < sumLo || total > sumHi {
		return nil, fmt.Errorf("balance: global batch %d outside what the bounds allow [%d, %d]", total, sumLo, sumHi)
	}
	fill := func(t float64) ([]int64, int64) {
		b := make([]int64, n)
		var s int64
		for i, m := range models {
			x := math.Floor((t - m.A) / m.P)
			switch {
			case !(x >= float64(lo[i])): // also NaN
				b[i] = lo[i]
			case x >= float64(hi[i]):
				b[i] = hi[i]
			default:
				b[i] = int64(x)
			}
			s += b[i]
		}
		return b, s
	}
	// Bisection on T between "everyone at Min" and "everyone at Max".
	tLo, tHi := math.Inf(1), math.Inf(-1)
	for i, m := range models {
		tLo = math.Min(tLo, m.Time(lo[i]))
		tHi = math.Max(tHi, m.Time(hi[i]))
	}
	for range 200 {
		mid := tLo + (tHi-tLo)/2
		if mid <= tLo || mid >= tHi {
			break
		}
		if _, s := fill(mid); s <= total {
			tLo = mid
		} else {
			tHi = mid
		}
	}
	b, s := fill(tLo)
	if s > total { // cannot happen: fill(min Time(lo)) is Σlo ≤ total
		return nil, fmt.Errorf("balance: allocator overshot %d > %d", s, total)
	}
	q := make(nextQueue, 0, n)
	for i := range n {
		if b[i] < hi[i] {
			q = append(q, next{finish: models[i].Time(b[i] + 1), worker: i})
		}
	}
	heap.Init(&q)
	for ; s < total; s++ {
		top := &q[0]
		i := top.worker
		b[i]++
		if b[i] < hi[i] {
			top.finish = models[i].Time(b[i] + 1)
			heap.Fix(&q, 0)
		} else {
			heap.Pop(&q)
		}
	}
	return b, nil
}

// MaxTime is the slowest predicted finish of allocation b.
func MaxTime(models []Model, b []int64) float64 {
	t := 0.0
	for i, m := range models {
		if b[i] > 0 {
			t = math.Max(t, m.Time(b[i]))
		}
	}
	return t
}

type next struct {
	finish float64
	worker int
}

// nextQueue is a min-heap on (finish, worker).
type nextQueue []next

func (q nextQueue) Len() int { return len(q) }
func (q nextQueue) Less(i, j int) bool {
	return q[i].finish < q[j].finish || (q[i].finish == q[j].finish && q[i].worker < q[j].worker)
}
func (q nextQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *nextQueue) Push(x any)   { *q = append(*q, x.(next)) }
func (q *nextQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
