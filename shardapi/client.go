package shardapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"dsspmesh/clock"
	"dsspmesh/internal/boundedmsgpack"
	"dsspmesh/mesh"
)

// ClientConfig configures a worker's client for one shard.
type ClientConfig struct {
	Shard  uint32
	Worker clock.WorkerID
	// Replicas returns the shard's current replica set (from placement);
	// called whenever the client needs a replica to try.
	Replicas func() []mesh.NodeID
	// ReplyTimeout is the longest silence tolerated on a stream before the
	// replica is presumed dead and another tried. It must exceed the
	// replicas' HeldKeepAlive: a leader sends keep-alives while it holds a
	// push (Held) and while the push's entry replicates (Pending), so a
	// push whose entry takes longer than this to commit (tens of megabytes
	// on a loaded machine) is not resent. Default 5s.
	ReplyTimeout time.Duration
	// Backoff between rounds of retries, doubling up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
	// Deadline bounds one call when ctx has no deadline. Default 2 min.
	Deadline time.Duration
	// ProbeAfter is the silence on a stream, with no Held or Pending frame
	// since the request, after which the other replicas are asked who leads
	// (leaderhint.go), and the period of those probes while it lasts.
	// HeldSilence is the same after a Held or Pending keep-alive (the
	// replicas' HeldKeepAlive plus slack). ProbeTimeout bounds one probe round.
	// Defaults 250ms, 1.5s, 1s.
	ProbeAfter, HeldSilence, ProbeTimeout time.Duration
	// Alive, if set, says whether membership counts a node live; a node it
	// does not is never dialled (a hint naming it is ignored, a remembered
	// leader dropped). Nil: every node named is tried.
	Alive func(mesh.NodeID) bool
	// After is the timer of the silence watcher; nil means time.After.
	// Tests inject their own.
	After func(time.Duration) <-chan time.Time
	// Precision of the gradients pushed (the parameters return in
	// Precision.Params): the shard's Spec.Precision. Zero is fp32.
	Precision Precision
}

// DefaultClientConfig fills the timing defaults.
func DefaultClientConfig(shard uint32, worker clock.WorkerID, replicas func() []mesh.NodeID) ClientConfig {
	return ClientConfig{Shard: shard, Worker: worker, Replicas: replicas, ReplyTimeout: 5 * time.Second,
		Backoff: 10 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, Deadline: 2 * time.Minute,
		ProbeAfter: 250 * time.Millisecond, HeldSilence: 1500 * time.Millisecond, ProbeTimeout: time.Second}
}

// Validate names the first bad value.
func (c ClientConfig) Validate() error {
	switch {
	case c.Worker == "":
		return errors.New("shard: ClientConfig.Worker is empty")
	case c.Replicas == nil:
		return errors.New("shard: ClientConfig.Replicas is nil")
	case c.ReplyTimeout <= 0:
		return fmt.Errorf("shard: ClientConfig.ReplyTimeout (%s) must be positive", c.ReplyTimeout)
	case c.Backoff <= 0 || c.MaxBackoff < c.Backoff:
		return fmt.Errorf("shard: ClientConfig.Backoff (%s) must be positive and at most MaxBackoff (%s)", c.Backoff, c.MaxBackoff)
	case c.Deadline <= 0:
		return fmt.Errorf("shard: ClientConfig.Deadline (%s) must be positive", c.Deadline)
	case c.ProbeAfter <= 0 || c.HeldSilence < c.ProbeAfter || c.ProbeTimeout <= 0:
		return fmt.Errorf("shard: ClientConfig.ProbeAfter (%s) and ProbeTimeout (%s) must be positive, HeldSilence (%s) at least ProbeAfter", c.ProbeAfter, c.ProbeTimeout, c.HeldSilence)
	case !c.Precision.Valid():
		return fmt.Errorf("shard: ClientConfig.Precision %d unknown (known: %s)", c.Precision, knownPrecisions)
	}
	return nil
}

