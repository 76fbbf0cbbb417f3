package cudaops

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// idxBytes encodes an unsigned-byte IDX file.
func idxBytes(dims []int, data []byte) []byte {
	var b bytes.Buffer
	b.Write([]byte{0, 0, 0x08, byte(len(dims))})
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, uint32(d))
	}
	b.Write(data)
	return b.Bytes()
}

func gz(b []byte) []byte {
	var out bytes.Buffer
	w := gzip.NewWriter(&out)
	w.Write(b)
	w.Close()
	return out.Bytes()
}

func TestReadIDX(t *testing.T) {
	good := idxBytes([]int{2, 3}, []byte{1, 2, 3, 4, 5, 6})
	idx, err := ReadIDX(bytes.NewReader(good))
	if err != nil || !slices.Equal(idx.Dims, []int{2, 3}) || !slices.Equal(idx.Data, []byte{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("ReadIDX = %+v, %v", idx, err)
	}
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", "truncated"},
		{"wrong magic", "\x01\x00\x08\x01\x00\x00\x00\x01x", "wrong magic"},
		{"float type", "\x00\x00\x0d\x01\x00\x00\x00\x01x", "element type"},
		{"no dims", "\x00\x00\x08\x00", "0 dimensions"},
		{"short dims", "\x00\x00\x08\x02\x00\x00\x00\x01", "truncated"},
		{"zero dim", "\x00\x00\x08\x01\x00\x00\x00\x00", "zero"},
		{"huge", "\x00\x00\x08\x02\xff\xff\xff\xff\xff\xff\xff\xff", "exceed"},
		{"truncated data", string(good[:len(good)-1]), "truncated: 5 of 6 bytes"},
		{"trailing", string(good) + "x", "trailing"},
	} {
		_, err := ReadIDX(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
}

// FuzzReadIDX: no input panics or makes the parser return data that
// disagrees with its dimensions.
func FuzzReadIDX(f *testing.F) {
	f.Add(idxBytes([]int{2, 3}, []byte{1, 2, 3, 4, 5, 6}))
	f.Add(idxBytes([]int{1, 28, 28}, make([]byte, 784)))
	f.Add(idxBytes([]int{4}, []byte{0, 1, 2, 9}))
	f.Add([]byte("\x00\x00\x08\x02\xff\xff\xff\xff\xff\xff\xff\xff"))
	f.Add(gz(idxBytes([]int{3}, []byte{1, 2, 3})))
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := maybeGunzip(bytes.NewReader(in))
		if err != nil {
			return
		}
		idx, err := ReadIDX(r)
		if err != nil {
			return
		}
		if len(idx.Data) != prod(idx.Dims) {
			t.Fatalf("dims %v but %d bytes", idx.Dims, len(idx.Data))
		}
	})
}

