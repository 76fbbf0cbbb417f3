package trainer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"dsspmesh/cudaops"
	"dsspmesh/node/job"
)

// ErrTrainerGone is every wait on an attachment that ended: the trainer
// closed the socket or died (EOF), sent a bad message, or the node ended
// it ([External.Close]). [External.Err] says which.
var ErrTrainerGone = errors.New("trainer: the trainer is gone")

// ProtocolError is a message from a trainer that breaks the protocol; it
// ends the attachment.
type ProtocolError struct{ Reason string }

func (e *ProtocolError) Error() string { return "trainer: protocol: " + e.Reason }

// Version is the protocol's version; a hello naming another is refused
// with code "version". Version 2 added tensors' dtypes, kinds and
// aliases, the update's meaning (welcome's "update"), the job's
// optimizer, stop's code and update's lr.
const Version = 2

// Error codes of an "error" message, the node refusing a trainer.
const (
	CodeLayoutMismatch = "layout-mismatch"
	CodeVersion        = "version"
	CodeBusy           = "busy"
	CodeJobMismatch    = "job-mismatch"
	CodeNotExternal    = "not-external"
	CodeProtocol       = "protocol"
	// CodeShm: the node could not make the shared-memory file (the
	// message names the file, and its owner when it exists).
	CodeShm = "shm"
)

// Tensor is one entry of a layout on the wire: a parameter or a buffer
// of the trainer's model (its state_dict entries), with the other names
// the same tensor has in the model's state_dict (a tied weight).
type Tensor struct {
	Name  string `json:"name"`
	Shape []int  `json:"shape"`
	// Dtype is torch's name of the tensor's dtype (wireDtypes).
	Dtype string `json:"dtype"`
	// Kind is "param" or "buffer" (a BatchNorm's running statistics):
	// both travel alike; a hello may leave it out (param).
	Kind    string   `json:"kind,omitempty"`
	Aliases []string `json:"aliases,omitempty"`
}

// wireDtypes maps torch's dtype names to a layout's (safetensors').
var wireDtypes = map[string]string{
	"float32": "F32", "float64": "F64", "bfloat16": "BF16", "float16": "F16",
	"int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
}

// WireLayout is l as hello and welcome carry it.
func WireLayout(l cudaops.Layout) []Tensor {
	out := make([]Tensor, len(l))
	for i, r := range l {
		out[i] = Tensor{Name: r.Name, Shape: r.Shape, Dtype: "float32", Aliases: r.Aliases}
		for w, d := range wireDtypes {
			if d == r.DtypeOf() {
				out[i].Dtype = w
			}
		}
		if out[i].Shape == nil {
			out[i].Shape = []int{}
		}
	}
	return out
}

// ParseWireLayout checks a layout from a trainer (known dtypes and kinds,
// job.CheckLayout's bounds) and places it in the flat vector.
func ParseWireLayout(ts []Tensor) (cudaops.Layout, error) {
	if len(ts) == 0 || len(ts) > job.MaxLayoutTensors {
		return nil, fmt.Errorf("layout: %d tensors, want 1 to %d", len(ts), job.MaxLayoutTensors)
	}
	l := make(cudaops.Layout, len(ts))
	for i, t := range ts {
		dt, ok := wireDtypes[t.Dtype]
		if !ok {
			return nil, fmt.Errorf("layout: tensor %q: dtype %q (known: float32, float64, bfloat16, float16, int64, int32, int16, int8, uint8, bool)", t.Name, t.Dtype)
		}
		if t.Kind != "" && t.Kind != "param" && t.Kind != "buffer" {
			return nil, fmt.Errorf("layout: tensor %q: kind %q, want param or buffer", t.Name, t.Kind)
		}
		if len(t.Shape) > 16 {
			return nil, fmt.Errorf("layout: tensor %q: %d dimensions, at most 16", t.Name, len(t.Shape))
		}
		if len(t.Aliases) > job.MaxLayoutTensors {
			return nil, fmt.Errorf("layout: tensor %q: %d aliases", t.Name, len(t.Aliases))
		}
		l[i] = cudaops.Range{Name: t.Name, Shape: append([]int{}, t.Shape...), Dtype: dt}
		if len(t.Aliases) > 0 {
			l[i].Aliases = append([]string{}, t.Aliases...)
		}
	}
	return job.Place(l)
}

