package eval

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Downloads of the model (GET /model.safetensors) cost each client a
// bounded time and the node a bounded memory, however many clients do not
// read (docs/security.md, "Downloads"):
//
//   - a response is written 64 KiB at a time, each within
//     ExportLimits.Stall of the last: a client that stops reading (or
//     never starts) is cut Stall after its socket buffer filled, whatever
//     the model's size, and its connection closed with whatever else it
//     pipelined; the whole response keeps its deadline of Base + size ÷
//     RateFloor;
//   - at most PerClient model responses run at once for one client
//     address and Total for all: a request beyond is answered 503 at once
//     with Retry-After and its connection closed, holding nothing (dssp
//     export asks again);
//   - fresh snapshots are shared: a request takes the newest snapshot
//     read for downloads if it is at most FreshFor old, else reads one
//     when fewer than Concurrent are held by responses, else takes the
//     newest held (its age in X-Dssp-Snapshot-Age). So at most Concurrent
//     snapshots are in memory for downloads, and no slot is held by a
//     request waiting in a queue or by a response blocked on its client.

// downloadChunk is the most written to a client within one Stall.
const downloadChunk = 64 << 10

// stallWriter writes a response in chunks, each with a deadline of Stall
// from its start (and never past the response's own deadline).
type stallWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	end   time.Time
	stall time.Duration
}

// stalling wraps w, a response of size bytes, with its deadlines
// (ExportLimits). Not every ResponseWriter has deadlines (a test's
// recorder): then none is set.
func (rm *Room) stalling(w http.ResponseWriter, size int64) *stallWriter {
	now := time.Now()
	s := &stallWriter{ResponseWriter: w, rc: http.NewResponseController(w), end: rm.export.deadline(now, size), stall: rm.export.Stall}
	s.rc.SetWriteDeadline(s.deadline(now))
	return s
}

func (s *stallWriter) deadline(now time.Time) time.Time {
	if d := now.Add(s.stall); d.Before(s.end) {
		return d
	}
	return s.end
}

func (s *stallWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := p[:min(len(p), downloadChunk)]
		s.rc.SetWriteDeadline(s.deadline(time.Now()))
		k, err := s.ResponseWriter.Write(c)
		n += k
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// Unwrap is the response under it, for http.ResponseController.
func (s *stallWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// admit takes a place for a model response to r's client, or answers 503
// (Retry-After: 1) and reports false when the client or the node runs as
// many as ExportLimits allows. done gives the place back.
func (rm *Room) admit(w http.ResponseWriter, r *http.Request) (done func(), ok bool) {
	client, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		client = r.RemoteAddr
	}
	d := &rm.downloads
	d.mu.Lock()
	n := d.byClient[client]
	if n >= rm.export.PerClient || d.total >= rm.export.Total {
		total := d.total
		d.mu.Unlock()
		rm.refusedDownloads.Add(1)
		// The connection closes after the refusal: whatever else its
		// client pipelined behind it is dropped, not answered in turn.
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Connection", "close")
		http.Error(w, fmt.Sprintf("node %s: %d model downloads run for %s and %d in all (at most %d and %d at once); retry later",
			rm.d.ID, n, client, total, rm.export.PerClient, rm.export.Total), http.StatusServiceUnavailable)
		return nil, false
	}
	if d.byClient == nil {
		d.byClient = map[string]int{}
	}
	d.byClient[client]++
	d.total++
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		if d.byClient[client]--; d.byClient[client] <= 0 {
			delete(d.byClient, client)
		}
		d.total--
		d.mu.Unlock()
	}, true
}

// fresh is a snapshot for a download and its release: see the rules at
// the top of this file. It waits for a read in flight, and reads within
// ctx.
func (rm *Room) fresh(ctx context.Context) (*freshSnap, func(), error) {
	f := &rm.freshSnaps
	for {
		f.mu.Lock()
		var newest *freshSnap
		if n := len(f.held); n > 0 {
			newest = f.held[n-1]
		}
		switch {
		case newest != nil && time.Since(newest.at) <= rm.export.FreshFor:
		case f.reading != nil:
			wait := f.reading
			f.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		case len(f.held) < rm.export.Concurrent:
			done := make(chan struct{})
			f.reading = done
			f.mu.Unlock()
			snap, err := rm.Read(ctx, "export", nil)
			f.mu.Lock()
			f.reading = nil
			close(done)
			if err != nil {
				f.mu.Unlock()
				return nil, nil, err
			}
			newest = &freshSnap{snap: snap, at: time.Now()}
			f.held = append(f.held, newest)
		}
		newest.refs++
		f.mu.Unlock()
		return newest, func() { f.release(newest) }, nil
	}
}

func (f *freshSnaps) release(s *freshSnap) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.refs--; s.refs > 0 {
		return
	}
	for i, h := range f.held {
		if h == s {
			f.held = append(f.held[:i], f.held[i+1:]...)
			return
		}
	}
}

// age is the X-Dssp-Snapshot-Age header's value: seconds since s was read.
func (s *freshSnap) age() string {
	return strconv.FormatFloat(time.Since(s.at).Seconds(), 'f', 1, 64)
}
