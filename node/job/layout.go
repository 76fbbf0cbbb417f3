package job

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"dsspmesh/cudaops"
)

// ExternalModel is the --model of a job whose model lives in an external
// trainer process (node/trainer): the node holds no model of its own,
// and the parameter layout is the job's [Spec.Layout].
const ExternalModel = "external"

// Layout bounds: a layout travels in the job spec (the control channel's
// msgpack header, at most 64 KiB) and in every snapshot's safetensors
// header, so its text is bounded well below both.
const (
	MaxLayoutTensors = 4096
	MaxLayoutText    = 48 << 10
	MaxLayoutName    = 256
	// MaxLayoutParams bounds the flat vector: 2^31−1 float32 (8 GiB).
	MaxLayoutParams = 1<<31 - 1
)

// FormatLayout is l's text form in a spec: "name:d1xd2,…" in flat-vector
// order ("bias:128", a scalar "temp:"), a tensor whose dtype is not F32
// followed by ":DTYPE" ("bn.num_batches_tracked::I64", "w:4x4:BF16") and
// a tensor's aliases each by "=alias" ("emb.weight:100x32=out.weight").
// Offsets are implied by the order. A layout of float32 tensors without
// aliases (every built-in model's, every layout of earlier builds) reads
// as it always did.
func FormatLayout(l cudaops.Layout) string {
	var b strings.Builder
	for i, r := range l {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(r.Name)
		b.WriteByte(':')
		for j, d := range r.Shape {
			if j > 0 {
				b.WriteByte('x')
			}
			b.WriteString(strconv.Itoa(d))
		}
		if r.DtypeOf() != "F32" {
			b.WriteByte(':')
			b.WriteString(r.Dtype)
		}
		for _, a := range r.Aliases {
			b.WriteByte('=')
			b.WriteString(a)
		}
	}
	return b.String()
}

// ParseLayout reads FormatLayout's text and checks it ([CheckLayout]).
func ParseLayout(s string) (cudaops.Layout, error) {
	if len(s) > MaxLayoutText {
		return nil, fmt.Errorf("layout: %d bytes of text, limit %d", len(s), MaxLayoutText)
	}
	if s == "" {
		return nil, fmt.Errorf("layout: empty")
	}
	parts := strings.Split(s, ",")
	if len(parts) > MaxLayoutTensors {
		return nil, fmt.Errorf("layout: %d tensors, limit %d", len(parts), MaxLayoutTensors)
	}
	l := make(cudaops.Layout, 0, len(parts))
	for i, p := range parts {
		p, aliases, hasAliases := strings.Cut(p, "=")
		name, rest, ok := strings.Cut(p, ":")
		if !ok {
			return nil, fmt.Errorf("layout: tensor %d %q: no ':' before its shape", i, p)
		}
		dims, dtype, _ := strings.Cut(rest, ":")
		shape := []int{}
		if dims != "" {
			for _, d := range strings.Split(dims, "x") {
				v, err := strconv.Atoi(d)
				if err != nil {
					return nil, fmt.Errorf("layout: tensor %d %q: dimension %q: %w", i, name, d, err)
				}
				shape = append(shape, v)
			}
		}
		r := cudaops.Range{Name: name, Shape: shape, Dtype: dtype}
		if hasAliases {
			r.Aliases = strings.Split(aliases, "=")
		}
		l = append(l, r)
	}
	return Place(l)
}

// Place sets the offsets of l's tensors in order (each after the one
// before) and checks the result ([CheckLayout]). l is modified.
func Place(l cudaops.Layout) (cudaops.Layout, error) {
	off := 0
	for i := range l {
		l[i].Offset = off
		if l[i].Dtype == "F32" {
			l[i].Dtype = "" // the default, written as nothing
		}
		n := 1
		for _, d := range l[i].Shape {
			if d <= 0 || d > MaxLayoutParams {
				return nil, fmt.Errorf("layout: tensor %q: dimension %d outside [1, %d]", l[i].Name, d, MaxLayoutParams)
			}
			n *= d
			if n > MaxLayoutParams {
				return nil, fmt.Errorf("layout: tensor %q: shape %v holds more than %d parameters", l[i].Name, l[i].Shape, MaxLayoutParams)
			}
		}
		off += n
		if off > MaxLayoutParams {
			return nil, fmt.Errorf("layout: more than %d parameters by tensor %q", MaxLayoutParams, l[i].Name)
		}
	}
	return l, CheckLayout(l)
}

