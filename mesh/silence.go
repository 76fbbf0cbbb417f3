package mesh

import (
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// SilenceReporter is an optional capability of a Transport, found by type
// assertion: how long nothing at all has arrived from a peer. A live peer
// answers the keep-alives (every IdleTimeout/4), so silence of a few
// keep-alive periods says the peer is dead or paused long before its
// connection's idle timeout. The shard leader uses it to suspect a dead
// worker (shard/suspect.go).
type SilenceReporter interface {
	// PeerSilence returns how long no packet has arrived from peer on
	// any of its connections, sampled every SilenceSample; connected is
	// false when there is no open connection to peer at all.
	PeerSilence(peer NodeID) (silence time.Duration, connected bool)
}

// SilenceSample is how often the QUIC transport samples its connections'
// received-packet counters.
const SilenceSample = 250 * time.Millisecond

// silence tracks, per connection, when its received-packet count last
// moved. Guarded by its own mutex; never held with QUICTransport.mu.
type silence struct {
	mu   sync.Mutex
	seen map[*quic.Conn]heard
}

type heard struct {
	packets uint64
	at      time.Time
}

// sampleSilence runs until the transport closes.
func (t *QUICTransport) sampleSilence() {
	defer t.wg.Done()
	tick := time.NewTicker(SilenceSample)
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case now := <-tick.C:
			t.mu.Lock()
			conns := make([]*quic.Conn, 0, len(t.all))
			for c := range t.all {
				conns = append(conns, c)
			}
			t.mu.Unlock()
			t.sil.mu.Lock()
			next := make(map[*quic.Conn]heard, len(conns))
			for _, c := range conns {
				n := c.ConnectionStats().PacketsReceived
				if h, ok := t.sil.seen[c]; ok && h.packets == n {
					next[c] = h
				} else {
					next[c] = heard{packets: n, at: now}
				}
			}
			t.sil.seen = next
			t.sil.mu.Unlock()
		}
	}
}

// PeerSilence implements SilenceReporter: the least silence over peer's
// open connections (one that still hears the peer is enough). A node
// always hears itself: its streams to itself need no connection.
func (t *QUICTransport) PeerSilence(peer NodeID) (time.Duration, bool) {
	if peer == t.LocalID() {
		return 0, true
	}
	t.mu.Lock()
	conns := append([]*quic.Conn(nil), t.byPeer[peer]...)
	t.mu.Unlock()
	now := time.Now()
	least, connected := time.Duration(-1), false
	t.sil.mu.Lock()
	defer t.sil.mu.Unlock()
	for _, c := range conns {
		if c.Context().Err() != nil {
			continue
		}
		connected = true
		d := time.Duration(0)
		if h, ok := t.sil.seen[c]; ok {
			d = now.Sub(h.at)
		}
		if least < 0 || d < least {
			least = d
		}
	}
	return max(least, 0), connected
}

// hears reports whether c is open and a packet arrived on it within
// IdleTimeout/2 (two keep-alive periods; a connection not sampled yet
// counts as heard: it was just made).
func (t *QUICTransport) hears(c *quic.Conn) bool {
	if c.Context().Err() != nil {
		return false
	}
	t.sil.mu.Lock()
	h, ok := t.sil.seen[c]
	t.sil.mu.Unlock()
	return !ok || time.Since(h.at) < t.cfg.IdleTimeout/2
}
