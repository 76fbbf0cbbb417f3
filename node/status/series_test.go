package status

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
	"unsafe"

	"dsspmesh/node/records"
)

// A fake mesh of two trainers: node-a (this node, age 0) computes two
// iterations a second; node-b answers every other second (its answer is
// seen twice, once 0.5 s old, once 1.5 s old). One evaluation every 3 s.
func fakeStatus(start time.Time, sec int) Status {
	now := start.Add(time.Duration(sec) * time.Second)
	s := Status{Node: "node-a", Phase: "training", Now: now}
	s.Trainers = append(s.Trainers, TrainerStatus{ID: "node-a", Iter: uint64(2 * sec), ItersPerSec: 2, Loss: 1 / float64(sec+1),
		ComputeSeconds: 0.75 * float64(sec), WaitSeconds: 0.25 * float64(sec)})
	answered := sec - sec%2 // node-b's answer came at answered+0.5 s
	age := float64(sec-answered) + 0.5
	s.Trainers = append(s.Trainers, TrainerStatus{ID: "node-b", Iter: uint64(answered), ItersPerSec: 1, AgeSeconds: age,
		ComputeSeconds: float64(answered), WaitSeconds: 0, WaitShare: 0})
	e := sec / 3
	s.Eval = &records.EvalResult{Accuracy: 0.5 + 0.01*float64(e), Loss: 1, At: start.Add(time.Duration(3*e) * time.Second), Seq: uint64(100 * e), Iter: uint64(e)}
	return s
}

// Run samples on the ticks it is given (injected time: the status's Now),
// and History gives the run from its first sample: one point per answer
// (an answer seen twice is one point), the wait share over the interval
// since the previous point, each evaluation once.
func TestSeriesKeepsTheRunSoFar(t *testing.T) {
	start := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	s := NewSeries(time.Second, 3600, 64)
	sec := 0
	tick := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, tick, func() Status { st := fakeStatus(start, sec); sec++; return st })
	}()
	for range 60 {
		tick <- time.Time{}
	}
	cancel()
	<-done

	h := s.History()
	if !h.Started.Equal(start) || h.Capacity != 3600 || h.EverySeconds != 1 {
		t.Fatalf("history header: %+v", h)
	}
	if len(h.Workers) != 2 || h.Workers[0].ID != "node-a" || h.Workers[1].ID != "node-b" {
		t.Fatalf("workers: %+v", h.Workers)
	}
	a, b := h.Workers[0], h.Workers[1]
	if len(a.T) != 60 || a.T[0] != start.UnixMilli() || a.T[59] != start.Add(59*time.Second).UnixMilli() || a.Iter[59] != 118 {
		t.Errorf("node-a: %d points, first at %d, last at %d, iteration %d", len(a.T), a.T[0], a.T[len(a.T)-1], a.Iter[len(a.Iter)-1])
	}
	if a.Wait[10] != 0.25 || a.Rate[10] != 2 {
		t.Errorf("node-a at 10 s: wait share %g, rate %g; want 0.25, 2", a.Wait[10], a.Rate[10])
	}
	if len(b.T) != 30 || b.T[0] != start.Add(-500*time.Millisecond).UnixMilli() || b.T[1]-b.T[0] != 2000 {
		t.Errorf("node-b: %d points (want one per answer, 30), times %v…", len(b.T), b.T[:min(3, len(b.T))])
	}
	if n := len(h.Evals.T); n != 20 || h.Evals.Seq[19] != 1900 || h.Evals.T[1]-h.Evals.T[0] != 3000 {
		t.Errorf("evaluations: %d (want 20), %+v", n, h.Evals)
	}
}

// The history is bounded: capacity points per worker, maxWorkers workers
// (the one silent longest is dropped for a new one), and a worker that
// stopped answering keeps only the points within the window.
func TestSeriesIsBounded(t *testing.T) {
	start := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	s := NewSeries(time.Second, 10, 2)
	at := func(sec int, ids ...string) Status {
		st := Status{Now: start.Add(time.Duration(sec) * time.Second)}
		for _, id := range ids {
			st.Trainers = append(st.Trainers, TrainerStatus{ID: id, Iter: uint64(sec)})
		}
		return st
	}
	for sec := range 5 {
		s.Sample(at(sec, "a", "b"))
	}
	for sec := 5; sec < 12; sec++ {
		s.Sample(at(sec, "a")) // b falls silent at 4 s
	}
	h := s.History()
	if len(h.Workers) != 2 || len(h.Workers[0].T) != 10 || h.Workers[0].Iter[0] != 2 {
		t.Fatalf("after 12 samples with capacity 10: %+v", h.Workers)
	}
	if b := h.Workers[1]; b.ID != "b" || len(b.T) != 4 || b.Iter[0] != 1 {
		t.Errorf("silent b keeps what is within 10 s of the newest sample (1..4 s): %+v", b)
	}
	s.Sample(at(12, "a", "c")) // a third worker: b, silent longest, goes
	h = s.History()
	if len(h.Workers) != 2 || h.Workers[0].ID != "a" || h.Workers[1].ID != "c" {
		t.Errorf("workers after c came: %+v", h.Workers)
	}
	for sec := 13; sec < 40; sec++ {
		s.Sample(at(sec, "a"))
	}
	if h = s.History(); len(h.Workers) != 1 || len(h.Workers[0].T) != 10 || h.Workers[0].Iter[9] != 39 {
		t.Errorf("after 40 s: %+v", h.Workers)
	}
	// The memory: capacity points of 32 bytes per worker kept, and no more.
	if n := cap(s.workers["a"].points.items); n != 10 || unsafe.Sizeof(workerPoint{}) != 32 || unsafe.Sizeof(evalPoint{}) != 32 {
		t.Errorf("a ring of %d points of %d bytes (evaluations: %d), want 10 of 32", n, unsafe.Sizeof(workerPoint{}), unsafe.Sizeof(evalPoint{}))
	}
}

// GET /status/history serves the history as JSON; a non-finite loss (a
// diverging job) is null, not a failed encoding.
func TestHistoryEndpoint(t *testing.T) {
	s := NewSeries(time.Second, 100, 8)
	now := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	s.Sample(Status{Now: now, Trainers: []TrainerStatus{{ID: "node-a", Iter: 3, ItersPerSec: 1.5, Loss: math.NaN()}}})
	m := NewMetrics(func() Status { return sampleStatus() })
	srv := httptest.NewServer(WithSeries(NewHTTPHandler(func() Status { return sampleStatus() }, m), s))
	defer srv.Close()
	res, err := http.Get(srv.URL + "/status/history")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var raw struct {
		Started time.Time `json:"started"`
		Workers []struct {
			ID   string     `json:"id"`
			T    []int64    `json:"t"`
			Iter []uint64   `json:"iter"`
			Loss []*float64 `json:"loss"`
		} `json:"workers"`
	}
	if err := json.NewDecoder(res.Body).Decode(&raw); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /status/history: %d, %v", res.StatusCode, err)
	}
	if len(raw.Workers) != 1 || raw.Workers[0].T[0] != now.UnixMilli() || raw.Workers[0].Iter[0] != 3 || raw.Workers[0].Loss[0] != nil || !raw.Started.Equal(now) {
		t.Errorf("history: %+v", raw)
	}
	if res, err := http.Get(srv.URL + "/status"); err != nil || res.StatusCode != http.StatusOK {
		t.Errorf("/status behind WithSeries: %v %v", res, err)
	}
}
