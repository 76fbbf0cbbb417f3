package modelfile

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"github.com/nlpodyssey/safetensors"

	"dsspmesh/cudaops"
)

// Format is the "format" metadata value of files dssp writes.
const Format = "dssp/1"

// MaxFileBytes bounds a model file read into memory (ReadFile, and the
// HTTP download of dssp export): far above any registered model.
const MaxFileBytes = 1 << 31

// MaxHeaderBytes bounds a file's JSON header, read (by [Read]) before
// anything else: the header of the largest registered model with all of
// dssp's metadata is a few KiB.
const MaxHeaderBytes = 16 << 20

// Meta is what a model file says about its parameters.
type Meta struct {
	Model   string // registry name (cudaops.NewModel)
	Dataset string // what it was trained on
	// Source is how the parameters were taken: "export" (a read of every
	// shard), "evaluation" (the read the mesh's evaluator evaluated),
	// "checkpoint" (one of those, saved periodically) or "train" (dssp
	// train).
	Source string
	// Clock is the training clock: for a mesh snapshot the lowest t_min
	// over its shards (every live worker's iterations below it are applied
	// in every slice); for dssp train the optimizer steps taken.
	Clock int64
	// Shards are the per-shard clocks of a mesh snapshot, by shard id.
	Shards []ShardClock
	// Samples is the training samples behind the parameters (for a mesh
	// snapshot the lowest count over the shards).
	Samples int64
	TakenAt time.Time
	Eval    *Eval  // nil when the parameters were not evaluated
	Job     string // the job as JSON (the mesh's job spec, or the train flags)
	// Layers are the tensors' names and shapes in the model's flat order;
	// filled from the layout on write.
	Layers []Layer
}

// ShardClock is one shard's part of a mesh snapshot.
type ShardClock struct {
	Shard   uint32 `json:"shard"`
	Leader  string `json:"leader"` // the replica that answered the read
	Min     int64  `json:"t_min"`  // the slowest worker's clock
	Max     int64  `json:"t_max"`  // the fastest worker's clock
	Index   uint64 `json:"applied_index"`
	Samples int64  `json:"samples"`
}

// Eval is an evaluation of the parameters on a test set.
type Eval struct {
	Accuracy float64
	Loss     float64
	Samples  int // test samples evaluated
}

// Layer is one tensor's name and shape, with its dtype when it is not
// F32 and its other names (cudaops.Range).
type Layer struct {
	Name    string   `json:"name"`
	Shape   []int    `json:"shape"`
	Dtype   string   `json:"dtype,omitempty"`
	Aliases []string `json:"aliases,omitempty"`
}

// Metadata keys.
const (
	keyFormat, keyModel, keyDataset, keySource  = "format", "model", "dataset", "source"
	keyClock, keyShards, keySamples, keyTakenAt = "clock", "shards", "samples", "taken_at"
	keyAccuracy, keyLoss, keyEvalSamples        = "accuracy", "loss", "eval_samples"
	keyJob, keyLayers                           = "job", "layers"
)

func (m Meta) strings() map[string]string {
	out := map[string]string{keyFormat: Format, keyModel: m.Model, keySource: m.Source, keyClock: strconv.FormatInt(m.Clock, 10)}
	put := func(k, v string) {
		if v != "" {
			out[k] = v
		}
	}
	put(keyDataset, m.Dataset)
	put(keyJob, m.Job)
	if m.Samples != 0 {
		out[keySamples] = strconv.FormatInt(m.Samples, 10)
	}
	if !m.TakenAt.IsZero() {
		out[keyTakenAt] = m.TakenAt.UTC().Format(time.RFC3339Nano)
	}
	if e := m.Eval; e != nil {
		out[keyAccuracy] = strconv.FormatFloat(e.Accuracy, 'g', -1, 64)
		out[keyLoss] = strconv.FormatFloat(e.Loss, 'g', -1, 64)
		out[keyEvalSamples] = strconv.Itoa(e.Samples)
	}
	if len(m.Shards) > 0 {
		b, _ := json.Marshal(m.Shards) // plain structs: cannot fail
		out[keyShards] = string(b)
	}
	if len(m.Layers) > 0 {
		b, _ := json.Marshal(m.Layers)
		out[keyLayers] = string(b)
	}
	return out
}

