package mesh

import "time"

// RTTReporter is an optional capability of a Transport, found by type
// assertion: the round trip to a peer as the transport's own connections
// measured it. Min is the least round trip seen (the path's propagation
// and serialization, without queues); Smoothed and Dev are the running
// estimate and its mean deviation (RFC 9002), queues included. A node's
// round trip to itself is 0. The shard manager uses Min to place leaders
// near a quorum of their voters (node/shards).
type RTTReporter interface {
	PeerRTT(peer NodeID) (RTT, bool)
}

// RTT is one peer's measured round trip, and Rate the path's delivery
// rate in bytes/s as the connection's congestion controller sees it: its
// congestion window over its smoothed round trip (0: unknown). On a busy
// path it is about what the path carries; a path this node sends little
// on keeps a small window, so Rate errs low there.
type RTT struct {
	Min, Smoothed, Dev time.Duration
	Rate               float64
}

// PeerRTT implements RTTReporter: the figures of peer's open connection
// with the least Min that has a sample; false when none has.
func (t *QUICTransport) PeerRTT(peer NodeID) (RTT, bool) {
	if peer == t.LocalID() {
		return RTT{}, true
	}
	t.mu.Lock()
	conns := append(t.byPeer[peer][:0:0], t.byPeer[peer]...)
	t.mu.Unlock()
	var best RTT
	ok := false
	for _, c := range conns {
		if c.Context().Err() != nil {
			continue
		}
		st := c.ConnectionStats()
		if st.MinRTT <= 0 || ok && st.MinRTT >= best.Min {
			continue
		}
		best, ok = RTT{Min: st.MinRTT, Smoothed: st.SmoothedRTT, Dev: st.MeanDeviation}, true
		if st.SmoothedRTT > 0 {
			best.Rate = float64(st.CongestionWindow) / st.SmoothedRTT.Seconds()
		}
	}
	return best, ok
}

// SetRTT makes the transports of a and b report d as their round trip to
// each other (min and smoothed; no deviation). The in-memory network does
// not delay frames by it: it stands in for a measurement, for tests of
// what is decided from one.
func (n *InmemNetwork) SetRTT(a, b NodeID, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.rtt == nil {
		n.rtt = map[[2]NodeID]time.Duration{}
	}
	n.rtt[[2]NodeID{a, b}], n.rtt[[2]NodeID{b, a}] = d, d
}

// PeerRTT implements RTTReporter from the network's SetRTT; false for a
// pair it was not given.
func (t *InmemTransport) PeerRTT(peer NodeID) (RTT, bool) {
	if peer == t.end.id {
		return RTT{}, true
	}
	t.net.mu.Lock()
	d, ok := t.net.rtt[[2]NodeID{t.end.id, peer}]
	t.net.mu.Unlock()
	return RTT{Min: d, Smoothed: d}, ok
}