// Client pushes one worker's gradients to one shard and returns the fresh
// parameters. Not safe for concurrent use.
type Client struct {
	cfg     ClientConfig
	tr      mesh.Transport
	resolve mesh.Resolver
	log     *slog.Logger
	streams map[mesh.NodeID]mesh.Stream
	leader  mesh.NodeID
	next    int
	buf     []byte
	resid   []byte      // int8: what the encodings of this shard's slice lost so far (int8.go)
	reads   int64       // numbers read requests, so a late reply is not taken for a newer one's
	failed  mesh.NodeID // the replica that last failed or went silent: tried last
	largest int         // the largest payload received: a reply may be as large again

	probes, probeSeq atomic.Uint64
}

// NewClient returns a client; streams are opened on first use and reused.
func NewClient(cfg ClientConfig, tr mesh.Transport, resolve mesh.Resolver, logger *slog.Logger) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, tr: tr, resolve: resolve, streams: map[mesh.NodeID]mesh.Stream{},
		log: logger.With("shard", cfg.Shard, "worker", cfg.Worker)}, nil
}

func (c *Client) after(d time.Duration) <-chan time.Time {
	if c.cfg.After != nil {
		return c.cfg.After(d)
	}
	return time.After(d)
}

// Push is one push of a worker's gradient to its shard: the one value
// [Client.Push] takes.
type Push struct {
	// Iter is the iteration the gradient is of. A push is named by
	// (worker, Iter): a resend after an ambiguous failure carries the same.
	Iter int64
	// Samples is the mini-batch size behind the gradient, 0 for a join's
	// zero push (answered outside the gate); ComputeNs the worker's compute
	// time for it.
	Samples, ComputeNs int64
	// Want is the global round the worker's link asks for ([PushMeta].Want).
	Want int64
	// Payload is the gradient encoded in the shard's precision (an
	// [Encoder]'s Finish, or [Client.Encode]). It is only read, and may be
	// given again to resend the same iteration.
	Payload []byte
	// Keep says the worker keeps its copy of the shard's slice because that
	// copy is fresh enough for its next iteration (docs/design.md, "The
	// read guarantee"): the OK carries no parameters and Into is not used.
	Keep bool
	// Into receives the parameter slice the OK carries, grown if short.
	Into []float32
}

// PushReply is what a push brought back: the one report of a
// [Client.Push]. On an error only Retries, Bytes and Held are set.
type PushReply struct {
	// Version is the version of the shard's state when it released the
	// push: that of Params, or under Keep the shard's (not the caller's
	// copy's, which keeps its own).
	Version Version
	// Params is the parameter slice decoded into Push.Into (or into a new
	// slice if Into was short); nil under Keep. Owned by the caller.
	Params []float32
	// Assign is the balance layer's assignment of the worker's next
	// iteration (Iter+1) in shard 0's OK under Spec.BalanceBase, nil
	// otherwise; Ahead, under Spec.Pipeline only, that of Iter+2.
	Assign, Ahead *Assignment
	// Evaluator is the worker shard 0's OK names for the evaluation lease
	// ("" from other shards, and while none has pushed).
	Evaluator string
	// Retries counts the attempts beyond the first. Bytes counts the tensor
	// payload bytes sent and received (gradients out, parameter slices in),
	// resends included. Held adds up how long the gate held the push: from
	// the leader's first Held frame to the final reply, per attempt.
	Retries uint64
	Bytes   uint64
	Held    time.Duration
}

