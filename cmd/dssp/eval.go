package main

import (
	"fmt"
	"math"
	"os"

	"github.com/spf13/cobra"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile"
	"dsspmesh/nodeclient"
)

func newEvalCmd() *cobra.Command {
	var (
		path, arch, dataset, dataDir, backend string
		samples, threads                      int
	)
	cmd := &cobra.Command{
		Use:   "eval --model FILE",
		Short: "Evaluate a saved model (safetensors from dssp export, dssp up, dssp train --out or a checkpoint) on a test set",
		Long: `Load a safetensors model file, check its tensors against the model it names
(every tensor present, F32, with the model's shape) and print its test
accuracy and loss. The architecture and dataset come from the file's
metadata unless --arch and --dataset say otherwise. When the file carries the
accuracy the mesh measured for these parameters, it is printed alongside;
evaluated on the same samples (--eval-samples as the mesh used) the two agree.
A model with a NaN or ±Inf parameter is refused, naming how many and the
first tensor holding one: no accuracy is printed for it.`,
		Example: "  dssp eval --model report/model.safetensors\n" +
			"  dssp eval --model ckpt/ckpt-20261203T080000.000Z-c0000001200.safetensors --eval-samples 2000",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if samples < 0 {
				return fmt.Errorf("--eval-samples %d must be >= 0 (0: the whole test set)", samples)
			}
			file, err := os.Open(path)
			if err != nil {
				return fmt.Errorf("--model: %w", err)
			}
			b, f, err := modelfile.Read(file, modelfile.MaxFileBytes)
			file.Close()
			if err != nil {
				return fmt.Errorf("--model: %s: %w", path, err)
			}
			if arch == "" {
				arch = f.Meta.Model
			}
			if arch == "" {
				return fmt.Errorf("--model %s names no architecture in its metadata; give --arch (one of %v)", path, cudaops.ModelNames())
			}
			be, err := cudaops.NewBackend(backend)
			if err != nil {
				return err
			}
			m, err := cudaops.NewModel(arch, cudaops.ModelOptions{Backend: be, Workers: threads})
			if err != nil {
				return err
			}
			theta, err := f.Params(m.Layout())
			if err != nil {
				return fmt.Errorf("--model %s as %s: %w", path, arch, err)
			}
			if err := checkFinite(path, m.Layout(), theta); err != nil {
				return err
			}
			if dataset == "" {
				dataset = f.Meta.Dataset
			}
			if dataset == "" {
				dataset = cudaops.DefaultDataset(arch)
			}
			_, test, err := cudaops.LoadDataset(dataset, dataDir)
			if err != nil {
				return err
			}
			var set cudaops.Dataset = test
			if samples > 0 && samples < test.Len() {
				set = test.Subset(samples)
			}
			ev, err := m.Evaluate(theta, set)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s: %s\nsha256 %s (an evaluation claim's digest names the file it scored)\n", path, describeModel(f), nodeclient.Digest(b))
			fmt.Fprintf(out, "test accuracy %.2f%% (%d/%d on %s), loss %.4f\n", 100*ev.Accuracy, ev.Correct, ev.Samples, dataset, ev.Loss)
			if e := f.Meta.Eval; e != nil {
				fmt.Fprintf(out, "recorded     %.2f%% on %d samples, loss %.4f (difference %+.2f points)\n",
					100*e.Accuracy, e.Samples, e.Loss, 100*(ev.Accuracy-e.Accuracy))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&path, "model", "model.safetensors", "the safetensors file to evaluate")
	f.StringVar(&arch, "arch", "", fmt.Sprintf("architecture, one of %v (default: the file's metadata)", cudaops.ModelNames()))
	f.StringVar(&dataset, "dataset", "", fmt.Sprintf("test set, one of %v (default: the file's metadata)", cudaops.DatasetNames()))
	f.StringVar(&dataDir, "data", "", "dataset folder (default for mnist: the GoMNIST module in the Go module cache)")
	f.StringVar(&backend, "backend", "cpu", fmt.Sprintf("compute backend, one of %v", cudaops.BackendNames()))
	f.IntVar(&samples, "eval-samples", 0, "evaluate the first N test samples (0: the whole test set), as a node's --eval-samples")
	f.IntVar(&threads, "threads", 0, "goroutines splitting each batch (0 = GOMAXPROCS)")
	return cmd
}

// checkFinite refuses parameters holding NaN or ±Inf: a model that
// diverged (or a damaged file) evaluates to some accuracy by chance, which
// would read as a measurement.
func checkFinite(path string, l cudaops.Layout, theta []float32) error {
	n, first := 0, -1
	for i, v := range theta {
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
			if n++; first < 0 {
				first = i
			}
		}
	}
	if n == 0 {
		return nil
	}
	where := fmt.Sprintf("at index %d of the flat vector", first)
	for _, r := range l {
		if first >= r.Offset && first < r.End() {
			where = fmt.Sprintf("first in %s (value %v at its element %d)", r.Name, theta[first], first-r.Offset)
		}
	}
	return fmt.Errorf("--model %s: %d of %d parameters are NaN or ±Inf, %s: not evaluated (its accuracy would be chance, not a measurement)", path, n, len(theta), where)
}
