package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// AnswerLimits bound a trainer's answer: First until its first update
// (a first step may compile kernels or warm a GPU), then Factor times its
// mean round trip, at least Min. Past the limit the trainer is taken for
// hung and detached: alive but silent, it would hold every worker of the
// mesh at the gate.
type AnswerLimits struct {
	First, Min time.Duration
	Factor     float64
}

// DefaultAnswerLimits: 10 minutes for the first update, then 50 × the
// mean round trip, at least 2 minutes.
var DefaultAnswerLimits = AnswerLimits{First: 10 * time.Minute, Min: 2 * time.Minute, Factor: 50}

// Stats are an attachment's counters, for /status and the bridge's
// measured cost.
type Stats struct {
	PID         int    // the trainer's process id (SO_PEERCRED), 0 if unknown
	Iterations  uint64 // updates received
	Evaluations uint64
	// ThetaBytes is the bytes copied into the theta region, ThetaNanos
	// the time those copies took, for the iterations counted.
	ThetaBytes, ThetaNanos uint64
	// RoundTripNanos is the time from compute sent to update received;
	// TrainerNanos the part the trainer reported as its own (compute_s),
	// when it reports it.
	RoundTripNanos, TrainerNanos uint64
	// LR is the learning rate the trainer's last update stepped at (0:
	// not said).
	LR float64
}

// External is the worker's Compute (node/worker) through an attached trainer: each
// Gradient writes θ into the theta region, sends compute and hands the
// update region to emit once the trainer answered.
type External struct {
	conn     *net.UnixConn
	shm      *Shm
	pid      int
	maxFrame int
	h        int // the local steps of the round Next named
	log      *slog.Logger
	// goneGrace is how long Gradient waits for its ctx to end once the
	// trainer is gone before it returns the error (Config.GoneGrace).
	goneGrace time.Duration
	limits    AnswerLimits

	mu    sync.Mutex // one exchange (compute/update, evaluate/evaluated) at a time
	batch int
	pos   int64
	iter  int64
	seq   uint64
	// late is a compute whose wait was abandoned (ctx ended): its update,
	// when it comes, is dropped.
	late int64

	wmu  sync.Mutex // innermost: one write at a time
	wbuf []byte
	out  []byte

	in chan inMsg
	// evaluated carries the answer to the evaluation under way (evalSeq,
	// 0: none): a trainer that evaluates off its training path acks the
	// evaluate with "evaluating" at once and sends "evaluated" whenever it
	// is done, between its updates; the reader routes it here.
	evaluated chan inMsg
	// evalTurn holds one evaluation at a time (the built-in evaluation
	// loop's and the worker's start loss may ask at once): evalSeq names
	// the one under way, and the trainer has one model copy to evaluate.
	evalTurn chan struct{}
	evalSeq  atomic.Uint64
	lastSeq  atomic.Uint64 // the last evaluate's seq
	done     chan struct{}
	once     sync.Once
	err      error // why it ended, set before done is closed

	iters, evals, thetaBytes, thetaNanos, rtNanos, trainerNanos atomic.Uint64
	lr                                                          atomic.Uint64 // float64 bits: the last update's lr
}

func newExternal(c *net.UnixConn, shm *Shm, pid, maxFrame int, goneGrace time.Duration, limits AnswerLimits, log *slog.Logger) *External {
	e := &External{conn: c, shm: shm, pid: pid, maxFrame: maxFrame, log: log, goneGrace: goneGrace, limits: limits,
		late: -1, in: make(chan inMsg, 1), evaluated: make(chan inMsg, 2), evalTurn: make(chan struct{}, 1), done: make(chan struct{})}
	go e.read()
	return e
}

// read decodes the trainer's messages until the connection ends. A
// message nobody asked for (a second one before the first was taken)
// breaks the protocol.
func (e *External) read() {
	var buf []byte
	for {
		body, err := ReadFrame(e.conn, buf, e.maxFrame)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				e.end(fmt.Errorf("%w: the socket closed (EOF)", ErrTrainerGone))
			} else if errors.Is(err, ErrFrameTooLarge) {
				e.end(&ProtocolError{Reason: err.Error()})
			} else {
				e.end(fmt.Errorf("%w: %v", ErrTrainerGone, err))
			}
			return
		}
		buf = body
		m, err := decode(body)
		if err != nil {
			e.end(err)
			return
		}
		ch := e.in
		if (m.Op == "evaluated" || m.Op == "evaluating") && m.Seq != nil {
			switch pending := e.evalSeq.Load(); {
			case *m.Seq == pending:
				ch = e.evaluated // its ack and its answer, in their order
			case m.Op == "evaluated" && pending == 0 && *m.Seq != 0 && *m.Seq <= e.lastSeq.Load():
				continue // the answer to an evaluation abandoned (its ctx ended): dropped
			}
		}
		select {
		case ch <- m:
		default:
			e.end(&ProtocolError{Reason: fmt.Sprintf("unsolicited %q while an earlier message waits", m.Op)})
			return
		}
	}
}

