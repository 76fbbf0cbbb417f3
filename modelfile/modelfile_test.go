package modelfile_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile"
	"dsspmesh/modelfile/modelfiletest"

	"github.com/x448/float16"
)

func mlp(t testing.TB) *cudaops.Model {
	t.Helper()
	m, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func randomTheta(n int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	theta := make([]float32, n)
	for i := range theta {
		theta[i] = float32(rng.NormFloat64())
	}
	return theta
}

func sampleMeta() modelfile.Meta {
	return modelfile.Meta{
		Model: "mlp", Dataset: "mnist", Source: "export", Clock: 1234, Samples: 78976,
		TakenAt: time.Date(2026, 12, 3, 7, 50, 0, 123456789, time.UTC),
		Shards: []modelfile.ShardClock{
			{Shard: 0, Leader: "n-a", Min: 1234, Max: 1240, Index: 99, Samples: 78976},
			{Shard: 1, Leader: "n-b", Min: 1235, Max: 1241, Index: 101, Samples: 79040},
		},
		Eval: &modelfile.Eval{Accuracy: 0.9123, Loss: 0.31, Samples: 10000},
		Job:  `{"model":"mlp"}`,
	}
}

func TestRoundTrip(t *testing.T) {
	m := mlp(t)
	theta := randomTheta(m.NumParams(), 1)
	path := filepath.Join(t.TempDir(), "model.safetensors")
	meta := sampleMeta()
	if err := modelfile.WriteFile(path, m.Layout(), theta, meta); err != nil {
		t.Fatal(err)
	}
	f, err := modelfile.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.Params(m.Layout())
	if err != nil {
		t.Fatal(err)
	}
	for i := range theta {
		if math.Float32bits(got[i]) != math.Float32bits(theta[i]) {
			t.Fatalf("parameter %d: %v, want %v", i, got[i], theta[i])
		}
	}
	g := f.Meta
	if g.Model != "mlp" || g.Dataset != "mnist" || g.Source != "export" || g.Clock != 1234 || g.Samples != 78976 ||
		!g.TakenAt.Equal(meta.TakenAt) || g.Job != meta.Job || g.Eval == nil || *g.Eval != *meta.Eval ||
		len(g.Shards) != 2 || g.Shards[1] != meta.Shards[1] {
		t.Fatalf("metadata read back as %+v, want %+v", g, meta)
	}
	if len(g.Layers) != len(m.Layout()) || g.Layers[0].Name != "fc1.weight" || g.Layers[0].Shape[0] != 256 || g.Layers[0].Shape[1] != 784 {
		t.Fatalf("layers %+v", g.Layers)
	}
	if f.Raw["format"] != modelfile.Format {
		t.Fatalf("format %q", f.Raw["format"])
	}
	names := map[string][]int{}
	for _, ti := range f.Tensors() {
		if ti.DType != "F32" {
			t.Fatalf("%s is %s", ti.Name, ti.DType)
		}
		names[ti.Name] = ti.Shape
	}
	want := map[string][]int{"fc1.weight": {256, 784}, "fc1.bias": {256}, "fc2.weight": {128, 256}, "fc2.bias": {128}, "fc3.weight": {10, 128}, "fc3.bias": {10}}
	for n, s := range want {
		if got := names[n]; len(got) != len(s) || got[0] != s[0] || (len(s) > 1 && got[1] != s[1]) {
			t.Fatalf("tensor %s shape %v, want %v", n, got, s)
		}
	}
	if len(names) != len(want) {
		t.Fatalf("tensors %v", names)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".tmp-*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// TestNumpyReadsFile: a file written here is read by an independent
// reader (Python with numpy only) with the same names, dtypes, shapes,
// bytes and metadata.
func TestNumpyReadsFile(t *testing.T) {
	m := mlp(t)
	theta := randomTheta(m.NumParams(), 2)
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := modelfile.WriteFile(path, m.Layout(), theta, sampleMeta()); err != nil {
		t.Fatal(err)
	}
	modelfiletest.CheckWithNumpy(t, path, m.Layout(), theta, map[string]string{
		"format": modelfile.Format, "model": "mlp", "dataset": "mnist", "clock": "1234", "accuracy": "0.9123"})
}

func TestParamsRefusesAnotherModel(t *testing.T) {
	m := mlp(t)
	lenet, err := cudaops.NewModel("lenet", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := modelfile.Encode(&buf, lenet.Layout(), make([]float32, lenet.NumParams()), modelfile.Meta{}); err != nil {
		t.Fatal(err)
	}
	f, err := modelfile.Decode(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Params(m.Layout()); err == nil || !strings.Contains(err.Error(), "fc1.weight") {
		t.Fatalf("lenet file read as mlp: %v, want an error naming fc1.weight", err)
	}

	// Same names, one shape different: the error names that tensor.
	layout := m.Layout()
	bad := make(cudaops.Layout, len(layout))
	copy(bad, layout)
	bad[4] = cudaops.Range{Name: "fc3.weight", Offset: layout[4].Offset, Shape: []int{128, 10}}
	buf.Reset()
	if err := modelfile.Encode(&buf, bad, make([]float32, m.NumParams()), modelfile.Meta{}); err != nil {
		t.Fatal(err)
	}
	f, _ = modelfile.Decode(buf.Bytes())
	if _, err := f.Params(layout); err == nil || !strings.Contains(err.Error(), "fc3.weight has shape [128 10]") {
		t.Fatalf("transposed fc3.weight: %v", err)
	}

	// An extra tensor is named too.
	extra := append(m.Layout(), cudaops.Range{Name: "head.bias", Offset: m.NumParams(), Shape: []int{3}})
	buf.Reset()
	if err := modelfile.Encode(&buf, extra, make([]float32, m.NumParams()+3), modelfile.Meta{}); err != nil {
		t.Fatal(err)
	}
	f, _ = modelfile.Decode(buf.Bytes())
	if _, err := f.Params(layout); err == nil || !strings.Contains(err.Error(), "head.bias") {
		t.Fatalf("extra tensor: %v", err)
	}
}

func TestLoadParamsRefusesModelName(t *testing.T) {
	m := mlp(t)
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := modelfile.WriteFile(path, m.Layout(), make([]float32, m.NumParams()), modelfile.Meta{Model: "lenet"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := modelfile.LoadParams(path, m); err == nil || !strings.Contains(err.Error(), "holds model lenet, not mlp") {
		t.Fatalf("got %v", err)
	}
}

func TestDecodeRefusesBadFiles(t *testing.T) {
	m := mlp(t)
	var buf bytes.Buffer
	if err := modelfile.Encode(&buf, m.Layout(), make([]float32, m.NumParams()), sampleMeta()); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	hugeHeader := binary.LittleEndian.AppendUint64(nil, math.MaxUint64)
	for name, b := range map[string][]byte{
		"empty":        nil,
		"truncated":    good[:len(good)-1],
		"trailing":     append(append([]byte{}, good...), 0),
		"header only":  good[:40],
		"huge header":  append(hugeHeader, '{', '}'),
		"not json":     append(binary.LittleEndian.AppendUint64(nil, 2), 'x', 'y'),
		"offsets past": []byte("\x40\x00\x00\x00\x00\x00\x00\x00" + `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}         `),
	} {
		if _, err := modelfile.Decode(b); !errors.Is(err, modelfile.ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", name, err)
		}
	}
	// Malformed dssp metadata is named.
	var bad bytes.Buffer
	meta := sampleMeta()
	meta.Eval = nil
	if err := modelfile.Encode(&bad, m.Layout(), make([]float32, m.NumParams()), meta); err != nil {
		t.Fatal(err)
	}
	b := bytes.Replace(bad.Bytes(), []byte(`"clock":"1234"`), []byte(`"clock":"12x4"`), 1)
	if _, err := modelfile.Decode(b); err == nil || !strings.Contains(err.Error(), `"clock"`) {
		t.Fatalf("bad clock: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	m, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		f.Fatal(err)
	}
	small := cudaops.Layout{{Name: "w", Shape: []int{2, 3}}, {Name: "b", Offset: 6, Shape: []int{2}}}
	var buf bytes.Buffer
	modelfile.Encode(&buf, small, make([]float32, 8), sampleMeta())
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := modelfile.Decode(b)
		if err != nil {
			return
		}
		file.Tensors()
		file.Params(small)
		file.Params(m.Layout())
	})
}

func TestCheckpointsKeepNewestAndRefuseNaN(t *testing.T) {
	m := mlp(t)
	dir := filepath.Join(t.TempDir(), "ckpt")
	c, err := modelfile.OpenCheckpoints(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Latest(); ok {
		t.Fatal("a fresh folder has a latest checkpoint")
	}
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	var paths []string
	for i := range 4 {
		meta := sampleMeta()
		meta.Clock, meta.TakenAt = int64(100*i), t0.Add(time.Duration(i)*time.Second)
		p, err := c.Save(m.Layout(), randomTheta(m.NumParams(), uint64(i)), meta)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	list, err := c.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0] != paths[2] || list[1] != paths[3] {
		t.Fatalf("kept %v, want the newest two of %v", list, paths)
	}
	if latest, _ := c.Latest(); latest != paths[3] {
		t.Fatalf("latest %s, want %s", latest, paths[3])
	}

	nan := randomTheta(m.NumParams(), 9)
	nan[17] = float32(math.NaN())
	meta := sampleMeta()
	meta.TakenAt = t0.Add(time.Minute)
	if _, err := c.Save(m.Layout(), nan, meta); !errors.Is(err, modelfile.ErrNotFinite) {
		t.Fatalf("NaN parameters: %v, want ErrNotFinite", err)
	}
	meta.Eval = &modelfile.Eval{Accuracy: 0.1, Loss: math.Inf(1), Samples: 10}
	if _, err := c.Save(m.Layout(), randomTheta(m.NumParams(), 3), meta); !errors.Is(err, modelfile.ErrNotFinite) {
		t.Fatalf("infinite loss: %v, want ErrNotFinite", err)
	}
	if after, _ := c.List(); len(after) != 2 || after[1] != paths[3] {
		t.Fatalf("a refused checkpoint changed the folder: %v", after)
	}

	// Reopened (a restarted node), the folder's newest is the latest and a
	// temporary file left by a crash is removed.
	os.WriteFile(filepath.Join(dir, ".tmp-ckpt-x.safetensors-123"), []byte("half"), 0o644)
	c2, err := modelfile.OpenCheckpoints(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	if latest, _ := c2.Latest(); latest != paths[3] {
		t.Fatalf("reopened latest %s, want %s", latest, paths[3])
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".tmp-*")); len(left) != 0 {
		t.Fatalf("stale temporary files kept: %v", left)
	}
	if _, err := modelfile.OpenCheckpoints(dir, 0); err == nil {
		t.Fatal("keep 0 accepted")
	}
}

// TestSizeIsEncodedLength: Size, which counts instead of encoding, gives
// the length of Encode's output.
func TestSizeIsEncodedLength(t *testing.T) {
	m, err := cudaops.NewModel("mlp", cudaops.ModelOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	theta := m.Init(1)
	meta := modelfile.Meta{Model: "mlp", Clock: 7}
	var buf bytes.Buffer
	if err := modelfile.Encode(&buf, m.Layout(), theta, meta); err != nil {
		t.Fatal(err)
	}
	size, err := modelfile.Size(m.Layout(), theta, meta)
	if err != nil || size != int64(buf.Len()) {
		t.Fatalf("Size %d (%v), encoded %d bytes", size, err, buf.Len())
	}
}

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	return k, err
}

// endless repeats b forever.
type endless struct{ b []byte }

func (e endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = e.b[i%len(e.b)]
	}
	return len(p), nil
}

// TestReadChecksTheHeaderBeforeTheBody: an endless stream of zeros (what
// `dssp eval --model /dev/zero` reads) is refused after its 8-byte header
// length; a header that declares more than the limit after the header; a
// good file followed by more bytes after one byte more; a good file is
// read whole.
func TestReadChecksTheHeaderBeforeTheBody(t *testing.T) {
	m := mlp(t)
	var buf bytes.Buffer
	if err := modelfile.Encode(&buf, m.Layout(), make([]float32, m.NumParams()), sampleMeta()); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	hdrLen := 8 + int64(binary.LittleEndian.Uint64(good))
	bigHeader := []byte(`{"w":{"dtype":"F32","shape":[1073741824],"data_offsets":[0,4294967296]}}`)
	big := append(binary.LittleEndian.AppendUint64(nil, uint64(len(bigHeader))), bigHeader...)
	for _, c := range []struct {
		name    string
		r       io.Reader
		limit   int64
		want    string
		maxRead int64
	}{
		{"zeros", endless{[]byte{0}}, modelfile.MaxFileBytes, "a header of 0 bytes", 8},
		{"ones", endless{[]byte{0xff}}, modelfile.MaxFileBytes, "a header of", 8},
		{"declares 4 GiB", io.MultiReader(bytes.NewReader(big), endless{[]byte{0}}), modelfile.MaxFileBytes, "declares a file of", int64(len(big))},
		{"over the limit", io.MultiReader(bytes.NewReader(good), endless{[]byte{0}}), int64(len(good)) - 1, "more than", hdrLen},
		{"longer than declared", io.MultiReader(bytes.NewReader(good), endless{[]byte{0}}), modelfile.MaxFileBytes, "longer than", int64(len(good)) + 1},
		{"short", bytes.NewReader(good[:len(good)-3]), modelfile.MaxFileBytes, "declares", int64(len(good)) - 3},
	} {
		cr := &countingReader{r: c.r}
		_, _, err := modelfile.Read(cr, c.limit)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
		if cr.n > c.maxRead {
			t.Errorf("%s: read %d bytes, want at most %d", c.name, cr.n, c.maxRead)
		}
	}
	b, f, err := modelfile.Read(bytes.NewReader(good), int64(len(good)))
	if err != nil || !bytes.Equal(b, good) || f.Meta.Clock != 1234 {
		t.Fatalf("Read(good) = %d bytes, %v", len(b), err)
	}
}

// ReadFile of /dev/zero is refused at once, not after 2 GiB.
func TestReadFileRefusesDevZero(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	_, err := modelfile.ReadFile("/dev/zero")
	if err == nil || !strings.Contains(err.Error(), "/dev/zero") || !errors.Is(err, modelfile.ErrFormat) {
		t.Fatalf("ReadFile(/dev/zero) = %v, want ErrFormat naming the file", err)
	}
}

// TestDtypesAndAliases: a layout of a trainer's model state is written in
// each tensor's dtype (BF16 rounded to nearest even, an integer counter
// rounded, a bool) and a tied tensor under each of its names; reading it
// back widens it exactly, and an alias that disagrees with its tensor is
// refused (PyTorch's strict load of such files: test/models_test.go).
func TestDtypesAndAliases(t *testing.T) {
	layout := cudaops.Layout{
		{Name: "emb.weight", Offset: 0, Shape: []int{2, 2}, Aliases: []string{"out.weight"}},
		{Name: "w", Offset: 4, Shape: []int{3}, Dtype: "BF16"},
		{Name: "h", Offset: 7, Shape: []int{2}, Dtype: "F16"},
		{Name: "bn.num_batches_tracked", Offset: 9, Shape: []int{}, Dtype: "I64"},
		{Name: "mask", Offset: 10, Shape: []int{2}, Dtype: "BOOL"},
	}
	theta := []float32{1, 2, 3, 4, 1.0078125, -2.5, 1 + 1.0/256, 0.1, 65504, 12.9999, 0, 1}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := modelfile.WriteFile(path, layout, theta, modelfile.Meta{Model: "external", Source: "export"}); err != nil {
		t.Fatal(err)
	}
	f, err := modelfile.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dtypes := map[string]string{}
	for _, ti := range f.Tensors() {
		dtypes[ti.Name] = ti.DType
	}
	if want := map[string]string{"emb.weight": "F32", "out.weight": "F32", "w": "BF16", "h": "F16", "bn.num_batches_tracked": "I64", "mask": "BOOL"}; !maps.Equal(dtypes, want) {
		t.Fatalf("tensors %v, want %v", dtypes, want)
	}
	got, err := f.Params(layout)
	if err != nil {
		t.Fatal(err)
	}
	// 1+1/256 is a tie between two bf16 values and goes to the even one (1);
	// 1.0078125 is a bf16 value; the counter is rounded; the bool is 0/1.
	want := []float32{1, 2, 3, 4, 1.0078125, -2.5, 1, float32(float16.Fromfloat32(0.1).Float32()), 65504, 13, 0, 1}
	if !slices.Equal(got, want) {
		t.Fatalf("read back %v, want %v", got, want)
	}
	if len(f.Meta.Layers) != 5 || f.Meta.Layers[0].Aliases[0] != "out.weight" || f.Meta.Layers[1].Dtype != "BF16" {
		t.Fatalf("layers %+v", f.Meta.Layers)
	}
	// An alias holding other values than its tensor is refused.
	other := slices.Clone(layout)
	other[0].Aliases = nil
	other = append(other, cudaops.Range{Name: "out.weight", Offset: 12, Shape: []int{2, 2}})
	bad := append(slices.Clone(theta), 9, 9, 9, 9)
	badPath := filepath.Join(t.TempDir(), "bad.safetensors")
	if err := modelfile.WriteFile(badPath, other, bad, modelfile.Meta{Model: "external"}); err != nil {
		t.Fatal(err)
	}
	bf, err := modelfile.ReadFile(badPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bf.Params(layout); err == nil || !strings.Contains(err.Error(), "out.weight is an alias of emb.weight") {
		t.Fatalf("a disagreeing alias: %v", err)
	}
}
