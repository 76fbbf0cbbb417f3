package shard

import (
	"fmt"
	"io"
	"math"
	"slices"

	"dsspmesh/shardapi"
)

// params is the shard's parameters θ with the optimizer's state: the
// velocity under Momentum, or under an outer rule (outer.go) its momentum
// and the count of arrivals since its last momentum step. Its section is
// "arr" (the count, absent at 0) in the header and θ then the velocity as
// the snapshot's body.
//
// An entry borrows grad (the gradient examined) and sum (those accepted)
// from the pool (scratch.go) until release. While a snapshot still reads
// θ and the velocity (frozen ≠ 0) the next step steps copies.
type params struct {
	spec            shardapi.Spec
	theta, velocity []float32 // velocity nil without momentum (hasVelocity)
	arrivals        int64
	sum, grad       []float32
	frozen          uint64 // the snapshot reading θ and the velocity, 0 if none
}

// newParams decodes an Init entry's initial parameters (fp32).
func newParams(shard uint32, spec shardapi.Spec, b []byte) (params, error) {
	theta := make([]float32, spec.Len)
	i, err := shardapi.FP32.Decode(theta, b)
	if err != nil {
		return params{}, fmt.Errorf("shard %d: %w: initial parameters: %w", shard, shardapi.ErrBadEntry, err)
	}
	if i >= 0 {
		return params{}, fmt.Errorf("shard %d: %w: initial parameter %d is %v", shard, shardapi.ErrBadEntry, i, theta[i])
	}
	p := params{spec: spec, theta: theta}
	if hasVelocity(spec) {
		p.velocity = make([]float32, spec.Len)
	}
	return p, nil
}

// rate is an entry's learning rate after samples global samples: the
// schedule's, or the outer rule's constant one.
func (p *params) rate(samples int64) float64 {
	if p.spec.Outer.On() {
		return p.spec.Outer.LR
	}
	return p.spec.Optimizer.Schedule.Rate(samples)
}

// gradBuf returns grad, borrowing it from the pool first if the entry has
// none yet: an entry of one push (or one summed group) borrows one buffer,
// which take then makes the sum.
func (p *params) gradBuf() []float32 {
	if p.grad == nil {
		p.grad = scratch.get(p.spec.Len)
	}
	return p.grad
}

// release gives the entry's buffers back to the pool.
func (p *params) release() {
	scratch.put(p.sum)
	scratch.put(p.grad)
	p.sum, p.grad = nil, nil
}

// decode decodes a push's gradient, pushed in the spec's precision, into
// grad: refused if not finite (unless the broken build skips it) or, on a
// push of no samples, not zero.
func (p *params) decode(g []byte, samples int64, checkFinite bool) (shardapi.Reason, string) {
	if i, _ := p.spec.Precision.Decode(p.gradBuf(), g); i >= 0 && checkFinite {
		return shardapi.ReasonNonFinite, fmt.Sprintf("value %d is %v", i, p.grad[i])
	}
	if samples == 0 {
		var sq float64
		for _, x := range p.grad {
			sq += float64(x) * float64(x)
		}
		return checkZeroSamples(0, sq)
	}
	return 0, ""
}

// decodeSum decodes a summed group's gradient (in the sums' precision).
func (p *params) decodeSum(sum []byte) (shardapi.Reason, string) {
	sp := p.spec.Precision.Sums()
	if len(sum) != sp.Bytes(p.spec.Len) {
		return shardapi.ReasonBadLength, fmt.Sprintf("summed gradient of %d bytes, want %d (%s)", len(sum), sp.Bytes(p.spec.Len), sp)
	}
	if i, _ := sp.Decode(p.gradBuf(), sum); i >= 0 {
		return shardapi.ReasonNonFinite, fmt.Sprintf("summed value %d is %v", i, p.grad[i])
	}
	return 0, ""
}

// weigh scales grad by samples / BalanceBase (docs/design.md#balance): the
// sum of an entry's gradients is then Σ b_i·g_i / b0, one process's step on
// the union of the samples at the job's learning rate per b0 samples. A
// push of exactly BalanceBase samples is left as it is; so is a
// pseudo-gradient under an outer rule (shardapi.Spec.Weighted).
func (p *params) weigh(samples int64) {
	if !p.spec.Weighted() || samples == p.spec.BalanceBase {
		return
	}
	w := float32(float64(samples) / float64(p.spec.BalanceBase))
	for j, g := range p.grad {
		p.grad[j] = float32(g * w)
	}
}

// check returns the first parameter that a step with the entry's sum with
// grad added (grad alone when first) would make non-finite or bring to
// ±2^64 (or whose velocity would be), or −1. It repeats the step's
// arithmetic exactly, float32 rounding included, without writing the
// candidate sum anywhere: take makes it the sum once the push is accepted.
// arrivals is the entry's arrivals with this push's, workers the gate's
// (the outer rule's momentum step depends on them).
func (p *params) check(first bool, arrivals int64, workers int, lr float64) int {
	if p.spec.Outer.On() {
		var sum []float32
		if !first {
			sum = p.sum
		}
		r := ratesOf(p.spec.Outer, workers)
		return firstBadOuterStep(p.spec.Outer, r, p.theta, p.velocity, sum, p.grad, p.starts(arrivals), p.fires(r, arrivals))
	}
	if first {
		return firstNonFiniteStep(p.spec.Optimizer, p.theta, p.velocity, p.grad, lr)
	}
	return firstNonFiniteStepSum(p.spec.Optimizer, p.theta, p.velocity, p.sum, p.grad, lr)
}

