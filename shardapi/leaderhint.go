package shardapi

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"dsspmesh/mesh"
)

// Finding the leader fast.
//
// A worker's client learns that its leader is gone in one of two ways: the
// stream breaks (the connection dropped, the peer closed it), or the stream
// goes silent — a kill -9 or SIGSTOP of the leader's process leaves the QUIC
// connection open until its idle timeout, and a leader that is merely slow
// to commit is silent too. It does not wait out ReplyTimeout for either:
//
//   - From the dial to the final reply, a watcher counts the frames that
//     arrive. After ProbeAfter without one (HeldSilence after a Held
//     frame, whose keep-alives come every HeldKeepAlive) — plus, for a
//     request or reply over 1 MiB, the time its bytes take to cross at
//     256 KiB/s (transferAllowance) — it probes every
//     other replica at once with an OpStatus request, and again every
//     ProbeAfter while the silence lasts. Each answer names the leader that
//     replica knows and its raft term; the newest term's leader wins. If
//     that is another node, the watcher abandons the attempt — cancels the
//     dial, times out a write blocked on a paused peer's full congestion
//     window, or closes the stream under the receive — and the request is
//     resent there at once (same (worker, iter): dedupe makes it safe). If it is still the silent node (the election has not
//     happened yet, or the leader is just slow) the client keeps waiting.
//   - A broken stream probes at once, in parallel, instead of backing off
//     and trying the replicas one by one.
//
// Membership's view bounds every choice: a hint, a remembered leader or a
// probe target must be live by ClientConfig.Alive, so a node declared dead
// is never dialled again; the node that just failed is passed over in
// round-robin and probes until it answers again.

// probeResult is one replica's answer to a probe.
type probeResult struct {
	from   mesh.NodeID
	leader mesh.NodeID
	term   uint64
}

// watch is the state a request's watcher shares with the attempt (try).
type watch struct {
	frames atomic.Uint64 // frames received on the stream
	held   atomic.Bool   // the last frame was Held
	found  atomic.Value  // mesh.NodeID: the new leader the watcher found
	stop   chan struct{}
	done   chan struct{}
	cancel func() // ends the attempt's dial

	mu      sync.Mutex
	s       mesh.Stream // nil while dialling
	sending bool        // the request is being written
	aborted bool        // the watcher gave up on the attempt
}

// attach hands the dialled stream to the watcher before the request is
// written; false: the watcher already gave up.
func (w *watch) attach(s mesh.Stream) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.s, w.sending = s, true
	return !w.aborted
}

// sent ends the write; false: the watcher gave up meanwhile (the write may
// still have completed).
func (w *watch) sent() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sending = false
	return !w.aborted
}

// abort ends the attempt wherever it is: a dial is cancelled, a blocked
// write times out at once (closing a stream under a write is not allowed),
// a receive fails on the closed stream.
func (w *watch) abort() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.aborted = true
	w.cancel()
	switch {
	case w.s == nil:
	case w.sending:
		w.s.SetWriteDeadline(time.Now())
	default:
		w.s.Close()
	}
}

// watchSilence runs while try dials target, writes the request and waits
// for the reply: on silence it probes the other replicas and, when they
// name another leader, records it in w.found and aborts the attempt.
// allow is added to the silence it tolerates: the time a large request or
// reply takes to cross (transferAllowance), during which no frame arrives.
func (c *Client) watchSilence(ctx context.Context, target, failed mesh.NodeID, allow time.Duration, w *watch) {
	defer close(w.done)
	last := w.frames.Load()
	var silent time.Duration
	for {
		select {
		case <-c.after(c.cfg.ProbeAfter):
		case <-w.stop:
			return
		case <-ctx.Done():
			return
		}
		if n := w.frames.Load(); n != last {
			last, silent = n, 0
			continue
		}
		silent += c.cfg.ProbeAfter
		need := c.cfg.ProbeAfter + allow
		if w.held.Load() {
			need = c.cfg.HeldSilence + allow
		}
		if silent < need {
			continue
		}
		if l := c.probe(ctx, target, failed); l != "" && l != target {
			select {
			case <-w.stop: // the reply came meanwhile
				return
			default:
			}
			w.found.Store(l)
			w.abort()
			return
		}
	}
}

// probe asks every live replica but skip and failed (the silent one and
// the one that failed before it), in parallel, which leader it knows, and
// returns the leader named with the newest term ("" when none answered
// with one within ProbeTimeout). It returns as soon as a replica names
// itself (first-hand), else when all answered. A replica that names skip,
// or a node Alive counts dead, gives no hint. Safe to call from the
// watcher: it touches no field of c that the caller's goroutine writes.
func (c *Client) probe(ctx context.Context, skip, failed mesh.NodeID) mesh.NodeID {
	targets := slices.DeleteFunc(slices.Clone(c.cfg.Replicas()), func(id mesh.NodeID) bool { return id == skip || id == failed || !c.live(id) })
	if len(targets) == 0 {
		return ""
	}
	pctx, cancel := context.WithTimeout(ctx, c.cfg.ProbeTimeout)
	defer cancel()
	c.probes.Add(1)
	res := make(chan probeResult, len(targets))
	for _, id := range targets {
		go func() {
			r, ok := c.probeOne(pctx, id)
			if !ok {
				r = probeResult{from: id}
			}
			res <- r
		}()
	}
	// Late probes end with pctx (cancel closes their streams); nobody waits.
	var best probeResult
	for range targets {
		var r probeResult
		select {
		case r = <-res:
		case <-pctx.Done():
			return best.leader
		}
		if r.leader == "" || r.leader == skip || !c.live(r.leader) {
			continue
		}
		if r.leader == r.from {
			return r.leader // it leads, first-hand
		}
		if r.term > best.term || best.leader == "" {
			best = r // the newest term's second-hand hint
		}
	}
	return best.leader
}

// probeOne sends one OpStatus to id on a stream of its own.
func (c *Client) probeOne(ctx context.Context, id mesh.NodeID) (probeResult, bool) {
	addr, err := c.resolve(id)
	if err != nil {
		return probeResult{}, false
	}
	s, err := c.tr.Dial(ctx, id, addr, mesh.Channel{Kind: mesh.KindRPC, Shard: c.cfg.Shard})
	if err != nil {
		return probeResult{}, false
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	seq := int64(c.probeSeq.Add(1))
	if err := s.SendFrame(Request{Op: OpStatus, PushMeta: PushMeta{PushID: PushID{Worker: c.cfg.Worker, Iter: seq}}}, nil); err != nil {
		return probeResult{}, false
	}
	for {
		var rep Reply
		if _, err := s.RecvFrame(&rep); err != nil {
			return probeResult{}, false
		}
		if rep.Op == OpStatus && rep.Iter == seq {
			return probeResult{from: id, leader: mesh.NodeID(rep.Leader), term: rep.Term}, rep.Status == ReplyOK
		}
	}
}

// live reports whether membership counts id live (ClientConfig.Alive).
func (c *Client) live(id mesh.NodeID) bool {
	return c.cfg.Alive == nil || c.cfg.Alive(id)
}
