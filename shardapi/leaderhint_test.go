package shardapi

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"dsspmesh/internal/testlogger"
	"dsspmesh/mesh"
)

// fakeShard is a shard of scripted replicas on the in-memory network: each
// answers status probes with the leader it is told to name, answers pushes
// OK when it leads and NotLeader otherwise, or swallows everything while
// frozen (a SIGSTOPped or killed process whose connection is still open).
type fakeShard struct {
	t   *testing.T
	net *mesh.InmemNetwork
	trs map[mesh.NodeID]*mesh.InmemTransport

	mu      sync.Mutex
	leader  mesh.NodeID // who every unfrozen replica names
	term    uint64
	frozen  map[mesh.NodeID]bool
	pushes  map[mesh.NodeID][]int64 // pushes answered OK, per replica
	dialed  map[mesh.NodeID]int     // streams the client opened, per replica
	stalled map[mesh.NodeID]bool    // the client's sends to it block (stallingStream)
	live    []mesh.NodeID           // what membership says is alive
}

func newFakeShard(t *testing.T, ids ...mesh.NodeID) *fakeShard {
	f := &fakeShard{t: t, net: mesh.NewInmemNetwork(), trs: map[mesh.NodeID]*mesh.InmemTransport{},
		frozen: map[mesh.NodeID]bool{}, stalled: map[mesh.NodeID]bool{}, pushes: map[mesh.NodeID][]int64{}, dialed: map[mesh.NodeID]int{}, live: ids}
	for _, id := range ids {
		tr, err := f.net.NewTransport(id, string(id), mesh.DefaultFrameLimits())
		if err != nil {
			t.Fatal(err)
		}
		ln, err := tr.Listen(mesh.Channel{Kind: mesh.KindRPC, Shard: 1})
		if err != nil {
			t.Fatal(err)
		}
		f.trs[id] = tr
		t.Cleanup(func() { tr.Close() })
		go func() {
			for {
				s, err := ln.Accept(context.Background())
				if err != nil {
					return
				}
				go f.serve(id, s)
			}
		}()
	}
	return f
}

func (f *fakeShard) serve(id mesh.NodeID, s mesh.Stream) {
	defer s.Close()
	for {
		var req Request
		if _, err := s.RecvFrame(&req); err != nil {
			return
		}
		f.mu.Lock()
		frozen, leader, term := f.frozen[id], f.leader, f.term
		rep := Reply{Op: req.Op, PushID: req.PushID, Leader: string(leader), Term: term}
		switch {
		case frozen:
			f.mu.Unlock()
			continue
		case req.Op == OpStatus:
			rep.Status = ReplyOK
		case leader == id:
			rep.Status = ReplyOK
			f.pushes[id] = append(f.pushes[id], req.Iter)
		default:
			rep.Status = ReplyNotLeader
		}
		f.mu.Unlock()
		if err := s.SendFrame(rep, nil); err != nil {
			return
		}
	}
}

func (f *fakeShard) set(leader mesh.NodeID, term uint64, frozen ...mesh.NodeID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leader, f.term = leader, term
	for _, id := range frozen {
		f.frozen[id] = true
	}
}

// client returns a worker's client on its own transport, with a reply
// timeout of an hour (a test that waited for it would not end) and the
// silence watcher's timer in the test's hands: every timer it asks for is
// sent on the returned channel, to be fired by the test.
func (f *fakeShard) client() (*Client, chan chan time.Time) {
	tr, err := f.net.NewTransport("w1", "w1", mesh.DefaultFrameLimits())
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { tr.Close() })
	timers := make(chan chan time.Time, 64)
	cfg := DefaultClientConfig(1, "w1", func() []mesh.NodeID {
		f.mu.Lock()
		defer f.mu.Unlock()
		return slices.Clone(f.live)
	})
	cfg.ReplyTimeout = time.Hour
	cfg.Alive = func(id mesh.NodeID) bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return slices.Contains(f.live, id)
	}
	cfg.After = func(time.Duration) <-chan time.Time {
		ch := make(chan time.Time, 1)
		timers <- ch
		return ch
	}
	c, err := NewClient(cfg, countingDialer{tr, f}, func(id mesh.NodeID) (string, error) { return string(id), nil },
		testlogger.New(f.t, slog.LevelWarn))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c, timers
}

type countingDialer struct {
	*mesh.InmemTransport
	f *fakeShard
}