// take makes the sum check checked the entry's sum: grad itself when first
// (the buffers swap), else sum + grad, added in float32 as check added them.
func (p *params) take(first bool) {
	if first {
		p.sum, p.grad = p.grad, p.sum
		return
	}
	for j, g := range p.grad {
		p.sum[j] += g
	}
}

// step applies the entry's sum of arrivals arrivals: the optimizer's step
// at rate lr, or under an outer rule its step with workers in the gate.
func (p *params) step(lr float64, arrivals int64, workers int) {
	if p.frozen != 0 {
		p.theta, p.velocity = slices.Clone(p.theta), slices.Clone(p.velocity)
		p.frozen = 0
	}
	if !p.spec.Outer.On() {
		step(p.spec.Optimizer, p.theta, p.velocity, p.sum, lr)
		return
	}
	r := ratesOf(p.spec.Outer, workers)
	if !p.spec.Outer.Nesterov() {
		// sgd and mean keep no period: their count stays 0, as a snapshot
		// of theirs must hold it (load).
		outerStep(p.spec.Outer, r, p.theta, p.velocity, p.sum, false, false)
		return
	}
	fire := p.fires(r, arrivals)
	outerStep(p.spec.Outer, r, p.theta, p.velocity, p.sum, p.starts(arrivals), fire)
	if fire {
		p.arrivals = 0
	} else {
		p.arrivals = satAdd(p.arrivals, arrivals)
	}
}

// starts reports whether an entry of k arrivals starts a momentum period:
// none is under way and it carries an arrival.
func (p *params) starts(k int64) bool { return k > 0 && p.arrivals == 0 }

// fires reports whether an entry of k arrivals ends the momentum period:
// the arrivals since the last momentum step reach N. An entry of no
// arrivals (fetches of no samples only) never does.
func (p *params) fires(r outerRates, k int64) bool { return k > 0 && satAdd(p.arrivals, k) >= r.n }

// norm is the Euclidean norm of θ (the outlier rule's floor for a round's
// pseudo-gradient, hygiene.go).
func (p *params) norm() float64 {
	var sq float64
	for _, v := range p.theta {
		sq += float64(v) * float64(v)
	}
	return math.Sqrt(sq)
}

// bytes is the size of θ and the velocity in fp32, 0 before Init.
func (p *params) bytes() int64 { return 4 * int64(len(p.theta)+len(p.velocity)) }

func (p *params) save(h *header) error {
	if p.arrivals != 0 {
		h.put("arr", p.arrivals)
	}
	return nil
}

func (p *params) load(h *header, j job) error {
	if _, err := h.get("arr", &p.arrivals); err != nil {
		return err
	}
	if p.arrivals < 0 || p.arrivals >= maxArrivals || p.arrivals != 0 && !j.spec.Outer.Nesterov() {
		return fmt.Errorf("outer arrivals %d (outer %s): must be in [0, %d) and 0 without nesterov", p.arrivals, j.spec.Outer.Kind, maxArrivals)
	}
	p.spec = j.spec
	return nil
}

// loadBody reads θ and the velocity of an initialised job's snapshot from
// r (and, in a snapshot of version 1 under the outer Nesterov, the buffer
// of the period's arrivals, folded into the momentum with workers in the
// gate), then refuses any byte more.
func (p *params) loadBody(r io.Reader, version uint8, workers int) error {
	var chunk []byte
	var err error
	if p.theta, chunk, err = readFloats(r, nil, p.spec.Len); err != nil {
		return fmt.Errorf("parameters: %v", err)
	}
	if hasVelocity(p.spec) {
		if p.velocity, _, err = readFloats(r, chunk, p.spec.Len); err != nil {
			return fmt.Errorf("velocity: %v", err)
		}
	}
	var buf []float32
	if version == snapshotWithBuffer && p.spec.Outer.Nesterov() {
		if buf, _, err = readFloats(r, chunk, p.spec.Len); err != nil {
			return fmt.Errorf("outer buffer: %v", err)
		}
	}
	if err := readEnd(r); err != nil {
		return err
	}
	if i := max(firstNonFinite(p.theta), firstNonFinite(p.velocity), firstNonFinite(buf)); i >= 0 {
		return fmt.Errorf("parameter %d is not finite", i)
	}
	if p.arrivals > 0 && buf != nil {
		if i := foldBuffer(p.spec.Outer, workers, p.velocity, buf); i >= 0 {
			return fmt.Errorf("momentum %d with the outer buffer folded in is not finite", i)
		}
	}
	return nil
}

// foldBuffer turns a version-1 snapshot's outer state in the middle of a
// momentum period (momentum m, buffer b of the period's arrivals, with
// workers in the gate) into this build's: m ← μ·m + b/N. It returns the
// first index whose result is out of the momentum's domain, or −1.
func foldBuffer(o shardapi.Outer, workers int, m, b []float32) int {
	r := ratesOf(o, workers)
	for i, bi := range b {
		m[i] = float32(r.mu*m[i]) + float32(r.inv*bi)
		if outOfDomain(m[i]) {
			return i
		}
	}
	return -1
}

// firstNonFinite returns the index of the first NaN or ±Inf in v, or −1.
func firstNonFinite(v []float32) int {
	for i, x := range v {
		if math.Float32bits(x)&0x7f800000 == 0x7f800000 {
			return i
		}
	}
	return -1
}

func countNonFinite(v []float32) int {
	n := 0
	for _, x := range v {
		if math.Float32bits(x)&0x7f800000 == 0x7f800000 {
			n++
		}
	}
	return n
}
