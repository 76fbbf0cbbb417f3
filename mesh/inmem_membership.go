package mesh

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// InmemCluster is an in-memory gossip domain: members join by address, and
// the test decides when a node fails (Fail) instead of a failure detector.
// Events reach every live member synchronously in call order.
type InmemCluster struct {
	mu    sync.Mutex
	nodes map[string]*inmemMember // by gossip address
}

// NewInmemCluster returns an empty cluster.
func NewInmemCluster() *InmemCluster {
	return &InmemCluster{nodes: make(map[string]*inmemMember)}
}

type inmemMember struct {
	c      *InmemCluster
	addr   string
	events *eventQueue

	// Guarded by c.mu.
	meta   Meta
	joined bool // part of the cluster's live view
	down   bool
}

// NewMember creates a member at addr that is alone until it Joins.
func (c *InmemCluster) NewMember(meta Meta, addr string) (Membership, error) {
	if err := meta.ID.Validate(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.nodes[addr]; ok {
		return nil, fmt.Errorf("mesh: inmem gossip address %q in use", addr)
	}
	m := &inmemMember{c: c, addr: addr, events: newEventQueue(), meta: meta}
	c.nodes[addr] = m
	return m, nil
}

// Fail takes the member with id down without a leave, as a crash would;
// the others get EventFailed.
func (c *InmemCluster) Fail(id NodeID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.nodes {
		if m.meta.ID == id && m.joined && !m.down {
			m.down, m.joined = true, false
			c.broadcastLocked(m, EventFailed)
		}
	}
}

func (c *InmemCluster) broadcastLocked(from *inmemMember, t EventType) {
	ev := Event{Type: t, Member: Member{Meta: from.meta, Addr: from.addr}}
	for _, m := range c.nodes {
		if m != from && m.joined && !m.down {
			m.events.push(ev)
		}
	}
}

func (m *inmemMember) Join(ctx context.Context, seeds []string) (int, error) {
	return joinWithRetry(ctx, seeds, JoinBackoff{Initial: time.Millisecond, Max: 10 * time.Millisecond}, func() (int, error) {
		m.c.mu.Lock()
		defer m.c.mu.Unlock()
		if m.down {
			return 0, ErrClosed
		}
		n := 0
		for _, s := range seeds {
			if p := m.c.nodes[s]; p != nil && !p.down && (p.joined || p == m) {
				n++
			}
		}
		if n == 0 {
			return 0, fmt.Errorf("%w: none of %s is up", ErrNoRoute, strings.Join(seeds, ", "))
		}
		if !m.joined {
			m.joined = true
			for _, p := range m.c.nodes {
				if p != m && p.joined && !p.down {
					m.events.push(Event{Type: EventJoin, Member: Member{Meta: p.meta, Addr: p.addr}})
				}
			}
			m.c.broadcastLocked(m, EventJoin)
		}
		return n, nil
	})
}

func (m *inmemMember) Leave(time.Duration) error {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	if m.joined {
		m.c.broadcastLocked(m, EventLeave)
		m.joined = false
	}
	return nil
}

func (m *inmemMember) Members() []Member {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	out := []Member{{Meta: m.meta, Addr: m.addr}}
	if m.joined {
		for _, p := range m.c.nodes {
			if p != m && p.joined && !p.down {
				out = append(out, Member{Meta: p.meta, Addr: p.addr})
			}
		}
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(string(a.ID), string(b.ID)) })
	return out
}

func (m *inmemMember) LocalNode() Member {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	return Member{Meta: m.meta, Addr: m.addr}
}

func (m *inmemMember) UpdateMeta(meta Meta) error {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	if meta.ID != m.meta.ID {
		return fmt.Errorf("mesh: UpdateMeta cannot change the node id from %q to %q", m.meta.ID, meta.ID)
	}
	m.meta = meta
	if m.joined {
		m.c.broadcastLocked(m, EventUpdate)
	}
	return nil
}

func (m *inmemMember) Events() <-chan Event { return m.events.out }

// Shutdown without Leave looks like a crash to the others.
func (m *inmemMember) Shutdown() error {
	m.c.mu.Lock()
	if m.joined && !m.down {
		m.c.broadcastLocked(m, EventFailed)
	}
	m.joined, m.down = false, true
	m.c.mu.Unlock()
	m.events.close()
	return nil
}
