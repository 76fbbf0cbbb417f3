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
		// One draw of 12000 samples held once: its first 10000 are the
		// training set (exactly what a draw of 10000 with the same seed
		// gives), the other 2000 the test set, from the same class means.
		cfg.Samples = 12000
		all, err := NewSynthetic(cfg)
		if err != nil {
			return nil, nil, err
		}
		return all.slice(0, 10000), all.slice(10000, 12000), nil
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