func writeMNIST(t *testing.T, dir string, trainImages, trainLabels []byte) {
	t.Helper()
	testImages := idxBytes([]int{1, 28, 28}, make([]byte, 784))
	testLabels := idxBytes([]int{1}, []byte{3})
	for name, b := range map[string][]byte{
		mnistTrainImages + ".gz": gz(trainImages),
		mnistTrainLabels:         trainLabels,
		mnistTestImages:          testImages,
		mnistTestLabels + ".gz":  gz(testLabels),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadMNISTSmallAndCorrupt(t *testing.T) {
	pix := make([]byte, 2*784)
	pix[0], pix[784] = 255, 51
	goodImages := idxBytes([]int{2, 28, 28}, pix)
	goodLabels := idxBytes([]int{2}, []byte{7, 1})

	dir := t.TempDir()
	writeMNIST(t, dir, goodImages, goodLabels)
	train, test, err := LoadMNIST(dir)
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 784)
	if train.Len() != 2 || test.Len() != 1 || train.Sample(1, x) != 1 || x[0] != 0.2 {
		t.Fatalf("train %d test %d x0 %v", train.Len(), test.Len(), x[0])
	}

	for _, tc := range []struct {
		name           string
		images, labels []byte
		file, want     string
	}{
		{"wrong magic", append([]byte{9}, goodImages[1:]...), goodLabels, mnistTrainImages, "wrong magic"},
		{"truncated images", goodImages[:len(goodImages)-10], goodLabels, mnistTrainImages, "truncated"},
		{"label count", goodImages, idxBytes([]int{3}, []byte{1, 2, 3}), mnistTrainLabels, "3 labels for 2 images"},
		{"bad label", goodImages, idxBytes([]int{2}, []byte{1, 12}), mnistTrainLabels, "label 12"},
		{"image dims", idxBytes([]int{2, 784}, pix), goodLabels, mnistTrainImages, "want [n 28 28]"},
	} {
		dir := t.TempDir()
		writeMNIST(t, dir, tc.images, tc.labels)
		_, _, err := LoadMNIST(dir)
		var fe *FormatError
		if !errors.As(err, &fe) || !strings.Contains(fe.File, tc.file) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want a FormatError on %s mentioning %q", tc.name, err, tc.file, tc.want)
		}
	}

	// A gzip file cut in the middle of its stream.
	dir = t.TempDir()
	writeMNIST(t, dir, goodImages, goodLabels)
	z := gz(goodImages)
	os.WriteFile(filepath.Join(dir, mnistTrainImages+".gz"), z[:len(z)/2], 0o644)
	if _, _, err := LoadMNIST(dir); err == nil || !strings.Contains(err.Error(), mnistTrainImages) {
		t.Errorf("cut gzip: err = %v", err)
	}

	if _, _, err := LoadMNIST(t.TempDir()); !IsNotFound(err) {
		t.Errorf("empty dir: err = %v, want not found", err)
	}
}

