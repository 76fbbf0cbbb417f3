package status

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Series is the history of what the dashboard draws, kept by every node so
// that a page opened late shows the run so far: each training member's
// iterations computed, iterations per second, wait share and training loss,
// and the evaluations (accuracy and loss), sampled from the node's own
// [Status] once per tick ([Series.Run]) and served at /status/history
// ([WithSeries]).
//
// Memory is bounded: at most Capacity points per worker for at most
// MaxWorkers workers (the worker whose newest point is oldest is dropped
// for a new one) and Capacity evaluations, each point 32 bytes. With
// [SeriesCapacity] and [SeriesMaxWorkers] (one hour at one sample a
// second) that is 3600 × 32 B = 115,200 B per worker, at most
// 64 × 115,200 B = 7,372,800 B for the workers plus 115,200 B for the
// evaluations (about 7.5 MB; 460 KB for a three-worker mesh).
type Series struct {
	capacity, maxWorkers int
	every                time.Duration

	mu      sync.Mutex
	started time.Time // the first sample; zero before it
	newest  time.Time // the newest sample
	workers map[string]*workerSeries
	evals   ring[evalPoint]
}

// SeriesCapacity and SeriesMaxWorkers bound a node's [Series]: an hour at
// [SeriesEvery], for up to 64 workers.
const (
	SeriesEvery      = time.Second
	SeriesCapacity   = 3600
	SeriesMaxWorkers = 64
)

// workerPoint is one sample of a worker loop (32 bytes).
type workerPoint struct {
	t    int64 // Unix ms of the worker's answer
	iter uint64
	rate float32
	wait float32 // share of the time since the previous point spent waiting
	loss float32
}

// evalPoint is one evaluation (32 bytes).
type evalPoint struct {
	t         int64 // Unix ms
	seq, iter uint64
	acc, loss float32
}

type workerSeries struct {
	points        ring[workerPoint]
	compute, wait float64 // the cumulative seconds at the newest point
}

// ring keeps the last cap items appended.
type ring[T any] struct {
	items []T
	next  int // where the next item goes once full
}

func (r *ring[T]) add(v T, capacity int) {
	if r.items == nil {
		r.items = make([]T, 0, capacity) // once: the bound is exact
	}
	if len(r.items) < capacity {
		r.items = append(r.items, v)
		return
	}
	r.items[r.next] = v
	r.next = (r.next + 1) % capacity
}

// each calls f on the items oldest first.
func (r *ring[T]) each(f func(T)) {
	for i := range r.items {
		f(r.items[(r.next+i)%len(r.items)])
	}
}

func (r *ring[T]) last() (T, bool) {
	var zero T
	if len(r.items) == 0 {
		return zero, false
	}
	return r.items[(r.next+len(r.items)-1)%len(r.items)], true
}

// NewSeries keeps capacity samples taken every every (the window is their
// product) for at most maxWorkers workers.
func NewSeries(every time.Duration, capacity, maxWorkers int) *Series {
	return &Series{capacity: max(capacity, 1), maxWorkers: max(maxWorkers, 1), every: every, workers: map[string]*workerSeries{}}
}

// Run samples status() on every tick until ctx ends. The node passes a
// time.Ticker's channel; tests pass their own.
func (s *Series) Run(ctx context.Context, tick <-chan time.Time, status func() Status) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			s.Sample(status())
		}
	}
}

// Sample records st at st.Now: a point per trainer at the time of its
// answer (st.Now less its age; an answer already recorded is skipped) and
// the latest evaluation if it is new.
func (s *Series) Sample(st Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started.IsZero() {
		s.started = st.Now
	}
	s.newest = st.Now
	for _, tr := range st.Trainers {
		at := st.Now.Add(-time.Duration(tr.AgeSeconds * float64(time.Second))).UnixMilli()
		w := s.workers[tr.ID]
		if w == nil {
			s.makeRoomLocked()
			w = &workerSeries{}
			s.workers[tr.ID] = w
		}
		wait := tr.WaitShare
		if p, ok := w.points.last(); ok {
			if at-p.t < s.every.Milliseconds()/2 {
				continue // the same answer as last time
			}
			// The share since the previous point; a restarted worker's
			// totals start again, and then its lifetime share is right.
			if dc, dw := tr.ComputeSeconds-w.compute, tr.WaitSeconds-w.wait; dc >= 0 && dw >= 0 && dc+dw > 0 {
				wait = dw / (dc + dw)
			}
		}
		w.compute, w.wait = tr.ComputeSeconds, tr.WaitSeconds
		w.points.add(workerPoint{t: at, iter: tr.Iter, rate: float32(tr.ItersPerSec), wait: float32(wait), loss: float32(tr.Loss)}, s.capacity)
	}
	if e := st.Eval; e != nil {
		if p, ok := s.evals.last(); !ok || e.Seq > p.seq || (e.Seq == p.seq && e.At.UnixMilli() > p.t) {
			s.evals.add(evalPoint{t: e.At.UnixMilli(), seq: e.Seq, iter: e.Iter, acc: float32(e.Accuracy), loss: float32(e.Loss)}, s.capacity)
		}
	}
}

