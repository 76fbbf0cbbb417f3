package mesh

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Member is one node as membership sees it.
type Member struct {
	Meta
	Addr string // gossip address host:port
}

// EventType says what happened to a member.
type EventType uint8

const (
	EventJoin     EventType = iota + 1 // a node joined, or came back
	EventLeave                         // a node left gracefully
	EventFailed                        // a node stopped answering and was declared dead
	EventUpdate                        // a node changed its metadata
	EventSuspect                       // gossip suspects a node; it may refute it or be declared failed
	EventRejected                      // a peer was refused: its metadata is malformed or names another id
)

func (e EventType) String() string {
	switch e {
	case EventJoin:
		return "join"
	case EventLeave:
		return "leave"
	case EventFailed:
		return "failed"
	case EventUpdate:
		return "update"
	case EventSuspect:
		return "suspect"
	case EventRejected:
		return "rejected"
	}
	return fmt.Sprintf("event(%d)", uint8(e))
}

// Event reports a change to one member.
type Event struct {
	Type   EventType
	Member Member
}

// Membership tracks the live nodes of the mesh.
type Membership interface {
	// Join contacts seeds (gossip addresses) until one answers, retrying
	// with backoff until ctx ends; the error is a *JoinError naming the
	// seeds. It returns how many seeds answered. [WithJoinTrace] on ctx
	// reports each failed attempt.
	Join(ctx context.Context, seeds []string) (int, error)
	// Leave announces a graceful departure and waits up to timeout for it
	// to spread. Call Shutdown afterwards.
	Leave(timeout time.Duration) error
	// Members returns the live members, this node included, sorted by id.
	Members() []Member
	// LocalNode is this node.
	LocalNode() Member
	// UpdateMeta changes this node's metadata (not its id) and gossips it.
	UpdateMeta(m Meta) error
	// Events delivers changes in order, never blocking gossip; it is closed
	// by Shutdown.
	Events() <-chan Event
	// Shutdown stops this node without leaving: to the others it looks
	// like a failure. Idempotent.
	Shutdown() error
}

// JoinBackoff paces join retries.
type JoinBackoff struct {
	Initial time.Duration // first wait; default 100ms
	Max     time.Duration // cap on the wait; default 5s
}

func (b JoinBackoff) validate() error {
	if b.Initial <= 0 || b.Max < b.Initial {
		return fmt.Errorf("mesh: JoinBackoff %s..%s: need 0 < Initial ≤ Max", b.Initial, b.Max)
	}
	return nil
}

// JoinAttempt is one attempt of Membership.Join that no seed answered.
type JoinAttempt struct {
	Attempt int           // 1 for the first
	Err     error         // why it failed (memberlist's names each seed tried)
	Next    time.Duration // the wait before the next attempt
}

// Reached reports whether the attempt connected to seed (a host:port of
// the join) before failing: memberlist names each seed it could not join,
// and a seed whose failure is not a dial's accepted the connection but did
// not answer as a gossip node of this mesh (another protocol, or another
// mesh key). False when the error does not name seed.
func (a JoinAttempt) Reached(seed string) bool {
	if a.Err == nil {
		return false
	}
	s := a.Err.Error()
	_, rest, ok := strings.Cut(s, "failed to join "+seed+": ")
	return ok && !strings.HasPrefix(rest, "dial ")
}

type joinTraceKey struct{}

// WithJoinTrace returns a context that makes Membership.Join call failed
// after each attempt no seed answered, as net/http/httptrace hooks into a
// request: a caller tells its user how a long join goes. failed runs on
// Join's goroutine and must return quickly.
func WithJoinTrace(ctx context.Context, failed func(JoinAttempt)) context.Context {
	return context.WithValue(ctx, joinTraceKey{}, failed)
}

// joinWithRetry calls try until it succeeds or ctx ends, doubling the wait.
func joinWithRetry(ctx context.Context, seeds []string, b JoinBackoff, try func() (int, error)) (int, error) {
	if len(seeds) == 0 {
		return 0, &JoinError{Attempts: 0, Last: fmt.Errorf("no seed addresses given")}
	}
	trace, _ := ctx.Value(joinTraceKey{}).(func(JoinAttempt))
	wait := b.Initial
	for attempt := 1; ; attempt++ {
		n, err := try()
		if err == nil && n > 0 {
			return n, nil
		}
		if err == nil {
			err = fmt.Errorf("no seed answered")
		}
		if trace != nil {
			trace(JoinAttempt{Attempt: attempt, Err: err, Next: wait})
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return 0, &JoinError{Seeds: seeds, Attempts: attempt, Last: err}
		case <-timer.C:
		}
		wait = min(2*wait, b.Max)
	}
}

// eventQueue is an unbounded FIFO in front of a channel, so that producers
// (memberlist's goroutines) never block on a slow consumer.
type eventQueue struct {
	mu     sync.Mutex
	q      []Event
	wake   chan struct{}
	out    chan Event
	done   chan struct{}
	closed bool
}

func newEventQueue() *eventQueue {
	e := &eventQueue{wake: make(chan struct{}, 1), out: make(chan Event), done: make(chan struct{})}
	go e.run()
	return e
}

func (e *eventQueue) push(ev Event) {
	e.mu.Lock()
	if !e.closed {
		e.q = append(e.q, ev)
	}
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *eventQueue) run() {
	defer close(e.out)
	for {
		e.mu.Lock()
		if len(e.q) == 0 {
			e.mu.Unlock()
			select {
			case <-e.wake:
				continue
			case <-e.done:
				return
			}
		}
		ev := e.q[0]
		e.q = e.q[1:]
		e.mu.Unlock()
		select {
		case e.out <- ev:
		case <-e.done:
			return
		}
	}
}

func (e *eventQueue) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		e.closed = true
		close(e.done)
	}
}
