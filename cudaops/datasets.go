package cudaops

import (
	"errors"
	"fmt"
)

// ErrUnknownDataset is wrapped by LoadDataset for a name it does not know.
var ErrUnknownDataset = errors.New("cudaops: unknown dataset")

// DatasetNames lists what LoadDataset accepts.
func DatasetNames() []string {
	return []string{"cifar10", "mnist", "synthetic-cifar", "synthetic-mnist"}
}

// LoadDataset returns the training and test sets called name:
//   - "mnist": IDX files in dir, or found with FindMNIST when dir is "".
//   - "cifar10": the binary batches in dir (required).
//   - "synthetic-mnist", "synthetic-cifar": seeded synthetic sets shaped like
//     MNIST ([1 28 28]) or CIFAR-10 ([3 32 32]); dir is ignored.
func LoadDataset(name, dir string) (train, test *Memory, err error) {
	switch name {
	case "mnist":
		if dir == "" {
			if dir, err = FindMNIST(); err != nil {
				return nil, nil, err
			}
		}
		return LoadMNIST(dir)
	case "cifar10":
		if dir == "" {
			return nil, nil, fmt.Errorf("cudaops: dataset cifar10 needs the folder of its .bin batches")
		}
		return LoadCIFAR10(dir)
	case "synthetic-mnist", "synthetic-cifar":
		cfg := DefaultSyntheticConfig()
		if name == "synthetic-cifar" {
			cfg.Shape = []int{3, 32, 32}
		}
		cfg.Samples = 10000
		if train, err = NewSynthetic(cfg); err != nil {
			return nil, nil, err
		}
		// Same seed, so the same class means; more samples, so the test
		// set's first 10000 draws repeat the training set and the rest do not.
		cfg.Samples = 12000
		all, err := NewSynthetic(cfg)
		if err != nil {
			return nil, nil, err
		}
		size := prod(cfg.Shape)
		test, err = NewMemory(all.X[10000*size:], all.Y[10000:], cfg.Shape, cfg.Classes)
		return train, test, err
	}
	return nil, nil, fmt.Errorf("%w %q (known: %v)", ErrUnknownDataset, name, DatasetNames())
}

// DefaultDataset is the dataset a model is trained on unless told otherwise.
func DefaultDataset(model string) string {
	if model == "alexnet-small" {
		return "cifar10"
	}
	return "mnist"
}