func TestReadCIFAR10(t *testing.T) {
	rec := make([]byte, cifarRecord)
	rec[0], rec[1], rec[cifarRecord-1] = 4, 255, 51
	two := append(slices.Clone(rec), rec...)
	m, err := ReadCIFAR10(bytes.NewReader(two), "batch")
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float32, cifarPixels)
	if m.Len() != 2 || m.Sample(1, x) != 4 || x[0] != 1 || x[cifarPixels-1] != 0.2 || !slices.Equal(m.Shape(), []int{3, 32, 32}) {
		t.Fatalf("decoded %d samples, x0 %v", m.Len(), x[0])
	}
	bad := slices.Clone(rec)
	bad[0] = 10
	for name, tc := range map[string]struct {
		in   []byte
		want string
	}{
		"truncated": {two[:len(two)-1], "truncated"},
		"label":     {bad, "label 10"},
		"empty":     {nil, "empty"},
	} {
		_, err := ReadCIFAR10(bytes.NewReader(tc.in), "data_batch_1.bin")
		var fe *FormatError
		if !errors.As(err, &fe) || fe.File != "data_batch_1.bin" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func TestPartitionAndLoader(t *testing.T) {
	const n, workers = 103, 4
	seen := map[int]int{}
	for w := range workers {
		p := Partition(n, w, workers, 9)
		if len(p) < n/workers || len(p) > n/workers+1 {
			t.Fatalf("worker %d gets %d", w, len(p))
		}
		if !slices.Equal(p, Partition(n, w, workers, 9)) {
			t.Fatal("partition not deterministic")
		}
		for _, i := range p {
			seen[i]++
		}
	}
	if len(seen) != n {
		t.Fatalf("partitions cover %d of %d", len(seen), n)
	}
	for i, c := range seen {
		if c != 1 {
			t.Fatalf("sample %d in %d partitions", i, c)
		}
	}

	ds, err := NewSynthetic(SyntheticConfig{Samples: n, Shape: []int{2}, Classes: 3, Noise: 0.1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := LoaderConfig{Worker: 1, Workers: workers, BatchSize: 5, Seed: 9}
	run := func() [][]int {
		l, err := NewLoader(ds, cfg)
		if err != nil {
			t.Fatal(err)
		}
		x, y := make([]float32, 10), make([]int, 5)
		var out [][]int
		for range 2 * l.BatchesPerEpoch() {
			l.Next(x, y)
			out = append(out, slices.Clone(y))
		}
		if l.Epoch() != 1 {
			t.Fatalf("epoch %d after two passes' worth minus one batch", l.Epoch())
		}
		return out
	}
	a, b := run(), run()
	for i := range a {
		if !slices.Equal(a[i], b[i]) {
			t.Fatal("loader order not deterministic")
		}
	}
	if err := (LoaderConfig{Worker: 4, Workers: 4, BatchSize: 1}).Validate(); err == nil || !strings.Contains(err.Error(), "Worker 4") {
		t.Fatalf("Validate = %v", err)
	}
}

func TestTrainSynthetic(t *testing.T) {
	cfg := DefaultSyntheticConfig()
	cfg.Samples = 1024
	ds, err := NewSynthetic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	test, _ := NewSynthetic(SyntheticConfig{Samples: 256, Shape: cfg.Shape, Classes: 10, Noise: 1, Seed: cfg.Seed})
	m, _ := NewModel("mlp", ModelOptions{})
	tc := DefaultTrainConfig()
	tc.Epochs = 2
	res, err := Train(context.Background(), m, ds, test, tc, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Test.Accuracy < 0.9 {
		t.Fatalf("synthetic accuracy %.3f after %d epochs", res.Test.Accuracy, res.Epochs)
	}
}

// TestTrainFromInit: TrainConfig.Init is where training starts (a run
// resumed from the first one's parameters starts at its accuracy), and an
// Init of another length is refused.
func TestTrainFromInit(t *testing.T) {
	cfg := DefaultSyntheticConfig()
	cfg.Samples = 512
	ds, err := NewSynthetic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	test, _ := NewSynthetic(SyntheticConfig{Samples: 256, Shape: cfg.Shape, Classes: 10, Noise: 1, Seed: cfg.Seed})
	m, _ := NewModel("mlp", ModelOptions{Workers: 1})
	tc := DefaultTrainConfig()
	tc.Epochs = 1
	first, err := Train(context.Background(), m, ds, test, tc, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tc.Init = first.Params
	tc.SGD.LR = 1e-9 // the second run barely moves: it must start where the first ended
	second, err := Train(context.Background(), m, ds, test, tc, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if second.Test.Accuracy != first.Test.Accuracy {
		t.Fatalf("resumed at accuracy %.4f, the first run ended at %.4f", second.Test.Accuracy, first.Test.Accuracy)
	}
	tc.Init = first.Params[1:]
	if _, err := Train(context.Background(), m, ds, test, tc, nil, nil); err == nil || !strings.Contains(err.Error(), "TrainConfig.Init") {
		t.Fatalf("short Init: %v", err)
	}
}

// TestTrainMNISTSubset trains the MLP on 10000 MNIST images for one epoch:
// accuracy must rise far above the 10% of chance. Full-accuracy runs are
// `dssp train`.
func TestTrainMNISTSubset(t *testing.T) {
	dir, err := FindMNIST()
	if err != nil {
		t.Skip(err)
	}
	train, test, err := LoadMNIST(dir)
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 60000 || test.Len() != 10000 {
		t.Fatalf("MNIST sizes %d/%d", train.Len(), test.Len())
	}
	m, _ := NewModel("mlp", ModelOptions{})
	tc := DefaultTrainConfig()
	tc.Epochs = 1
	res, err := Train(context.Background(), m, train.Subset(10000), test.Subset(2000), tc, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("MLP, 10000 samples, 1 epoch: test accuracy %.3f in %v", res.Test.Accuracy, res.Elapsed)
	if res.Test.Accuracy < 0.85 {
		t.Fatalf("accuracy %.3f", res.Test.Accuracy)
	}
}

// TestMNISTNotFoundNamesDataFlag: on a host with no module cache (and no
// go command) the error says how to give the folder: --data.
func TestMNISTNotFoundNamesDataFlag(t *testing.T) {
	empty := t.TempDir()
	t.Setenv("GOMODCACHE", empty)
	t.Setenv("GOPATH", empty)
	t.Setenv("HOME", empty)
	t.Setenv("PATH", empty)
	_, err := FindMNIST()
	if !IsNotFound(err) || !strings.Contains(err.Error(), "--data") {
		t.Fatalf("FindMNIST without a module cache: %v", err)
	}
	_, _, err = LoadDataset("mnist", empty)
	if !IsNotFound(err) || !strings.Contains(err.Error(), "--data") || !strings.Contains(err.Error(), empty) {
		t.Fatalf("LoadDataset(mnist, empty folder): %v", err)
	}
}