// inMsg is any message from a trainer. Fields a message needs are
// pointers so that a missing one is told from a zero.
type inMsg struct {
	Op       string   `json:"op"`
	Version  *int     `json:"version"`
	Role     string   `json:"role"`
	Layout   []Tensor `json:"layout"`
	Iter     *int64   `json:"iter"`
	Seq      *uint64  `json:"seq"`
	Loss     *float64 `json:"loss"`
	Samples  *int64   `json:"samples"`
	Accuracy *float64 `json:"accuracy"`
	// Error in evaluated: the trainer could not evaluate (no evaluation
	// function, it raised); not a measurement.
	Error string `json:"error"`
	// ComputeSeconds is optional in update: the trainer's own time for the
	// request, which Stats subtracts to tell the bridge's cost.
	ComputeSeconds *float64 `json:"compute_s"`
	// LR is optional in update: the learning rate the trainer's optimizer
	// stepped at (its first param group's), shown in /status.
	LR *float64 `json:"lr"`

	hasLoss bool // "loss" present, null or not
}

func decode(b []byte) (inMsg, error) {
	var m inMsg
	if err := json.Unmarshal(b, &m); err != nil {
		return inMsg{}, &ProtocolError{Reason: fmt.Sprintf("bad JSON: %v", err)}
	}
	m.hasLoss = m.Loss != nil || bytes.Contains(b, []byte(`"loss"`))
	if m.Op == "" {
		return inMsg{}, &ProtocolError{Reason: "message without an op"}
	}
	return m, nil
}

// welcome is the node's answer to an admitted hello.
type welcome struct {
	Op         string   `json:"op"`
	Node       string   `json:"node"`
	Shm        string   `json:"shm"`
	ShmBytes   int64    `json:"shm_bytes"`
	Params     int      `json:"params"`
	Layout     []Tensor `json:"layout"`
	Batch      int      `json:"batch"`
	LocalSteps int      `json:"local_steps"`
	Seed       uint64   `json:"seed"`
	Dataset    string   `json:"dataset"`
	SendInit   bool     `json:"send_init"`
	// Update is what an update holds: UpdateDelta (θ_start − θ_end of
	// the trainer's own optimizer steps) or UpdateGradient (the batch's
	// gradient: a job of the combine rule sum at one step a round).
	Update string `json:"update"`
	// Optimizer is the job's optimizer: what a trainer that brings none
	// steps with.
	Optimizer WireOptimizer `json:"optimizer"`
	// Wire is the job's wire precision: under int8 and bf16 the θ a
	// compute writes holds bf16-rounded values.
	Wire string `json:"wire"`
}

// What an update holds (welcome's "update").
const (
	UpdateDelta    = "delta"
	UpdateGradient = "gradient"
)

// WireOptimizer is the job's optimizer as welcome tells it.
type WireOptimizer struct {
	Kind     string  `json:"kind"` // sgd or momentum
	LR       float64 `json:"lr"`
	Momentum float64 `json:"momentum"`
}

