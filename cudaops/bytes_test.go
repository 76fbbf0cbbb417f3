package cudaops

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// floatsOf is the dataset as the loaders built it before they kept bytes:
// every value converted once, float32(b) / 255.
func floatsOf(t *testing.T, b []byte, y []int, shape []int) *Memory {
	t.Helper()
	x := make([]float32, len(b))
	for i, v := range b {
		x[i] = float32(v) / 255
	}
	m, err := NewMemory(x, y, shape, 10)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestBytesReadAsTheFloatsTheyReplace: every byte value reads as exactly
// the float32 the loaders stored before (bit for bit), and a byte set
// trains to bit-identical parameters and evaluations with the same seed.
func TestBytesReadAsTheFloatsTheyReplace(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	one, err := NewBytes(all, []int{3}, []int{256}, 10)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 256)
	if l := one.Sample(0, got); l != 3 {
		t.Fatalf("label %d, want 3", l)
	}
	for i, v := range got {
		if want := float32(byte(i)) / 255; math.Float32bits(v) != math.Float32bits(want) {
			t.Fatalf("byte %d reads as %v (%#x), want %v (%#x)", i, v, math.Float32bits(v), want, math.Float32bits(want))
		}
	}

	// An MNIST-shaped set of random pixels whose labels follow a pixel, so
	// training moves the parameters.
	const n = 600
	rng := rand.New(rand.NewPCG(7, 7))
	pix := make([]byte, n*784)
	y := make([]int, n)
	for i := range y {
		for j := range 784 {
			pix[i*784+j] = byte(rng.IntN(256))
		}
		y[i] = int(pix[i*784+400]) % 10
	}
	shape := []int{1, 28, 28}
	bs, err := NewBytes(pix, y, shape, 10)
	if err != nil {
		t.Fatal(err)
	}
	fs := floatsOf(t, pix, y, shape)
	if bs.Bytes()*3 > fs.Bytes() {
		t.Fatalf("byte set takes %d bytes, float set %d", bs.Bytes(), fs.Bytes())
	}
	tc := DefaultTrainConfig()
	tc.Epochs, tc.BatchSize, tc.Seed = 2, 32, 11
	train := func(ds Dataset) TrainResult {
		m, _ := NewModel("mlp", ModelOptions{Workers: 2})
		res, err := Train(context.Background(), m, ds, ds, tc, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b := train(bs), train(fs)
	if !slices.EqualFunc(a.Params, b.Params, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) }) {
		t.Fatal("training on bytes gives other parameters than training on the floats they replace")
	}
	if a.Test != b.Test {
		t.Fatalf("evaluation on bytes %+v, on floats %+v", a.Test, b.Test)
	}
}

// TestMNISTFromIDXKeepsTheFileBytes: the dataset is the images' bytes, not
// a copy, and reads as the floats of before.
func TestMNISTFromIDXKeepsTheFileBytes(t *testing.T) {
	pix := make([]byte, 3*784)
	for i := range pix {
		pix[i] = byte(i * 7)
	}
	m, err := MNISTFromIDX(&IDX{Dims: []int{3, 28, 28}, Data: pix}, &IDX{Dims: []int{3}, Data: []byte{1, 2, 9}}, "i", "l")
	if err != nil {
		t.Fatal(err)
	}
	if &m.b[0] != &pix[0] {
		t.Fatal("MNISTFromIDX copied the images")
	}
	ref := floatsOf(t, pix, []int{1, 2, 9}, []int{1, 28, 28})
	a, b := make([]float32, 784), make([]float32, 784)
	for i := range 3 {
		if m.Sample(i, a) != ref.Sample(i, b) || !slices.Equal(a, b) {
			t.Fatalf("sample %d differs from the float conversion", i)
		}
	}
}

// TestSyntheticOnItsGrid: a synthetic value is the class mean plus noise
// rounded to the nearest multiple of synthStep, and reads back as that.
func TestSyntheticOnItsGrid(t *testing.T) {
	for _, x := range []float64{0, 1.0 / 32 * 0.99, -3.3, 7.96, 9, -8.2, -100} {
		got := float64(synthScale[synthByte(x)])
		want := math.Max(-8, math.Min(127.0/16, math.Round(x*16)/16))
		if got != want {
			t.Errorf("%g reads back as %g, want %g", x, got, want)
		}
	}
	ds, err := NewSynthetic(DefaultSyntheticConfig())
	if err != nil {
		t.Fatal(err)
	}
	if ds.Bytes() != 512*784+512 {
		t.Fatalf("512 samples take %d bytes, want one a value and one a label", ds.Bytes())
	}
}

// TestSyntheticSplitIsTheSeparateDraws: the synthetic training set is what
// a draw of 10000 samples gives, and the test set the 2000 after them.
func TestSyntheticSplitIsTheSeparateDraws(t *testing.T) {
	train, test, err := LoadDataset("synthetic-mnist", "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultSyntheticConfig()
	cfg.Samples = 10000
	want, err := NewSynthetic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 10000 || test.Len() != 2000 {
		t.Fatalf("sizes %d/%d", train.Len(), test.Len())
	}
	if train.b == nil || !slices.Equal(train.b, want.b) || !slices.Equal(train.y, want.y) {
		t.Fatal("training set differs from a draw of 10000 (or is not held as bytes)")
	}
	if len(test.b) != 2000*784 || &test.b[0] != &train.b[:cap(train.b)][10000*784] {
		t.Fatal("test set is not the 2000 draws after the training set")
	}
}
