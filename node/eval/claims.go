package eval

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/mesh"
	"dsspmesh/node/records"
)

// ClaimDeps are what [Claims] asks of the node.
type ClaimDeps struct {
	// Evaluator is the member this node's view designates as evaluator.
	Evaluator func() string
	// SeqBound is the largest Seq an honest evaluation can carry as this
	// node sees the shards (shards.Manager.SeqBound); ok is false when it
	// cannot say (no replica here yet). Nil: no bound.
	SeqBound func() (uint64, bool)
	// Check reads the parameters and says whether they diverged, and
	// what it saw ([Room.CheckParameters]).
	Check func(ctx context.Context) (bool, string, error)
	// Training reports whether this node runs a worker: a divergence
	// claim is checked only then.
	Training func() bool
	// Diverged stops this node's worker, saying what was seen.
	Diverged func(what string)
	// Settings names what a user tunes when the job does not learn: the
	// staleness bound and the learning rate in force (Learning's warning
	// says them). Nil: not named.
	Settings func() string
	// StartLoss is the job's loss at its start as this node's worker
	// measured it (records.LocalWorker.StartLoss; NaN: none — the node
	// trains no worker, or joined after the start), Learning's reference.
	// Nil: none.
	StartLoss func() float64
	// Accepted is told of each evaluation accepted from the evaluator
	// (Room.Audit); nil: none.
	Accepted func(e records.EvalResult)
	// Go runs f in a goroutine the node waits for before it returns.
	Go     func(f func())
	Now    func() time.Time
	Logger *slog.Logger
}

// Claims are the evaluations a node holds (the newest and a bounded
// history) and its judgement of those peers send. Safe for concurrent
// use; its lock is held across no call of ClaimDeps.
type Claims struct {
	d ClaimDeps

	mu    sync.Mutex
	eval  *records.EvalResult
	evals []records.EvalResult // the last HistorySize evaluations, oldest first

	dropped   uint64
	warned    time.Time
	learning  string    // Learning's verdict on evals, with Settings; "" while the job learns
	checking  bool      // a divergence check runs
	checkedAt time.Time // when the last one started
}

// NewClaims holds no evaluation yet.
func NewClaims(d ClaimDeps) *Claims { return &Claims{d: d} }

// HistorySize bounds the evaluations kept for the dashboard's charts.
const HistorySize = 360

// SeqSlack is how many pushes of the job's largest an honest evaluation's
// Seq may run ahead of twice the samples the replicas here count, per
// shard (shards.Manager.SeqBound).
const SeqSlack = 4096

// maxSeq bounds an evaluation's Seq: the sum of the shards' sample
// counts, each an int64 the FSM keeps in its domain, so a Seq beyond
// MaxInt64 is no state of the parameters.
const maxSeq = math.MaxInt64

// WarnEvery limits the WARN lines of dropped evaluations and ignored
// divergence claims to one per this interval (the rest are counted).
const WarnEvery = 10 * time.Second

// Set keeps e if it is newer than the evaluation held: a larger Seq (the
// mesh's own order of parameter states) from the same evaluator, or the
// same Seq evaluated later, or any evaluation by another evaluator (a new
// evaluator's sequence starts from its own first evaluation: seq is keyed
// by the evaluator). Wall-clock time alone never wins, so a peer with a
// fast clock cannot freeze the evaluation shown. Set takes this node's
// own evaluations and those [Claims.Receive] accepted. A diverged
// evaluation made here stops this node's worker (ClaimDeps.Diverged): the
// evaluator saw the non-finite loss itself.
func (c *Claims) Set(e records.EvalResult) {
	c.keep(e)
	if e.Diverged {
		c.d.Diverged(fmt.Sprintf("evaluation by %s at sequence %d (its iteration %d) gave loss %v, accuracy %v", e.By, e.Seq, e.Iter, e.Loss, e.Accuracy))
	}
}

func (c *Claims) keep(e records.EvalResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	newer := c.eval == nil || e.By != c.eval.By || e.Seq > c.eval.Seq || e.Seq == c.eval.Seq && e.At.After(c.eval.At)
	if newer {
		c.eval = &e
		c.evals = append(c.evals, e)
		if len(c.evals) > HistorySize {
			c.evals = slices.Delete(c.evals, 0, len(c.evals)-HistorySize)
		}
		c.judgeLocked()
	}
}

// judgeLocked updates the learning check's verdict and logs a change:
// one WARN when the job stops learning, one INFO when it learns again.
func (c *Claims) judgeLocked() {
	start := math.NaN()
	if c.d.StartLoss != nil {
		start = c.d.StartLoss()
	}
	v := Learning(c.evals, start)
	if v != "" && c.d.Settings != nil {
		v += "; " + c.d.Settings()
	}
	was := c.learning
	c.learning = v
	switch {
	case v != "" && was == "":
		c.d.Logger.Warn(v)
	case v == "" && was != "":
		c.d.Logger.Info("the job learns again", "accuracy", c.eval.Accuracy, "loss", c.eval.Loss)
	}
}

// Learning is the learning check's warning ("" while the job learns).
func (c *Claims) Learning() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.learning
}

