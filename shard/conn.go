package shard

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"dsspmesh/clock"
	"dsspmesh/mesh"
	"dsspmesh/shardapi"
)

// ticket is one push on the leader from receipt to reply: intake makes
// it, the proposer puts its Push in an entry, the replier answers it.
type ticket struct {
	Push
	to replyTo
}

// replyTo names the reply a push waits for: its stream, the push, and
// Request.Keep (the OK carries no slice). Resends of a push on one stream
// wait for one reply: the replier's held and pending sets are keyed by it.
type replyTo struct {
	c *workerConn
	shardapi.PushID
	keep bool
}

type workerConn struct {
	s       mesh.Stream
	timeout time.Duration  // Config.ReplyWriteTimeout
	cut     *atomic.Uint64 // serviceCounters.writeTimeouts
	sendMu  sync.Mutex
}

// send writes one reply frame, waiting at most the conn's timeout plus the
// frame's time at shardapi.MinReplyRate for the worker to take it; a
// failed or timed-out write closes the stream (the worker resends).
func (c *workerConn) send(h shardapi.Reply, payload []byte) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.s.SetWriteDeadline(time.Now().Add(c.timeout + time.Duration(float64(len(payload))/shardapi.MinReplyRate*float64(time.Second))))
	if err := c.s.SendFrame(h, payload); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			c.cut.Add(1)
		}
		c.s.Close()
	}
}

// close ends the stream at once: a send blocked on a worker that does not
// read returns (its deadline moved to now), then the stream closes. A
// stream's Close alone does not unblock a write (quic-go's SendStream.Close
// must not even run beside one).
func (c *workerConn) close() {
	c.s.SetWriteDeadline(time.Now())
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.s.Close()
}

// serviceCounters are the leader's stages' counts (shardapi.ServiceStats).
type serviceCounters struct {
	requests, batches, proposed, rejected, notLeader, held, acked, accepted, recvErrors, entryBytes, summed, regrouped, pendingFrames, writeTimeouts atomic.Uint64
}

func (c *serviceCounters) stats(refused map[clock.WorkerID]shardapi.WorkerRefusals) shardapi.ServiceStats {
	return shardapi.ServiceStats{Requests: c.requests.Load(), Batches: c.batches.Load(), ProposedPushes: c.proposed.Load(),
		Rejected: c.rejected.Load(), NotLeader: c.notLeader.Load(), Held: c.held.Load(), Acked: c.acked.Load(),
		StreamsAccepted: c.accepted.Load(), StreamErrorsRecv: c.recvErrors.Load(), Refused: refused, EntryBytes: c.entryBytes.Load(), SummedPushes: c.summed.Load(), RegroupedPushes: c.regrouped.Load(), PendingFrames: c.pendingFrames.Load(),
		ReplyWriteTimeouts: c.writeTimeouts.Load()}
}