// end ends the attachment with err (the first one wins) and closes the
// socket.
func (e *External) end(err error) {
	e.once.Do(func() {
		e.err = err
		close(e.done)
		e.conn.Close()
	})
}

// Done is closed when the attachment has ended.
func (e *External) Done() <-chan struct{} { return e.done }

// Err is why the attachment ended; nil while it lasts.
func (e *External) Err() error {
	select {
	case <-e.done:
		return e.err
	default:
		return nil
	}
}

// Close is Stop(StopEnd, reason): training is over for this trainer.
func (e *External) Close(reason string) { e.Stop(StopEnd, reason) }

// Stop sends stop with code and reason (best effort) and ends the
// attachment once the trainer closed its side, or after StopGrace: a
// trainer in the middle of a compute can still write its update, then
// reads stop.
func (e *External) Stop(code, reason string) {
	select {
	case <-e.done:
		return
	default:
	}
	b, _ := json.Marshal(stopMsg{Op: "stop", Code: code, Reason: reason})
	if e.send(b, time.Second) == nil {
		t := time.NewTimer(StopGrace)
		select {
		case <-e.done:
		case <-t.C:
		}
		t.Stop()
	}
	e.end(fmt.Errorf("%w: stopped by the node (%s)", ErrTrainerGone, reason))
}

// StopGrace bounds how long Close waits for the trainer to close its side
// after stop.
const StopGrace = 2 * time.Second

// send writes one frame, bounded by limit.
func (e *External) send(body []byte, limit time.Duration) error {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	e.conn.SetWriteDeadline(time.Now().Add(limit))
	var err error
	e.wbuf, err = WriteFrame(e.conn, e.wbuf, body)
	if err != nil {
		err = fmt.Errorf("%w: write: %v", ErrTrainerGone, err)
		e.end(err)
	}
	return err
}

// wait returns the trainer's next message, ctx bounding the wait.
func (e *External) wait(ctx context.Context, what string) (inMsg, error) {
	limit := e.answerLimit()
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			err := fmt.Errorf("%w: no %s within %v: the trainer hangs", ErrTrainerGone, what, limit)
			e.log.Warn("trainer: no answer; detaching it (its worker leaves)", "err", err)
			e.end(err)
			return inMsg{}, err
		case m := <-e.in:
			if e.late >= 0 && m.Op == "update" && m.Iter != nil && *m.Iter == e.late {
				e.late = -1 // the answer to an abandoned compute
				continue
			}
			return m, nil
		case <-e.done:
			return inMsg{}, e.gone()
		case <-ctx.Done():
			return inMsg{}, ctx.Err()
		}
	}
}

// answerLimit is how long the trainer may take to answer: Limits.First
// until its first update, then Limits.Factor times its mean round trip,
// at least Limits.Min. A trainer past it hangs (alive, never answering)
// and would hold the mesh at its gate; it is detached, as one that died.
func (e *External) answerLimit() time.Duration {
	n := e.iters.Load()
	if n == 0 {
		return e.limits.First
	}
	mean := time.Duration(e.rtNanos.Load() / n)
	return max(e.limits.Min, time.Duration(e.limits.Factor*float64(mean)))
}

func (e *External) gone() error {
	if errors.Is(e.err, ErrTrainerGone) {
		return e.err
	}
	return fmt.Errorf("%w: %w", ErrTrainerGone, e.err)
}

// fail ends the attachment on a protocol error and returns it.
func (e *External) fail(err error) error {
	e.log.Warn("trainer: bad message; detaching it", "err", err)
	e.end(err)
	return err
}

// NumParams implements node/worker.Compute.
func (e *External) NumParams() int { return e.shm.P }