// Push sends p and waits until the shard's leader has committed and
// applied it and the gate releases the worker; the reply carries the
// parameter slice (decoded into p.Into) unless p.Keep, and the version and
// assignments the OK named. On any ambiguous failure it resends the same
// (worker, iter) to the replica that leads, until ctx (or
// ClientConfig.Deadline) ends, which returns an error wrapping
// ErrDeadline: then the push may or may not have been applied, and the
// caller resends the same iter later. A *RejectError is final and changed
// nothing.
func (c *Client) Push(ctx context.Context, p Push) (PushReply, error) {
	var out PushReply
	req := Request{Op: OpPush, Keep: p.Keep,
		PushMeta: PushMeta{PushID: PushID{Worker: c.cfg.Worker, Iter: p.Iter}, Samples: p.Samples, ComputeNs: p.ComputeNs, Want: p.Want}}
	dst := p.Into
	var bad error
	var take func(n int, r io.Reader) error
	if !p.Keep {
		prec := c.cfg.Precision.Params()
		take = func(n int, r io.Reader) error {
			// Decoded from the stream as it arrives: no buffer of the
			// slice's encoding (a 100 MB model's worker gets eight 6 MB
			// slices an iteration).
			vals, err := prec.values(n)
			if bad = err; err != nil {
				return nil
			}
			if cap(dst) < vals {
				dst = make([]float32, vals)
			}
			dst = dst[:vals]
			_, err = prec.DecodeFrom(dst, r)
			return err
		}
	}
	rep, err := c.call(ctx, req, p.Payload, take, &out)
	if err != nil {
		return out, err
	}
	if bad != nil {
		return out, fmt.Errorf("shard %d: parameters from leader: %w", c.cfg.Shard, bad)
	}
	out.Version = Version{Index: rep.Index, Min: rep.Clock, Samples: rep.Samples}
	out.Assign, out.Ahead, out.Evaluator = rep.Assign, rep.Ahead, rep.Evaluator
	if !p.Keep {
		out.Params = dst
	}
	return out, nil
}

// Encode encodes grad in the shard's precision for a [Push] of samples
// samples, feeding back the shard's int8 residual ([Client.Residual]), into
// a buffer the client keeps: valid until the next Encode. A worker that
// computes its gradient in pieces encodes it with an [Encoder] instead.
func (c *Client) Encode(grad []float32, samples int64) []byte {
	c.buf = c.cfg.Precision.AppendFeedback(c.buf[:0], grad, c.Residual(len(grad), samples))
	return c.buf
}

// Residual is the int8 or int4 error-feedback residual of this client's shard, a
// slice of n values, for a gradient of samples samples: the one Encode
// feeds back, for an [Encoder] that encodes the gradient for a Push. It is
// nil for other precisions and for a join's zero push (samples 0), which
// is applied outside the gate and would carry the residual nowhere.
func (c *Client) Residual(n int, samples int64) []byte {
	if !c.cfg.Precision.feedback() || samples == 0 {
		return nil
	}
	if len(c.resid) != int8Bytes(n) {
		c.resid = c.cfg.Precision.NewResidual(n)
	}
	return c.resid
}

// AddWorker adds this worker to the shard's clock table and returns its
// clock (the iteration of its next push), at least from (its clock on
// the other shards); idempotent.
func (c *Client) AddWorker(ctx context.Context, from int64) (int64, error) {
	rep, err := c.call(ctx, c.request(OpAddWorker, from), nil, nil, nil)
	return rep.Clock, err
}

// RemoveWorker removes this worker (it leaves); idempotent.
func (c *Client) RemoveWorker(ctx context.Context) error {
	_, err := c.call(ctx, c.request(OpRemoveWorker, 0), nil, nil, nil)
	return err
}

// Revoke revokes node id on this shard: its worker is removed from the
// gate, and every later push or add-worker of it refused on every
// replica (shard/identity.go). mac, the operator's authentication of the
// revocation, travels as the payload and is kept with it. Idempotent; the
// requester (this client's node, authenticated by its stream) may be any
// member.
func (c *Client) Revoke(ctx context.Context, id mesh.NodeID, mac []byte) error {
	_, err := c.call(ctx, Request{Op: OpRevoke, PushMeta: PushMeta{PushID: PushID{Worker: clock.WorkerID(id)}}}, mac, nil, nil)
	return err
}

// Claim records this client's node's evaluation claim in shard 0
// (OpClaim): once it returns nil the claim is applied there. A
// *RejectError says the shard refused it: the node does not hold the
// evaluation lease at that index, or the claim's sequence has another
// digest recorded. A resend of a recorded claim is accepted again.
func (c *Client) Claim(ctx context.Context, cl Claim) error {
	if err := cl.Check(); err != nil {
		return err
	}
	b, err := msgpack.Marshal(cl)
	if err != nil {
		return fmt.Errorf("shard %d: encode claim: %w", c.cfg.Shard, err)
	}
	_, err = c.call(ctx, c.request(OpClaim, 0), b, nil, nil)
	return err
}