// parseMeta reads the keys dssp writes; a key that is absent leaves its
// field zero, one that is malformed is an error naming it.
func parseMeta(s map[string]string) (Meta, error) {
	m := Meta{Model: s[keyModel], Dataset: s[keyDataset], Source: s[keySource], Job: s[keyJob]}
	bad := func(k string, err error) (Meta, error) {
		return Meta{}, fmt.Errorf("modelfile: metadata %q = %q: %w", k, s[k], err)
	}
	var err error
	if v, ok := s[keyClock]; ok {
		if m.Clock, err = strconv.ParseInt(v, 10, 64); err != nil {
			return bad(keyClock, err)
		}
	}
	if v, ok := s[keySamples]; ok {
		if m.Samples, err = strconv.ParseInt(v, 10, 64); err != nil {
			return bad(keySamples, err)
		}
	}
	if v, ok := s[keyTakenAt]; ok {
		if m.TakenAt, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return bad(keyTakenAt, err)
		}
	}
	if v, ok := s[keyAccuracy]; ok {
		e := &Eval{}
		if e.Accuracy, err = strconv.ParseFloat(v, 64); err != nil {
			return bad(keyAccuracy, err)
		}
		if e.Loss, err = strconv.ParseFloat(s[keyLoss], 64); err != nil {
			return bad(keyLoss, err)
		}
		if e.Samples, err = strconv.Atoi(s[keyEvalSamples]); err != nil {
			return bad(keyEvalSamples, err)
		}
		m.Eval = e
	}
	if v, ok := s[keyShards]; ok {
		if err := json.Unmarshal([]byte(v), &m.Shards); err != nil {
			return bad(keyShards, err)
		}
	}
	if v, ok := s[keyLayers]; ok {
		if err := json.Unmarshal([]byte(v), &m.Layers); err != nil {
			return bad(keyLayers, err)
		}
	}
	return m, nil
}

// Encode writes theta, cut into the tensors of layout, and meta as
// safetensors to w: each tensor in its dtype (straight from theta for F32:
// a 100 MB model is not copied into a buffer first; an export of one held
// three copies of it on the node), and again under each of its aliases,
// so that a model's load_state_dict(strict=True) finds every name.
func Encode(w io.Writer, layout cudaops.Layout, theta []float32, meta Meta) error {
	if len(theta) != layout.Total() {
		return fmt.Errorf("modelfile: %d parameters for a layout of %d", len(theta), layout.Total())
	}
	meta.Layers = nil
	views := make(map[string]typedView, len(layout))
	for _, r := range layout {
		dt, err := dtypeOf(r.Dtype)
		if err != nil {
			return fmt.Errorf("modelfile: tensor %s: %w", r.Name, err)
		}
		shape := make([]uint64, len(r.Shape))
		for i, d := range r.Shape {
			shape[i] = uint64(d)
		}
		v := typedView{dtype: dt, shape: shape, v: theta[r.Offset:r.End()]}
		views[r.Name] = v
		for _, a := range r.Aliases {
			views[a] = v
		}
		meta.Layers = append(meta.Layers, Layer{Name: r.Name, Shape: slices.Clone(r.Shape), Dtype: r.Dtype, Aliases: slices.Clone(r.Aliases)})
	}
	return safetensors.SerializeToWriter(views, meta.strings(), w)
}

// Size is the length of Encode's output (an HTTP Content-Length), found
// by encoding into a counter: the tensors' bytes are counted, not copied.
func Size(layout cudaops.Layout, theta []float32, meta Meta) (int64, error) {
	var c counter
	err := Encode(&c, layout, theta, meta)
	return int64(c), err
}

type counter int64

func (c *counter) Write(p []byte) (int, error) { *c += counter(len(p)); return len(p), nil }

// f32View is a safetensors tensor of float32 values, little-endian.
type f32View struct {
	shape []uint64
	v     []float32
}

func (t f32View) DType() safetensors.DType { return safetensors.F32 }
func (t f32View) Shape() []uint64          { return t.shape }
func (t f32View) DataLen() uint64          { return 4 * uint64(len(t.v)) }