// Next implements node/worker.Compute: the batch the next compute names.
//
// A round of h > 1 local steps (--local-steps) goes to the trainer as
// local_steps h of batch n/h each (under the balance layer a round's n
// need not divide by h: the trainer computes h·⌊n/h⌋ samples).
func (e *External) Next(n, h int, pos int64) error {
	if n < 1 || h < 1 || n < h {
		return fmt.Errorf("trainer: round of %d samples in %d steps", n, h)
	}
	e.mu.Lock()
	e.batch, e.h, e.pos = n, h, pos
	e.mu.Unlock()
	return nil
}

// Theta is the theta region: node/worker keeps its θ there (its
// ThetaHolder), so a Gradient on it copies nothing.
func (e *External) Theta() []float32 { return e.shm.Region(RegionTheta) }

// Gradient implements node/worker.Compute: θ into theta (no copy when θ
// is the region itself, Theta), compute, wait
// for the update (ctx bounds the wait), then the update region to emit
// in one piece. A trainer gone is an error wrapping [ErrTrainerGone]
// (returned once ctx ends, or after the server's Config.GoneGrace), a bad update a
// [*ProtocolError] (and the attachment ends).
func (e *External) Gradient(ctx context.Context, theta []float32, lo, hi int, emit func(off int, v []float32)) (float64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	loss, err := e.gradient(ctx, theta, lo, hi, emit)
	if errors.Is(err, ErrTrainerGone) && ctx.Err() == nil && e.goneGrace > 0 {
		// The node ends the worker as soon as its trainer goes (Done):
		// wait for that a moment, so the worker sees its ctx end rather
		// than a failure.
		t := time.NewTimer(e.goneGrace)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-t.C:
		}
	}
	return loss, err
}

func (e *External) gradient(ctx context.Context, theta []float32, lo, hi int, emit func(off int, v []float32)) (float64, error) {
	if err := e.Err(); err != nil {
		return 0, e.gone()
	}
	if len(theta) != e.shm.P {
		return 0, fmt.Errorf("trainer: θ of %d parameters, the job has %d", len(theta), e.shm.P)
	}
	if lo < 0 || hi <= lo || hi > e.batch {
		return 0, fmt.Errorf("trainer: samples [%d, %d) of a batch of %d", lo, hi, e.batch)
	}
	var copyNanos, copied uint64
	if region := e.shm.Region(RegionTheta); &region[0] != &theta[0] {
		start := time.Now()
		copy(region, theta)
		copyNanos, copied = uint64(time.Since(start)), uint64(4*len(theta))
	} // else the worker keeps θ in the region itself (Theta)
	// A round goes whole (the trainer runs its inner steps); its split
	// under --pipeline is refused by the job (job.Spec.Validate).
	b, steps, mlo, mhi := e.batch, 1, lo, hi
	if e.h > 1 {
		if lo != 0 || hi != e.batch {
			return 0, fmt.Errorf("trainer: samples [%d, %d) of a round of %d: a trainer takes a round whole", lo, hi, e.batch)
		}
		b, steps = e.batch/e.h, e.h
		mlo, mhi = 0, b
	}
	e.iter++
	e.out = appendCompute(e.out[:0], e.iter, b, e.pos, steps, mlo, mhi)
	sent := time.Now()
	if err := e.send(e.out, 10*time.Second); err != nil {
		return 0, err
	}
	m, err := e.wait(ctx, "update")
	if err != nil {
		if ctx.Err() != nil {
			e.late = e.iter
		}
		return 0, err
	}
	loss, _, err := checkUpdate(m, e.iter, mlo, mhi, steps)
	if err != nil {
		return 0, e.fail(err)
	}
	e.rtNanos.Add(uint64(time.Since(sent)))
	e.thetaNanos.Add(copyNanos) // counted with the update, so that the means are per iteration
	e.thetaBytes.Add(copied)
	if m.ComputeSeconds != nil && *m.ComputeSeconds >= 0 && *m.ComputeSeconds < 1e6 {
		e.trainerNanos.Add(uint64(*m.ComputeSeconds * 1e9))
	}
	if m.LR != nil && *m.LR >= 0 && !math.IsInf(*m.LR, 0) {
		e.lr.Store(math.Float64bits(*m.LR))
	}
	e.iters.Add(1)
	emit(0, e.shm.Region(RegionUpdate))
	return loss, nil
}