// makeRoomLocked drops the worker whose newest point is oldest when
// maxWorkers are kept.
func (s *Series) makeRoomLocked() {
	if len(s.workers) < s.maxWorkers {
		return
	}
	oldest, at := "", int64(math.MaxInt64)
	for id, w := range s.workers {
		if p, ok := w.points.last(); !ok || p.t < at {
			oldest, at = id, p.t
			if !ok {
				at = math.MinInt64
			}
		}
	}
	delete(s.workers, oldest)
}

// SeriesHistory is the JSON of /status/history: columns of equal length,
// times in Unix milliseconds, oldest first. A non-finite value is null.
type SeriesHistory struct {
	EverySeconds float64 `json:"every_seconds"`
	Capacity     int     `json:"capacity"`
	MaxWorkers   int     `json:"max_workers"`
	// Started is the first sample (about the node's start); zero before it.
	Started time.Time `json:"started"`
	// Workers are the worker loops sampled, by id, each with the points of
	// the last Capacity × EverySeconds before the newest sample.
	Workers []WorkerHistory `json:"workers"`
	Evals   EvalHistory     `json:"evals"`
}

// WorkerHistory is one worker loop's samples: Iter is the iterations its
// loop has computed since its process started, Rate its iterations per
// second, Wait the share of the time since the previous sample it spent
// pushing or held by a gate (0–1), Loss its training loss.
type WorkerHistory struct {
	ID   string    `json:"id"`
	T    []int64   `json:"t"`
	Iter []uint64  `json:"iter"`
	Rate []float32 `json:"rate"`
	Wait []float32 `json:"wait"`
	Loss []float32 `json:"loss"`
}

// EvalHistory is the evaluations seen, one per sample at most (the newest).
type EvalHistory struct {
	T        []int64   `json:"t"`
	Seq      []uint64  `json:"seq"`
	Iter     []uint64  `json:"iter"`
	Accuracy []float32 `json:"accuracy"`
	Loss     []float32 `json:"loss"`
}

// History returns a copy of what is kept, sorted by worker id.
func (s *Series) History() SeriesHistory {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := SeriesHistory{EverySeconds: s.every.Seconds(), Capacity: s.capacity, MaxWorkers: s.maxWorkers, Started: s.started,
		Workers: []WorkerHistory{}, Evals: EvalHistory{T: []int64{}, Seq: []uint64{}, Iter: []uint64{}, Accuracy: []float32{}, Loss: []float32{}}}
	from := s.newest.Add(-time.Duration(s.capacity) * s.every).UnixMilli()
	for id, w := range s.workers {
		wh := WorkerHistory{ID: id, T: []int64{}, Iter: []uint64{}, Rate: []float32{}, Wait: []float32{}, Loss: []float32{}}
		w.points.each(func(p workerPoint) {
			if p.t < from {
				return
			}
			wh.T, wh.Iter, wh.Rate = append(wh.T, p.t), append(wh.Iter, p.iter), append(wh.Rate, p.rate)
			wh.Wait, wh.Loss = append(wh.Wait, p.wait), append(wh.Loss, p.loss)
		})
		if len(wh.T) > 0 {
			h.Workers = append(h.Workers, wh)
		}
	}
	slices.SortFunc(h.Workers, func(a, b WorkerHistory) int { return strings.Compare(a.ID, b.ID) })
	s.evals.each(func(p evalPoint) {
		e := &h.Evals
		e.T, e.Seq, e.Iter = append(e.T, p.t), append(e.Seq, p.seq), append(e.Iter, p.iter)
		e.Accuracy, e.Loss = append(e.Accuracy, p.acc), append(e.Loss, p.loss)
	})
	return h
}