// Data is the values' memory itself where the machine is little-endian,
// else a little-endian copy.
func (t f32View) Data() []byte {
	if len(t.v) == 0 {
		return nil
	}
	if littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(t.v))), 4*len(t.v))
	}
	b := make([]byte, 4*len(t.v))
	for i, x := range t.v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// WriteFile writes the file at path atomically (see the package doc).
func WriteFile(path string, layout cudaops.Layout, theta []float32, meta Meta) error {
	return writeAtomic(path, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		if err := Encode(bw, layout, theta, meta); err != nil {
			return err
		}
		return bw.Flush()
	})
}

// WriteAtomic writes data at path through a synced temporary file in the
// same folder renamed over it, then syncs the folder.
func WriteAtomic(path string, data []byte) error {
	return writeAtomic(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeAtomic is WriteAtomic with the file's bytes written by write.
func writeAtomic(path string, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("modelfile: %w", err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// CreateTemp's 0600 would make a model readable by its writer only.
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("modelfile: %w", err)
	}
	if err := write(tmp); err != nil {
		return fmt.Errorf("modelfile: write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("modelfile: sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("modelfile: close %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("modelfile: %w", err)
	}
	done = true
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// File is a decoded model file.
type File struct {
	Meta Meta
	// Raw is the header's whole __metadata__, keys dssp does not know
	// included.
	Raw map[string]string
	st  safetensors.SafeTensors
}

// TensorInfo describes one tensor of a file.
type TensorInfo struct {
	Name  string
	DType string
	Shape []int
}

// ErrFormat is wrapped by every error about a malformed file.
var ErrFormat = errors.New("not a valid safetensors file")

// Decode parses and validates a whole file held in b; the File refers to b.
func Decode(b []byte) (*File, error) {
	st, err := safetensors.Deserialize(b)
	if err != nil {
		return nil, fmt.Errorf("modelfile: %w: %w", ErrFormat, err)
	}
	_, md, _ := safetensors.ReadMetadata(b) // cannot fail: Deserialize read it
	raw := md.Metadata()
	if raw == nil {
		raw = map[string]string{}
	}
	meta, err := parseMeta(raw)
	if err != nil {
		return nil, err
	}
	return &File{Meta: meta, Raw: raw, st: st}, nil
}

// ReadFile reads and decodes the file at path (see [Read]): a file whose
// header is not a model file's is refused before its body is read.
func ReadFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("modelfile: %w", err)
	}
	defer f.Close()
	_, mf, err := Read(f, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return mf, nil
}

// Read reads one file from r, header first: the 8-byte header length (at
// most MaxHeaderBytes) and the JSON header, which must parse and name the
// data's size; a file larger than limit in all is refused then, before
// its data is read. It then reads exactly the data the header declares
// and one byte more, to refuse a stream longer than its file, and decodes
// the whole. So an endless or hostile stream costs at most the header
// bound, or the declared size within limit. It returns the file's bytes
// and the decoded file, which refers to them.
func Read(r io.Reader, limit int64) ([]byte, *File, error) {
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, nil, fmt.Errorf("modelfile: %w: reading the header length: %w", ErrFormat, err)
	}
	n := binary.LittleEndian.Uint64(head[:])
	if n < 2 || n > MaxHeaderBytes {
		return nil, nil, fmt.Errorf("modelfile: %w: a header of %d bytes (at most %d)", ErrFormat, n, MaxHeaderBytes)
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, nil, fmt.Errorf("modelfile: %w: reading the %d-byte header: %w", ErrFormat, n, err)
	}
	var md safetensors.Metadata
	if err := json.Unmarshal(hdr, &md); err != nil {
		return nil, nil, fmt.Errorf("modelfile: %w: header: %w", ErrFormat, err)
	}
	var data uint64
	for _, t := range md.Tensors() {
		data = max(data, t.DataOffsets[1])
	}
	total := 8 + n + data
	if data > math.MaxInt64/2 || total > uint64(limit) {
		return nil, nil, fmt.Errorf("modelfile: the header declares a file of %d bytes, more than %d", total, limit)
	}
	b := make([]byte, total)
	copy(b, head[:])
	copy(b[8:], hdr)
	if _, err := io.ReadFull(r, b[8+n:]); err != nil {
		return nil, nil, fmt.Errorf("modelfile: %w: the header declares %d bytes of data: %w", ErrFormat, data, err)
	}
	if k, _ := io.ReadFull(r, make([]byte, 1)); k > 0 {
		return nil, nil, fmt.Errorf("modelfile: %w: longer than the %d bytes its header declares", ErrFormat, total)
	}
	f, err := Decode(b)
	if err != nil {
		return nil, nil, err
	}
	return b, f, nil
}

// Tensors lists the file's tensors in buffer order.
func (f *File) Tensors() []TensorInfo {
	var out []TensorInfo
	for _, t := range f.st.Tensors() {
		info := TensorInfo{Name: t.Name, DType: t.TensorView.DType().String()}
		for _, d := range t.TensorView.Shape() {
			info.Shape = append(info.Shape, int(d))
		}
		out = append(out, info)
	}
	return out
}

// Params returns the flat parameter vector for layout, checking that the
// file holds exactly layout's tensors (and their aliases, each equal to
// its tensor), each with the layout's shape, widened to float32 from the
// file's dtype (any of cudaops.DtypeNames: a file another program wrote
// may hold a tensor in another dtype than the layout names); an error
// names the first tensor that differs.
func (f *File) Params(layout cudaops.Layout) ([]float32, error) {
	theta := make([]float32, layout.Total())
	names := 0
	for _, r := range layout {
		t, ok := f.st.Tensor(r.Name)
		if !ok {
			return nil, fmt.Errorf("modelfile: tensor %s %v missing from the file", r.Name, r.Shape)
		}
		if err := readTensor(theta[r.Offset:r.End()], r, r.Name, t); err != nil {
			return nil, err
		}
		names++
		for _, a := range r.Aliases {
			t, ok := f.st.Tensor(a)
			if !ok {
				continue // an alias may be left out: the tensor is there
			}
			alias := make([]float32, r.Size())
			if err := readTensor(alias, r, a, t); err != nil {
				return nil, err
			}
			if !slices.Equal(alias, theta[r.Offset:r.End()]) {
				return nil, fmt.Errorf("modelfile: tensor %s is an alias of %s in the model but holds other values in the file", a, r.Name)
			}
			names++
		}
	}
	if f.st.Len() != names {
		for _, name := range f.st.Names() {
			if !slices.ContainsFunc(layout, func(r cudaops.Range) bool { return r.Name == name || slices.Contains(r.Aliases, name) }) {
				return nil, fmt.Errorf("modelfile: tensor %s in the file is not in the model", name)
			}
		}
	}
	return theta, nil
}

// readTensor widens t, the file's tensor name of r, into dst.
func readTensor(dst []float32, r cudaops.Range, name string, t safetensors.TensorView) error {
	if _, err := dtypeOf(t.DType().String()); err != nil {
		return fmt.Errorf("modelfile: tensor %s: %w", name, err)
	}
	shape := make([]int, len(t.Shape()))
	for i, d := range t.Shape() {
		shape[i] = int(d)
	}
	if !slices.Equal(shape, r.Shape) {
		return fmt.Errorf("modelfile: tensor %s has shape %v, the model's is %v", name, shape, r.Shape)
	}
	decodeTo(dst, t.DType(), t.Data())
	return nil
}

// LoadParams reads the file at path and returns its parameters for model,
// refusing a file that names another model or whose tensors differ from
// model's layout (the error names the tensor).
func LoadParams(path string, model *cudaops.Model) ([]float32, *File, error) {
	f, err := ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	if f.Meta.Model != "" && f.Meta.Model != model.Name() {
		return nil, nil, fmt.Errorf("%s holds model %s, not %s", path, f.Meta.Model, model.Name())
	}
	theta, err := f.Params(model.Layout())
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return theta, f, nil
}

// Finite reports whether every value of theta is finite.
func Finite(theta []float32) bool {
	for _, v := range theta {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return false
		}
	}
	return true
}

// CheckFinite names the first tensor of layout whose parameters in theta
// hold a NaN or an infinity; nil when every value is finite.
func CheckFinite(layout cudaops.Layout, theta []float32) error {
	if Finite(theta) {
		return nil
	}
	for _, r := range layout {
		for i, v := range theta[r.Offset : r.Offset+r.Size()] {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("tensor %s holds %v at index %d; every parameter must be finite", r.Name, v, i)
			}
		}
	}
	return errors.New("a parameter is not finite")
}