// CheckLayout checks that l is a layout a job can hold: 1 to
// MaxLayoutTensors tensors, contiguous from offset 0, names and aliases
// non-empty, unique among them all, at most MaxLayoutName bytes of
// printable characters other than ',', ':' and '=' (the text form's
// separators), dtypes among cudaops.DtypeNames, every dimension ≥ 1, and a
// text form within MaxLayoutText.
func CheckLayout(l cudaops.Layout) error {
	if len(l) == 0 || len(l) > MaxLayoutTensors {
		return fmt.Errorf("layout: %d tensors, want 1 to %d", len(l), MaxLayoutTensors)
	}
	seen := make(map[string]bool, len(l))
	name := func(i int, n, what string) error {
		if n == "" || len(n) > MaxLayoutName {
			return fmt.Errorf("layout: tensor %d: %s of %d bytes, want 1 to %d", i, what, len(n), MaxLayoutName)
		}
		for _, c := range n {
			if c <= ' ' || c == ',' || c == ':' || c == '=' || c == 0x7f {
				return fmt.Errorf("layout: tensor %d %q: %s holds %q (no spaces, control characters, ',', ':' or '=')", i, n, what, c)
			}
		}
		if seen[n] {
			return fmt.Errorf("layout: tensor %q named twice", n)
		}
		seen[n] = true
		return nil
	}
	off := 0
	for i, r := range l {
		if err := name(i, r.Name, "name"); err != nil {
			return err
		}
		for _, a := range r.Aliases {
			if err := name(i, a, "alias"); err != nil {
				return err
			}
		}
		if r.Dtype != "" && !slices.Contains(cudaops.DtypeNames, r.Dtype) {
			return fmt.Errorf("layout: tensor %q: dtype %q (known: %s)", r.Name, r.Dtype, strings.Join(cudaops.DtypeNames, ", "))
		}
		if r.Offset != off {
			return fmt.Errorf("layout: tensor %q at offset %d, want %d", r.Name, r.Offset, off)
		}
		for _, d := range r.Shape {
			if d <= 0 {
				return fmt.Errorf("layout: tensor %q: dimension %d in shape %v", r.Name, d, r.Shape)
			}
		}
		off = r.End()
	}
	if n := len(FormatLayout(l)); n > MaxLayoutText {
		return fmt.Errorf("layout: %d bytes of text, limit %d (shorter names or fewer tensors)", n, MaxLayoutText)
	}
	return nil
}

// LayoutMismatchError is a trainer's layout that differs from the job's:
// the first tensor that differs, in the job's order.
type LayoutMismatchError struct {
	Index        int
	Name         string // the job's tensor's name ("" when the job has fewer tensors)
	TrainerName  string // the trainer's ("" when it has fewer)
	Job, Trainer []int  // the shapes (nil where the tensor is missing)
	// Detail says what differs when names and shapes agree: the dtype or
	// the aliases.
	Detail string
}

func (e *LayoutMismatchError) Error() string {
	switch {
	case e.Name == "":
		return fmt.Sprintf("layout mismatch at tensor %d: the job has %d tensors, the trainer has more (%s %v)", e.Index, e.Index, e.TrainerName, e.Trainer)
	case e.TrainerName == "":
		return fmt.Sprintf("layout mismatch at tensor %d: %s %v in the job, missing in the trainer (it has %d tensors)", e.Index, e.Name, e.Job, e.Index)
	case e.Name != e.TrainerName:
		return fmt.Sprintf("layout mismatch at tensor %d: %s %v in the job, %s %v in the trainer", e.Index, e.Name, e.Job, e.TrainerName, e.Trainer)
	case e.Detail != "":
		return fmt.Sprintf("layout mismatch at tensor %d %s: %s", e.Index, e.Name, e.Detail)
	}
	return fmt.Sprintf("layout mismatch at tensor %d %s: shape %v in the job, %v in the trainer", e.Index, e.Name, e.Job, e.Trainer)
}

// Tensor names the tensor that differs: the job's, or the trainer's when
// the job has no tensor at that index.
func (e *LayoutMismatchError) Tensor() string {
	if e.Name != "" {
		return e.Name
	}
	return e.TrainerName
}

// CompareLayout returns nil when trainer is job's layout (same names,
// shapes, dtypes and aliases in the same order), else a
// *LayoutMismatchError naming the first tensor that differs.
func CompareLayout(job, trainer cudaops.Layout) error {
	for i := 0; i < max(len(job), len(trainer)); i++ {
		e := &LayoutMismatchError{Index: i}
		if i < len(job) {
			e.Name, e.Job = job[i].Name, job[i].Shape
		}
		if i < len(trainer) {
			e.TrainerName, e.Trainer = trainer[i].Name, trainer[i].Shape
		}
		if e.Name == "" || e.TrainerName == "" || e.Name != e.TrainerName || !slices.Equal(e.Job, e.Trainer) {
			return e
		}
		if a, b := job[i].DtypeOf(), trainer[i].DtypeOf(); a != b {
			e.Detail = fmt.Sprintf("dtype %s in the job, %s in the trainer", a, b)
			return e
		}
		if !slices.Equal(job[i].Aliases, trainer[i].Aliases) {
			e.Detail = fmt.Sprintf("aliases %v in the job, %v in the trainer", job[i].Aliases, trainer[i].Aliases)
			return e
		}
	}
	return nil
}
