package mesh

import (
	"context"
	"fmt"
	"sync"
)

// listenerSet routes accepted streams to the listener of their channel; both
// transports use it.
type listenerSet struct {
	backlog int
	mu      sync.Mutex
	byCh    map[Channel]*chanListener
	closed  bool
}

func newListenerSet(backlog int) *listenerSet {
	return &listenerSet{backlog: backlog, byCh: make(map[Channel]*chanListener)}
}

func (ls *listenerSet) listen(ch Channel) (*chanListener, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		return nil, ErrClosed
	}
	if _, ok := ls.byCh[ch]; ok {
		return nil, fmt.Errorf("%w: %s", ErrChannelInUse, ch)
	}
	l := &chanListener{set: ls, ch: ch, q: make(chan Stream, ls.backlog), done: make(chan struct{})}
	ls.byCh[ch] = l
	return l, nil
}

// deliver hands s to its channel's listener; it returns false if there is
// none or its backlog is full, and the caller must then refuse s.
func (ls *listenerSet) deliver(s Stream) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l, ok := ls.byCh[s.Channel()]
	if !ok {
		return false
	}
	select {
	case l.q <- s:
		return true
	default:
		return false
	}
}

func (ls *listenerSet) closeAll() {
	ls.mu.Lock()
	ls.closed = true
	all := ls.byCh
	ls.byCh = map[Channel]*chanListener{}
	ls.mu.Unlock()
	for _, l := range all {
		l.shut()
	}
}

type chanListener struct {
	set  *listenerSet
	ch   Channel
	q    chan Stream
	done chan struct{}
	once sync.Once
}

func (l *chanListener) Channel() Channel { return l.ch }

func (l *chanListener) Accept(ctx context.Context) (Stream, error) {
	select {
	case s := <-l.q:
		return s, nil
	case <-l.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *chanListener) Close() error {
	l.set.mu.Lock()
	if l.set.byCh[l.ch] == l {
		delete(l.set.byCh, l.ch)
	}
	l.set.mu.Unlock()
	l.shut()
	return nil
}

// shut wakes Accept callers and closes streams queued but never accepted.
func (l *chanListener) shut() {
	l.once.Do(func() {
		close(l.done)
		for {
			select {
			case s := <-l.q:
				s.Close()
			default:
				return
			}
		}
	})
}