// Claims reads the claims shard 0 recorded, oldest first (OpClaims; a
// linearizable read on its leader).
func (c *Client) Claims(ctx context.Context) ([]Claim, error) {
	var got []Claim
	var bad error
	_, err := c.call(ctx, c.request(OpClaims, 0), nil, func(n int, r io.Reader) error {
		if n > MaxClaims*MaxClaimBytes {
			bad = fmt.Errorf("%d bytes of claims, at most %d", n, MaxClaims*MaxClaimBytes)
			_, err := io.Copy(io.Discard, r)
			return err
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return err
		}
		got = nil
		bad = boundedmsgpack.Unmarshal(b, &got)
		return nil
	}, nil)
	if err != nil {
		return nil, err
	}
	if bad != nil {
		return nil, fmt.Errorf("shard %d: claims from leader: %w", c.cfg.Shard, bad)
	}
	return got, nil
}

// request is a request of op by this worker with Iter iter.
func (c *Client) request(op Op, iter int64) Request {
	return Request{Op: op, PushMeta: PushMeta{PushID: PushID{Worker: c.cfg.Worker, Iter: iter}}}
}

// Close closes the client's streams.
func (c *Client) Close() error {
	for id, s := range c.streams {
		s.Close()
		delete(c.streams, id)
	}
	return nil
}

// call sends req with payload until a final reply, resending as Push
// says; take, if set, reads the payload of the OK reply to req as it
// arrives (mesh.Stream.RecvFrameTo), each attempt's anew. It adds the
// call's retries, bytes and held time to cost, if set.
func (c *Client) call(ctx context.Context, req Request, payload []byte, take func(n int, r io.Reader) error, cost *PushReply) (Reply, error) {
	if cost == nil {
		cost = new(PushReply)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.Deadline)
		defer cancel()
	}
	backoff := c.cfg.Backoff
	hops := 0
	var last error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			cost.Retries++
		}
		target := c.pick()
		if target == "" {
			last = fmt.Errorf("shard %d: no replicas known", c.cfg.Shard)
		} else {
			rep, moved, err := c.try(ctx, target, req, payload, take, cost)
			switch {
			case err != nil:
				// Silent or broken: ask the other replicas at once
				// (leaderhint.go) rather than back off and go round.
				last = err
				c.leader, c.failed = "", target
				if moved == "" && ctx.Err() == nil {
					moved = c.probe(ctx, target, "")
				}
				if moved != "" && hops < 3 {
					c.leader = moved
					hops++
					continue
				}
			case rep.Status == ReplyOK:
				// A replica that failed before is old news once a push
				// succeeds: probes skip c.failed, and a node that was
				// paused and came back may lead the next time.
				c.leader, c.failed = target, ""
				return rep, nil
			case rep.Status == ReplyRejected:
				return rep, &RejectError{Op: req.Op.String(), Shard: c.cfg.Shard, Worker: req.Worker, Iter: req.Iter, Reason: rep.Reason, Detail: rep.Detail}
			case rep.Status == ReplyNotLeader:
				last = &NotLeaderError{Shard: c.cfg.Shard, Leader: mesh.NodeID(rep.Leader)}
				c.leader = mesh.NodeID(rep.Leader)
				if c.leader == target || (c.leader != "" && !c.live(c.leader)) {
					c.leader = "" // never dial a node membership marks dead
				}
				if c.leader != "" && hops < 3 {
					hops++
					continue
				}
			default:
				last = fmt.Errorf("shard %d: %s: %s", c.cfg.Shard, target, rep.Detail)
				c.leader = ""
			}
		}
		hops = 0
		c.log.Debug("push retry", "iter", req.Iter, "peer", target, "err", last)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Reply{}, fmt.Errorf("shard %d: %s (%q, %d): %w: %w (last: %v)", c.cfg.Shard, req.Op, req.Worker, req.Iter, ErrDeadline, ctx.Err(), last)
		}
		backoff = min(2*backoff, c.cfg.MaxBackoff)
	}
}