type errorMsg struct {
	Op      string `json:"op"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Tensor names the first tensor that differs (layout-mismatch).
	Tensor string `json:"tensor,omitempty"`
}

type stopMsg struct {
	Op     string `json:"op"`
	Code   string `json:"code"`
	Reason string `json:"reason"`
}

// Stop codes (stop's "code"): StopEnd, training is over for this trainer
// (the node leaves, the run reached its end); StopStopped, the node
// stopped this trainer's worker for a reason the trainer must hear (its
// updates refused, a diverged job): dsspmesh raises it from step().
const (
	StopEnd     = "end"
	StopStopped = "stopped"
)

// appendCompute appends the compute message, built by hand: it is sent
// every iteration and allocates nothing.
func appendCompute(b []byte, iter int64, batch int, pos int64, steps, lo, hi int) []byte {
	b = append(b, `{"op":"compute","iter":`...)
	b = strconv.AppendInt(b, iter, 10)
	b = append(b, `,"batch":`...)
	b = strconv.AppendInt(b, int64(batch), 10)
	b = append(b, `,"pos":`...)
	b = strconv.AppendInt(b, pos, 10)
	b = append(b, `,"local_steps":`...)
	b = strconv.AppendInt(b, int64(steps), 10)
	b = append(b, `,"lo":`...)
	b = strconv.AppendInt(b, int64(lo), 10)
	b = append(b, `,"hi":`...)
	b = strconv.AppendInt(b, int64(hi), 10)
	return append(b, '}')
}

func appendEvaluate(b []byte, seq uint64) []byte {
	b = append(b, `{"op":"evaluate","seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	return append(b, '}')
}

// checkUpdate validates an update answering compute iter for samples
// [lo, hi) with steps local steps. A loss of null is a loss that is not
// finite (JSON has no NaN): it is returned as NaN, as the built-in
// compute returns a diverged batch's, and the shards judge the gradient;
// a missing loss, or NaN written as a bare token (invalid JSON), breaks
// the protocol.
func checkUpdate(m inMsg, iter int64, lo, hi, steps int) (loss float64, samples int64, err error) {
	switch {
	case m.Op != "update":
		return 0, 0, &ProtocolError{Reason: fmt.Sprintf("op %q while an update for iteration %d was due", m.Op, iter)}
	case m.Iter == nil || *m.Iter != iter:
		return 0, 0, &ProtocolError{Reason: fmt.Sprintf("update for iteration %s, want %d", ptrText(m.Iter), iter)}
	case !m.hasLoss:
		return 0, 0, &ProtocolError{Reason: fmt.Sprintf("update %d: no loss", iter)}
	case m.Samples == nil || *m.Samples < 1 || *m.Samples > int64(hi-lo)*int64(steps):
		return 0, 0, &ProtocolError{Reason: fmt.Sprintf("update %d: samples %s outside [1, %d]", iter, ptrText(m.Samples), int64(hi-lo)*int64(steps))}
	}
	if m.Loss == nil {
		return math.NaN(), *m.Samples, nil
	}
	return *m.Loss, *m.Samples, nil
}

// Evaluation is a trainer's answer to evaluate.
type Evaluation struct {
	Accuracy float64
	// Loss is the mean test loss; NaN when the trainer reported it as not
	// finite (null): a diverged model.
	Loss    float64
	Samples int64
}

func checkEvaluated(m inMsg, seq uint64) (Evaluation, error) {
	switch {
	case m.Op != "evaluated":
		return Evaluation{}, &ProtocolError{Reason: fmt.Sprintf("op %q while evaluated %d was due", m.Op, seq)}
	case m.Seq == nil || *m.Seq != seq:
		return Evaluation{}, &ProtocolError{Reason: fmt.Sprintf("evaluated %s, want %d", ptrText(m.Seq), seq)}
	case m.Accuracy == nil || !(*m.Accuracy >= 0 && *m.Accuracy <= 1):
		return Evaluation{}, &ProtocolError{Reason: fmt.Sprintf("evaluated %d: accuracy %s outside [0, 1]", seq, ptrText(m.Accuracy))}
	case m.Samples == nil || *m.Samples < 0:
		return Evaluation{}, &ProtocolError{Reason: fmt.Sprintf("evaluated %d: samples %s", seq, ptrText(m.Samples))}
	case m.Error != "":
		return Evaluation{}, &EvaluationError{Reason: fmt.Sprintf("evaluated %d: the trainer did not evaluate: %.200s", seq, m.Error)}
	}
	e := Evaluation{Accuracy: *m.Accuracy, Loss: math.NaN(), Samples: *m.Samples}
	if m.Loss != nil {
		e.Loss = *m.Loss
	}
	return e, nil
}

// EvaluationError is a trainer's answer that it could not evaluate: not a
// measurement, and not a broken protocol (the attachment goes on).
type EvaluationError struct{ Reason string }

func (e *EvaluationError) Error() string { return "trainer: " + e.Reason }

func ptrText[T int64 | uint64 | float64](p *T) string {
	if p == nil {
		return "missing"
	}
	return fmt.Sprint(*p)
}