func (d countingDialer) Dial(ctx context.Context, peer mesh.NodeID, addr string, ch mesh.Channel) (mesh.Stream, error) {
	d.f.mu.Lock()
	d.f.dialed[peer]++
	d.f.mu.Unlock()
	s, err := d.InmemTransport.Dial(ctx, peer, addr, ch)
	if err != nil {
		return nil, err
	}
	return &stallingStream{Stream: s, f: d.f, unblock: make(chan struct{})}, nil
}

// stallingStream is a client's stream whose SendFrame blocks while its
// peer is in fakeShard.stalled — a paused leader whose congestion window
// is full — until a write deadline is set (as a QUIC stream's Write).
type stallingStream struct {
	mesh.Stream
	f       *fakeShard
	once    sync.Once
	unblock chan struct{}
}

func (s *stallingStream) SendFrame(h any, p []byte) error {
	s.f.mu.Lock()
	stalled := s.f.stalled[s.Peer()]
	s.f.mu.Unlock()
	if stalled {
		<-s.unblock
		return os.ErrDeadlineExceeded
	}
	return s.Stream.SendFrame(h, p)
}

func (s *stallingStream) SetWriteDeadline(t time.Time) error {
	if !t.IsZero() && !t.After(time.Now()) {
		s.once.Do(func() { close(s.unblock) })
	}
	return s.Stream.SetWriteDeadline(t)
}

// push pushes iter, firing every silence timer the client starts until the
// push returns. No timer fires on its own, so a client that waited for
// its reply timeout (an hour) would never return.
func push(t *testing.T, c *Client, timers chan chan time.Time, iter int64) {
	t.Helper()
	if err := pushErr(c, timers, iter); err != nil {
		t.Fatalf("push %d: %v", iter, err)
	}
}

func pushErr(c *Client, timers chan chan time.Time, iter int64) error {
	done := make(chan error, 1)
	go func() {
		_, err := c.Push(context.Background(), Push{Iter: iter, Samples: 1, Payload: c.Encode([]float32{1}, 1)})
		done <- err
	}()
	for {
		select {
		case err := <-done:
			return err
		case ch := <-timers:
			ch <- time.Now()
		}
	}
}