// pick returns the known leader while it is live, else the next replica
// in turn, passing over the one that last failed unless it is the only
// one.
func (c *Client) pick() mesh.NodeID {
	if c.leader != "" && c.live(c.leader) {
		return c.leader
	}
	c.leader = ""
	rs := slices.DeleteFunc(slices.Clone(c.cfg.Replicas()), func(id mesh.NodeID) bool { return !c.live(id) })
	if len(rs) == 0 {
		return ""
	}
	c.next++
	t := rs[c.next%len(rs)]
	if t == c.failed && len(rs) > 1 {
		c.next++
		t = rs[c.next%len(rs)]
	}
	return t
}

// try sends req to target on its stream and waits for the final reply,
// skipping Held frames and replies to earlier requests. A watcher runs from
// before the dial to the reply and probes the other replicas on silence
// (leaderhint.go): a dial to a paused node waits out the handshake timeout,
// and a large frame to one blocks in the send once the congestion window
// is full, until the connection's idle timeout; neither is a reply's
// silence, and both are cut short the same way. If the probes name another
// leader the attempt is abandoned and try returns it as moved, with an
// error. take reads the final OK's payload and cost adds up the attempt's
// bytes and held time (call).
func (c *Client) try(ctx context.Context, target mesh.NodeID, req Request, payload []byte, take func(n int, r io.Reader) error, cost *PushReply) (_ Reply, moved mesh.NodeID, _ error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &watch{stop: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	go c.watchSilence(ctx, target, c.failed, transferAllowance(max(len(payload), c.largest)), w)
	finish := func(err error) (Reply, mesh.NodeID, error) {
		close(w.stop)
		<-w.done
		moved, _ := w.found.Load().(mesh.NodeID)
		if moved != "" {
			err = fmt.Errorf("%w (silent; the other replicas name %s)", err, moved)
		}
		return Reply{}, moved, fmt.Errorf("shard %d: %s: %w", c.cfg.Shard, target, err)
	}
	s, err := c.stream(actx, target)
	if err != nil {
		return finish(err)
	}
	fail := func(err error) (Reply, mesh.NodeID, error) {
		s.Close()
		delete(c.streams, target)
		return finish(err)
	}
	if !w.attach(s) {
		return fail(errAbandoned)
	}
	if err := s.SendFrame(req, payload); err != nil {
		return fail(err)
	}
	if !w.sent() {
		return fail(errAbandoned)
	}
	cost.Bytes += uint64(len(payload))
	var heldSince time.Time
	defer func() {
		if !heldSince.IsZero() {
			cost.Held += time.Since(heldSince)
		}
	}()
	// A reply may carry a slice as large as the gradient sent: its frame
	// gets the time to arrive at MinReplyRate on top of the silence
	// allowed (a 6 MB slice on a loaded machine took longer than 5 s and
	// was cut off as a truncated frame). Silence is still noticed by the
	// watcher's probes, not by this deadline.
	frameTime := c.cfg.ReplyTimeout + time.Duration(float64(max(len(payload), c.largest))/MinReplyRate*float64(time.Second))
	for {
		dl := time.Now().Add(frameTime)
		if d, ok := ctx.Deadline(); ok && d.Before(dl) {
			dl = d
		}
		s.SetReadDeadline(dl)
		var rep Reply
		err := s.RecvFrameTo(&rep, func(n int, r io.Reader) error {
			cost.Bytes += uint64(n)
			c.largest = max(c.largest, n)
			if take == nil || rep.Status != ReplyOK || rep.Op != req.Op || rep.PushID != req.PushID {
				return nil // another request's, or none to read: skipped
			}
			return take(n, r)
		})
		if err != nil {
			return fail(err)
		}
		w.frames.Add(1)
		if rep.Op != req.Op || rep.PushID != req.PushID {
			continue
		}
		if rep.Status == ReplyHeld || rep.Status == ReplyPending {
			// A keep-alive: silence is measured from it (HeldSilence).
			w.held.Store(true)
			if rep.Status == ReplyHeld && heldSince.IsZero() {
				heldSince = time.Now()
			}
			continue
		}
		w.held.Store(false)
		close(w.stop)
		<-w.done
		if moved, _ := w.found.Load().(mesh.NodeID); moved != "" {
			// The watcher closed the stream as the reply arrived.
			delete(c.streams, target)
		}
		return rep, "", nil
	}
}

// errAbandoned is an attempt the silence watcher gave up on (it found
// another leader) before the request was sent.
var errAbandoned = errors.New("abandoned: another replica leads")

// MinReplyRate (bytes/s) is the slowest a reply frame may arrive before
// the client gives up on it (and the slowest a shard's write of one may
// drain before the shard drops the stream, shard.Config.ReplyWriteTimeout). 1 MiB/s cut off replies of a 100 MB model's
// slices (6 MB) as "truncated payload" by the hundred in dssp-lab bench
// bigmodel, where 32 such replies share two loaded cores, and each cut
// cost a resend of the 6 MB push; the watcher's probes, not this
// deadline, notice a leader that went silent.
const MinReplyRate = 256 << 10

// largeFrame is the frame size beyond which a transfer is given time of
// its own before the watcher counts silence (transferAllowance).
const largeFrame = 1 << 20

// transferAllowance is how long a frame of n bytes may take to cross
// beyond a small one's time, at MinReplyRate: 0 up to largeFrame (a
// push of the default MLP is probed for after ProbeAfter as before), 21 s
// for 6.25 MB. Without it the watcher probed every ProbeAfter during a
// large push or reply (two streams per probe, at the peers' stream
// limits) and abandoned the transfer whenever a leadership hand-over
// named another leader meanwhile.
func transferAllowance(n int) time.Duration {
	if n <= largeFrame {
		return 0
	}
	return time.Duration(float64(n-largeFrame) / MinReplyRate * float64(time.Second))
}

func (c *Client) stream(ctx context.Context, target mesh.NodeID) (mesh.Stream, error) {
	if s, ok := c.streams[target]; ok {
		return s, nil
	}
	addr, err := c.resolve(target)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, c.cfg.ReplyTimeout)
	defer cancel()
	s, err := c.tr.Dial(dctx, target, addr, mesh.Channel{Kind: mesh.KindRPC, Shard: c.cfg.Shard})
	if err != nil {
		return nil, fmt.Errorf("shard %d: dial %s: %w", c.cfg.Shard, target, err)
	}
	c.streams[target] = s
	return s, nil
}