// Evaluate has the trainer evaluate theta: it is written into the eval
// region and evaluate sent between an update and the next compute. A
// trainer that evaluates off its training path answers "evaluating" once
// it has taken the region: the exchange lock is then released, so the
// trainer's rounds go on while it evaluates, and Evaluate waits for its
// "evaluated". One evaluation runs at a time; a second Evaluate waits for
// the first. ctx bounds the waits.
func (e *External) Evaluate(ctx context.Context, theta []float32) (Evaluation, error) {
	select {
	case e.evalTurn <- struct{}{}:
		defer func() { <-e.evalTurn }()
	case <-e.done:
		return Evaluation{}, e.gone()
	case <-ctx.Done():
		return Evaluation{}, ctx.Err()
	}
	e.mu.Lock()
	locked := true
	defer func() {
		if locked {
			e.mu.Unlock()
		}
	}()
	if err := e.Err(); err != nil {
		return Evaluation{}, e.gone()
	}
	if len(theta) != e.shm.P {
		return Evaluation{}, fmt.Errorf("trainer: evaluating %d parameters, the job has %d", len(theta), e.shm.P)
	}
	copy(e.shm.Region(RegionEval), theta)
	e.seq++
	seq := e.seq
	e.lastSeq.Store(seq)
	e.evalSeq.Store(seq)
	defer e.evalSeq.Store(0)
	if err := e.send(appendEvaluate(nil, seq), 10*time.Second); err != nil {
		return Evaluation{}, err
	}
	m, err := e.waitEval(ctx)
	if err != nil {
		return Evaluation{}, err
	}
	if m.Op == "evaluating" { // off the training path: the region is taken, the rounds go on
		if m.Seq == nil || *m.Seq != seq {
			return Evaluation{}, e.fail(&ProtocolError{Reason: fmt.Sprintf("evaluating %s, want %d", ptrText(m.Seq), seq)})
		}
		e.mu.Unlock()
		locked = false
		select {
		case m = <-e.evaluated:
		case <-e.done:
			return Evaluation{}, e.gone()
		case <-ctx.Done():
			return Evaluation{}, ctx.Err()
		}
	}
	ev, err := checkEvaluated(m, seq)
	var notEvaluated *EvaluationError
	if errors.As(err, &notEvaluated) {
		return Evaluation{}, err
	}
	if err != nil {
		return Evaluation{}, e.fail(err)
	}
	e.evals.Add(1)
	return ev, nil
}

// waitEval waits for the trainer's first answer to an evaluate: its
// "evaluated" or its "evaluating" ack (both routed to e.evaluated, in
// their order); anything else meanwhile (in e.in) breaks the protocol.
// A ctx that ends ends the attachment: the answer would come to the next
// exchange.
func (e *External) waitEval(ctx context.Context) (inMsg, error) {
	limit := e.answerLimit()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case m := <-e.evaluated:
		return m, nil
	case m := <-e.in:
		return m, nil
	case <-t.C:
		err := fmt.Errorf("%w: no evaluated within %v: the trainer hangs", ErrTrainerGone, limit)
		e.end(err)
		return inMsg{}, err
	case <-e.done:
		return inMsg{}, e.gone()
	case <-ctx.Done():
		e.end(fmt.Errorf("%w: evaluation abandoned: %v", ErrTrainerGone, ctx.Err()))
		return inMsg{}, ctx.Err()
	}
}

// StartLoss implements node/worker.StartLoss: the test loss of θ (the
// job's θ₀, which the worker computed its first iteration on), evaluated
// by the trainer, for a trainer whose updates carry no loss. ok is false
// when it does not evaluate (no evaluation function) or within 2 minutes.
func (e *External) StartLoss(ctx context.Context, theta []float32) (float64, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ev, err := e.Evaluate(ctx, theta)
	if err != nil || math.IsNaN(ev.Loss) {
		return 0, false
	}
	return ev.Loss, true
}

// Stats are the attachment's counters so far.
func (e *External) Stats() Stats {
	return Stats{PID: e.pid, Iterations: e.iters.Load(), Evaluations: e.evals.Load(),
		ThetaBytes: e.thetaBytes.Load(), ThetaNanos: e.thetaNanos.Load(),
		RoundTripNanos: e.rtNanos.Load(), TrainerNanos: e.trainerNanos.Load(), LR: math.Float64frombits(e.lr.Load())}
}