// TestClientFindsNewLeaderWithoutReplyTimeout: the leader goes silent with
// its stream open (kill -9, SIGSTOP); the client probes the other replicas
// after one silence period, follows the newest term's leader and resends
// there, long before its reply timeout.
func TestClientFindsNewLeaderWithoutReplyTimeout(t *testing.T) {
	f := newFakeShard(t, "a", "b", "c")
	f.set("a", 1)
	c, timers := f.client()
	push(t, c, timers, 0)

	f.set("b", 2, "a") // a frozen: it reads requests and never answers
	push(t, c, timers, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := withoutLate0(f.pushes["b"]); !slices.Equal(f.pushes["a"], []int64{0}) || !slices.Equal(b, []int64{1}) {
		t.Fatalf("pushes acknowledged: a %v, b %v; want a [0], b [1]", f.pushes["a"], f.pushes["b"])
	}
	if c.probes.Load() == 0 {
		t.Fatal("no probe round")
	}
}

// TestClientFindsNewLeaderWhileSendBlocks (bug 8): the leader is paused
// and the client's request to it cannot even be written (a large frame
// over a connection whose congestion window is full blocks in the write
// until the connection's idle timeout). The watcher runs from the dial on,
// so the client still probes, abandons the write and resends to the new
// leader.
func TestClientFindsNewLeaderWhileSendBlocks(t *testing.T) {
	f := newFakeShard(t, "a", "b", "c")
	f.set("a", 1)
	c, timers := f.client()
	push(t, c, timers, 0)

	f.set("b", 2, "a")
	f.mu.Lock()
	f.stalled["a"] = true
	f.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- pushErr(c, timers, 1) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // a failure guard, not synchronisation
		t.Fatal("push 1 still blocked in its write to the paused leader")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := withoutLate0(f.pushes["b"]); !slices.Equal(b, []int64{1}) {
		t.Fatalf("b acknowledged %v, want [1]", f.pushes["b"])
	}
}

// TestClientProbesAtOnceWhenStreamBreaks: the leader's process is gone and
// the stream breaks; the client asks the others in parallel and goes to the
// leader they name without a silence period or a round-robin.
func TestClientProbesAtOnceWhenStreamBreaks(t *testing.T) {
	f := newFakeShard(t, "a", "b", "c")
	f.set("a", 1)
	c, timers := f.client()
	push(t, c, timers, 0)

	f.set("c", 2)
	f.trs["a"].Close() // a is gone: its streams end, dials to it fail
	f.mu.Lock()
	before := f.dialed["a"]
	f.mu.Unlock()
	push(t, c, timers, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := withoutLate0(f.pushes["c"]); !slices.Equal(c, []int64{1}) {
		t.Fatalf("c acknowledged %v, want [1]", f.pushes["c"])
	}
	if n := f.dialed["a"] - before; n != 0 {
		t.Fatalf("a dialled %d times after its stream broke, want 0", n)
	}
}

// TestClientNeverDialsDeadMember: a replica's hint names a node membership
// has declared dead; the client does not dial it, and goes on to a live
// leader once the others name one.
func TestClientNeverDialsDeadMember(t *testing.T) {
	f := newFakeShard(t, "a", "b", "c")
	f.set("a", 1)
	c, timers := f.client()
	push(t, c, timers, 0)

	// a froze and membership dropped it; the replicas still name it (no
	// election yet), then b wins.
	f.mu.Lock()
	f.frozen["a"], f.live = true, []mesh.NodeID{"b", "c"}
	before := f.dialed["a"]
	f.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- pushErr(c, timers, 1) }()
	// Let the client retry against hints naming a while it is dead, then
	// elect b.
	for {
		f.mu.Lock()
		tries := f.dialed["b"] + f.dialed["c"]
		f.mu.Unlock()
		if tries >= 3 {
			break
		}
		runtime.Gosched()
	}
	f.set("b", 2)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := f.dialed["a"] - before; n != 0 {
		t.Fatalf("a dialled %d times after membership dropped it", n)
	}
	if b := withoutLate0(f.pushes["b"]); !slices.Equal(b, []int64{1}) {
		t.Fatalf("b acknowledged %v, want [1]", f.pushes["b"])
	}
}

// withoutLate0 drops push 0 from what a replica other than the first
// leader acknowledged: the warm-up push's first attempt goes to a replica
// in turn, and the watcher, whose timers fire at once in these tests, can
// abandon it for the leader after it was written, so it may arrive there
// late. A real shard dedupes (worker, iter).
func withoutLate0(p []int64) []int64 {
	return slices.DeleteFunc(slices.Clone(p), func(i int64) bool { return i == 0 })
}

// TestClientWaitsOutALargeTransferBeforeProbing: a 3 MiB request to a
// leader that does not answer is given transferAllowance (8 s at 256
// KiB/s beyond 1 MiB) on top of ProbeAfter before the watcher probes: no
// probe stream per silence period while a large frame crosses. Then it
// probes, follows the new leader and resends there as before.
func TestClientWaitsOutALargeTransferBeforeProbing(t *testing.T) {
	f := newFakeShard(t, "a", "b", "c")
	f.set("a", 1)
	c, timers := f.client()
	push(t, c, timers, 0)

	f.set("b", 2, "a")
	payload := make([]byte, 3<<20)
	p0 := c.probes.Load() // push 0's timers may have probed
	done := make(chan error, 1)
	go func() {
		_, err := c.call(context.Background(), c.request(OpPush, 1), payload, nil, nil)
		done <- err
	}()
	quiet := int((c.cfg.ProbeAfter + transferAllowance(len(payload))) / c.cfg.ProbeAfter)
	if quiet < 30 {
		t.Fatalf("allowance of %d silence periods for 3 MiB, want ≥ 30", quiet)
	}
	fired := 0
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if fired < quiet {
				t.Fatalf("resent after %d silence periods, want ≥ %d", fired, quiet)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if b := withoutLate0(f.pushes["b"]); !slices.Equal(b, []int64{1}) {
				t.Fatalf("b acknowledged %v, want [1]", f.pushes["b"])
			}
			return
		case ch := <-timers:
			// The watcher asks for its next timer only after handling the
			// last one (a probe included).
			if p := c.probes.Load(); fired < quiet && p != p0 {
				t.Fatalf("probed after %d silence periods, want none before %d", fired, quiet)
			}
			fired++
			ch <- time.Now()
		}
	}
}