// ReadInto asks the shard's leader for a linearizable read of its
// parameters and clocks ([dsspmesh/shard.Replica.Read]), following NotLeader redirects
// and retrying other replicas until ctx (or Config.Deadline) ends (an
// error wrapping ErrDeadline). A read changes nothing, so retrying is
// always safe. A shard without its Init entry yet gives an error wrapping
// ErrNotInitialized. It decodes the parameters into dst when it has their
// length (Slice.Params is then dst), so that a reader of a large model
// assembles it without a second copy of every slice; nil dst: a new slice.
func (c *Client) ReadInto(ctx context.Context, dst []float32) (Slice, error) {
	c.reads++
	var bad error
	rep, err := c.call(ctx, c.request(OpRead, c.reads), nil, func(n int, r io.Reader) error {
		vals, err := FP32.values(n)
		if bad = err; err != nil {
			return nil
		}
		if len(dst) != vals {
			dst = make([]float32, vals)
		}
		_, err = FP32.DecodeFrom(dst, r)
		return err
	}, nil)
	if errors.Is(err, ErrRejected) {
		return Slice{}, fmt.Errorf("shard %d: read: %w", c.cfg.Shard, ErrNotInitialized)
	}
	if err != nil {
		return Slice{}, err
	}
	if bad != nil {
		return Slice{}, fmt.Errorf("shard %d: parameters from leader: %w", c.cfg.Shard, bad)
	}
	return Slice{Shard: c.cfg.Shard, Leader: c.leader, Params: dst,
		Min: rep.Clock, Max: rep.Max, Index: rep.Index, Samples: rep.Samples}, nil
}
