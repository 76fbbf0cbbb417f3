package cudaops

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// CIFAR-10 binary format: records of one label byte (0..9) followed by
// 3072 pixel bytes, the 32×32 red plane, then green, then blue — which is
// already the [3 32 32] layout the models take. Files have no header.
const (
	cifarPixels     = 3 * 32 * 32
	cifarRecord     = 1 + cifarPixels
	maxCIFARRecords = 1 << 16 // a standard batch file holds 10000
)

// CIFAR-10 batch file names inside the extracted cifar-10-batches-bin folder.
var (
	cifarTrainFiles = []string{"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin"}
	cifarTestFiles  = []string{"test_batch.bin"}
)

// ReadCIFAR10 decodes one CIFAR-10 binary batch; name goes into errors,
// which are *FormatError. Pixels are kept as bytes and read scaled to
// [0, 1] (see [Memory]).
func ReadCIFAR10(r io.Reader, name string) (*Memory, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxCIFARRecords*cifarRecord+1))
	if err != nil {
		return nil, &FormatError{File: name, Reason: err.Error()}
	}
	switch {
	case len(data) == 0:
		return nil, &FormatError{File: name, Reason: "empty"}
	case len(data) > maxCIFARRecords*cifarRecord:
		return nil, &FormatError{File: name, Reason: fmt.Sprintf("more than %d records", maxCIFARRecords)}
	case len(data)%cifarRecord != 0:
		return nil, &FormatError{File: name, Reason: fmt.Sprintf("truncated: %d bytes is not a whole number of %d-byte records", len(data), cifarRecord)}
	}
	x, y, err := cifarRecords(data, name, nil, nil)
	if err != nil {
		return nil, err
	}
	return NewBytes(x, y, []int{3, 32, 32}, 10)
}

// cifarRecords appends the pixels and labels of data's records to x and y.
func cifarRecords(data []byte, name string, x []byte, y []int) ([]byte, []int, error) {
	n := len(data) / cifarRecord
	x, y = slices.Grow(x, n*cifarPixels), slices.Grow(y, n)
	for i := range n {
		rec := data[i*cifarRecord : (i+1)*cifarRecord]
		if rec[0] > 9 {
			return nil, nil, &FormatError{File: name, Reason: fmt.Sprintf("label %d of record %d outside 0..9", rec[0], i)}
		}
		y = append(y, int(rec[0]))
		x = append(x, rec[1:]...)
	}
	return x, y, nil
}

// LoadCIFAR10 reads the five training batches and the test batch from dir
// (the extracted cifar-10-batches-bin folder).
func LoadCIFAR10(dir string) (train, test *Memory, err error) {
	if train, err = readCIFARFiles(dir, cifarTrainFiles); err != nil {
		return nil, nil, err
	}
	if test, err = readCIFARFiles(dir, cifarTestFiles); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

func readCIFARFiles(dir string, names []string) (*Memory, error) {
	var (
		x []byte
		y []int
	)
	for _, name := range names {
		p := filepath.Join(dir, name)
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		m, err := ReadCIFAR10(f, p)
		f.Close()
		if err != nil {
			return nil, err
		}
		x = append(x, m.b...)
		for _, l := range m.y {
			y = append(y, int(l))
		}
	}
	return NewBytes(x, y, []int{3, 32, 32}, 10)
}