// Held is the evaluation held (nil: none) and the history, oldest first;
// both copies.
func (c *Claims) Held() (*records.EvalResult, []records.EvalResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return copyOf(c.eval), append([]records.EvalResult{}, c.evals...)
}

// copyOf is a copy of *p, nil for nil.
func copyOf[T any](p *T) *T {
	if p == nil {
		return nil
	}
	cp := *p
	return &cp
}

// Dropped is how many evaluations from peers were not acted on.
func (c *Claims) Dropped() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// Receive judges an evaluation that peer sent over the control channel
// (peer is the authenticated stream's node id). It is taken only from the
// member this node's own view designates as evaluator, signed by it when
// its id is self-certifying ([VerifyClaim]), and only with a
// Seq in the domain (at most MaxInt64, and at most ClaimDeps.SeqBound: a
// Seq far ahead of the samples the shards here count cannot pin the
// evaluation shown); anything else is dropped, counted and logged at WARN
// (rate-limited), and the error says why. A diverged claim does not stop
// this node's worker by itself: the node reads the parameters and checks
// them (ClaimDeps.Check); the claim is shown only once confirmed.
func (c *Claims) Receive(ctx context.Context, peer mesh.NodeID, e records.EvalResult) error {
	var why string
	switch ev := c.d.Evaluator(); {
	case e.By != string(peer):
		why = fmt.Sprintf("eval by %q sent by %q", e.By, peer) // every peer acts only as itself
	case string(peer) != ev:
		why = fmt.Sprintf("eval from %q, not the evaluator (%q)", peer, ev)
	case e.Seq > maxSeq:
		why = fmt.Sprintf("eval from %q with sequence %d beyond any state of the parameters", peer, e.Seq)
	case c.d.SeqBound != nil:
		if bound, ok := c.d.SeqBound(); ok && e.Seq > bound {
			why = fmt.Sprintf("eval from %q with sequence %d far ahead of the samples the shards here count (at most %d)", peer, e.Seq, bound)
		}
	}
	if err := VerifyClaim(e); why == "" && err != nil {
		why = err.Error()
	}
	if why != "" {
		c.warn("evaluation dropped", "reason", why)
		return errors.New(why)
	}
	if !e.Diverged {
		c.Set(e)
		if c.d.Accepted != nil {
			c.d.Accepted(e)
		}
		return nil
	}
	c.checkDiverged(ctx, e) // kept once confirmed
	return nil
}

// warn counts a claim not acted on and logs it at WARN, at most once per
// WarnEvery.
func (c *Claims) warn(msg string, args ...any) {
	c.mu.Lock()
	c.dropped++
	dropped := c.dropped
	now := c.d.Now()
	warn := now.Sub(c.warned) >= WarnEvery
	if warn {
		c.warned = now
	}
	c.mu.Unlock()
	if warn && c.d.Logger != nil {
		c.d.Logger.Warn(msg, append(args, "dropped_total", dropped)...)
	}
}

// checkDiverged acts on the evaluator's claim that the job diverged: in
// the background, at most one check at a time and one per WarnEvery,
// this node reads the parameters and stops its worker only if it sees the
// divergence itself; otherwise the claim is logged at WARN and ignored.
func (c *Claims) checkDiverged(ctx context.Context, e records.EvalResult) {
	if !c.d.Training() {
		return
	}
	c.mu.Lock()
	now := c.d.Now()
	if c.checking || !c.checkedAt.IsZero() && now.Sub(c.checkedAt) < WarnEvery {
		c.mu.Unlock()
		return
	}
	c.checking, c.checkedAt = true, now
	c.mu.Unlock()
	c.d.Go(func() {
		defer func() { c.mu.Lock(); c.checking = false; c.mu.Unlock() }()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		bad, what, err := c.d.Check(cctx)
		switch {
		case err != nil:
			c.warn("divergence claim not checked; training goes on", "by", e.By, "seq", e.Seq, "err", err)
		case !bad:
			c.warn("divergence claim ignored: the parameters read here are finite and evaluate to a finite loss; training goes on", "by", e.By, "seq", e.Seq)
		default:
			c.keep(e)
			c.d.Diverged(fmt.Sprintf("%s claimed it at sequence %d and this node saw it itself: %s", e.By, e.Seq, what))
		}
	})
}

// CheckParameters reads the global parameters (from every shard's
// leader, as an evaluation does; params long) and says whether they
// diverged: a non-finite value, or a non-finite loss by evaluate.
func (r *Room) CheckParameters(ctx context.Context, params int, evaluate func(theta []float32) (cudaops.Eval, error)) (bool, string, error) {
	snap, err := r.Read(ctx, "divergence check", make([]float32, params))
	if err != nil {
		return false, "", err
	}
	for i, v := range snap.Theta {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return true, fmt.Sprintf("parameter %d is %v", i, v), nil
		}
	}
	ev, err := evaluate(snap.Theta)
	if err != nil {
		return false, "", err
	}
	if !finite(ev.Loss) || !finite(ev.Accuracy) {
		return true, fmt.Sprintf("its evaluation here gave loss %v, accuracy %v", ev.Loss, ev.Accuracy), nil
	}
	return false, "", nil
}
