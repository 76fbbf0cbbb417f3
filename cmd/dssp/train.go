package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile"
	"dsspmesh/node/job"
	// Registers the "cuda" backend in binaries built with -tags cuda; empty
	// otherwise.
	_ "dsspmesh/cudaops/cuda"
)

func newTrainCmd() *cobra.Command {
	cfg := cudaops.DefaultTrainConfig()
	var (
		model, dataset, dataDir, backend string
		lr, momentum, weightDecay        float64
		workers, limit                   int
		out, initFrom                    string
	)
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train one model in this process and report test accuracy (the single-node baseline)",
		Example: "  dssp train --model mlp --epochs 10\n" +
			"  dssp train --model lenet --epochs 8 --data ./mnist\n" +
			"  dssp train --model alexnet-small --dataset cifar10 --data ./cifar-10-batches-bin\n" +
			"  dssp train --model mlp --epochs 2 --out model.safetensors && dssp eval --model model.safetensors",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkTrainFlags(cfg.BatchSize, lr, momentum, weightDecay); err != nil {
				return err
			}
			cfg.SGD = cudaops.SGD{LR: float32(lr), Momentum: float32(momentum), WeightDecay: float32(weightDecay)}
			if err := cfg.Validate(); err != nil {
				return err
			}
			if limit < 0 {
				return fmt.Errorf("--limit %d must be >= 0", limit)
			}
			if out != "" {
				if err := checkWritableFile("out", out); err != nil {
					return err
				}
			}
			be, err := cudaops.NewBackend(backend)
			if err != nil {
				return err
			}
			m, err := cudaops.NewModel(model, cudaops.ModelOptions{Backend: be, Workers: workers})
			if err != nil {
				return err
			}
			if dataset == "" {
				dataset = cudaops.DefaultDataset(model)
			}
			if initFrom != "" {
				if cfg.Init, _, err = modelfile.LoadParams(initFrom, m); err != nil {
					return fmt.Errorf("--init-from: %w", err)
				}
				if err := modelfile.CheckFinite(m.Layout(), cfg.Init); err != nil {
					return fmt.Errorf("--init-from %s: %w", initFrom, err)
				}
			}
			train, test, err := cudaops.LoadDataset(dataset, dataDir)
			if err != nil {
				return err
			}
			if limit > 0 {
				train = train.Subset(limit)
			}
			stdout := cmd.OutOrStdout()
			fmt.Fprintf(stdout, "model %s (%d params) on %s: %d train, %d test samples; backend %s; batch %d, lr %.4g, momentum %.4g, lr decay %.4g/epoch\n",
				model, m.NumParams(), dataset, train.Len(), test.Len(), be.Name(), cfg.BatchSize, lr, momentum, cfg.LRDecay)
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			steps := newProgressLine(cmd.ErrOrStderr())
			res, err := cudaops.Train(cmd.Context(), m, train, test, cfg, log, func(p cudaops.Progress) {
				if p.EpochDone {
					fmt.Fprintf(stdout, "epoch %d/%d  train loss %.4f  test acc %.4f  test loss %.4f  train time %s\n",
						p.Epoch+1, cfg.Epochs, p.TrainLoss, p.Test.Accuracy, p.Test.Loss, p.Elapsed.Round(time.Millisecond))
					return
				}
				steps.show(fmt.Sprintf("epoch %d/%d  step %d/%d  loss %.4f", p.Epoch+1, cfg.Epochs, p.Step, p.StepsPerEpoch, p.TrainLoss),
					p.Step+cfg.ProgressEvery > p.StepsPerEpoch)
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "final: %s test accuracy %.4f (%d/%d) after %d epochs, %s training (%.0f samples/s)\n",
				model, res.Test.Accuracy, res.Test.Correct, res.Test.Samples, res.Epochs, res.Elapsed.Round(time.Millisecond),
				float64(res.Samples)/res.Elapsed.Seconds())
			if out == "" {
				return nil
			}
			job, _ := json.Marshal(map[string]any{"model": model, "dataset": dataset, "epochs": cfg.Epochs, "batch": cfg.BatchSize,
				"lr": lr, "momentum": momentum, "weight_decay": weightDecay, "lr_decay": cfg.LRDecay, "seed": cfg.Seed, "limit": limit, "init_from": initFrom})
			meta := modelfile.Meta{Model: model, Dataset: dataset, Source: "train", Clock: int64(res.Samples / cfg.BatchSize),
				Samples: int64(res.Samples), TakenAt: time.Now(), Job: string(job),
				Eval: &modelfile.Eval{Accuracy: res.Test.Accuracy, Loss: res.Test.Loss, Samples: res.Test.Samples}}
			if err := modelfile.WriteFile(out, m.Layout(), res.Params, meta); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			fmt.Fprintf(stdout, "wrote %s (clock %d: optimizer steps)\n", out, meta.Clock)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "mlp", fmt.Sprintf("model to train, one of %v", cudaops.ModelNames()))
	f.StringVar(&dataset, "dataset", "", fmt.Sprintf("dataset, one of %v (default: mnist, or cifar10 for alexnet-small)", cudaops.DatasetNames()))
	f.StringVar(&dataDir, "data", "", "folder with the dataset files (default for mnist: the GoMNIST module in the Go module cache)")
	f.StringVar(&backend, "backend", "cpu", fmt.Sprintf("compute backend, one of %v", cudaops.BackendNames()))
	f.IntVar(&cfg.Epochs, "epochs", cfg.Epochs, "passes over the training set")
	f.IntVar(&cfg.BatchSize, "batch", cfg.BatchSize, fmt.Sprintf("mini-batch size, in [1, %d]", maxTrainBatch))
	f.Float64Var(&lr, "lr", asWritten(cfg.SGD.LR), fmt.Sprintf("learning rate, in (0, %d]", job.MaxLR))
	f.Float64Var(&momentum, "momentum", asWritten(cfg.SGD.Momentum), "SGD momentum in [0,1)")
	f.Float64Var(&weightDecay, "weight-decay", asWritten(cfg.SGD.WeightDecay), "L2 weight decay, in [0, 1]")
	f.Float64Var(&cfg.LRDecay, "lr-decay", cfg.LRDecay, "learning-rate multiplier applied after each epoch, in (0,1]")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed for initialisation and data order")
	f.IntVar(&workers, "threads", 0, "goroutines splitting each mini-batch (0 = GOMAXPROCS)")
	f.IntVar(&limit, "limit", 0, "train on only the first N training samples (0 = all)")
	f.StringVar(&initFrom, "init-from", "", "start from the parameters in this safetensors file (dssp export, a checkpoint, --out) instead of a random init")
	f.StringVar(&out, "out", "", "save the trained parameters to this safetensors file (with the model, dataset, steps and test accuracy in its metadata)")
	f.IntVar(&cfg.ProgressEvery, "progress-every", cfg.ProgressEvery, "steps between progress lines on stderr (0 = per epoch only)")
	return cmd
}

// asWritten is the float64 with the same shortest decimal as v, so a
// float32 default such as 0.05 shows as 0.05 in --help, not as the
// float32's exact value 0.05000000074505806.
func asWritten(v float32) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(float64(v), 'g', -1, 32), 64)
	return f
}

// maxTrainBatch bounds --batch as dssp node's --batch is bounded
// (job.Spec.Validate): a step allocates the batch's inputs whole
// (batch × the model's input size floats: --batch 1000000000 asked the MLP
// for 3 TB) and activations that grow with it.
const maxTrainBatch = 1 << 16

// checkTrainFlags refuses, naming the flag, a value out of its range or
// one that does not survive the conversion to float32, the precision the
// optimizer runs in (1e40 is +Inf there, 0.99999999999 is 1).
func checkTrainFlags(batch int, lr, momentum, weightDecay float64) error {
	if batch < 1 || batch > maxTrainBatch {
		return fmt.Errorf("--batch %d: must be in [1, %d], as dssp node's (a step holds the batch's inputs and activations whole)", batch, maxTrainBatch)
	}
	for _, err := range []error{
		job.CheckFloat("lr", lr, 0, job.MaxLR, true),
		checkFloat32("lr", lr),
		checkMomentum(momentum),
		job.CheckFloat("weight-decay", weightDecay, 0, 1, false),
		checkFloat32("weight-decay", weightDecay),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkFloat32 refuses a non-zero v that float32 rounds to zero.
func checkFloat32(flag string, v float64) error {
	if v != 0 && float32(v) == 0 {
		return fmt.Errorf("--%s %v: rounds to 0 in float32, the optimizer's precision", flag, v)
	}
	return nil
}

// checkMomentum refuses a --momentum outside [0, 1), or one that float32
// rounds to 1: [job.CheckMomentum], the check of dssp node's job spec.
var checkMomentum = job.CheckMomentum

// checkWritableFile refuses, before any work, a --flag path that cannot be
// written: a folder, or a file in a folder that is missing or not writable
// (probed with a temporary file, removed at once).
func checkWritableFile(flag, path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("--%s %s is a folder", flag, path)
	}
	probe, err := os.CreateTemp(filepath.Dir(path), ".dssp-probe-*")
	if err != nil {
		return fmt.Errorf("--%s %s cannot be written: %w", flag, path, err)
	}
	probe.Close()
	return os.Remove(probe.Name())
}

// progressLine shows step progress: redrawn in place ("\r") on a
// terminal, one line per update otherwise, so a pipe or a file gets whole
// lines instead of updates run together.
type progressLine struct {
	w   io.Writer
	tty bool
}

func newProgressLine(w io.Writer) *progressLine {
	p := &progressLine{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

// show writes text; last ends the line on a terminal too.
func (p *progressLine) show(text string, last bool) {
	switch {
	case !p.tty:
		fmt.Fprintln(p.w, text)
	case last:
		fmt.Fprintf(p.w, "\r%s\n", text)
	default:
		fmt.Fprintf(p.w, "\r%s", text)
	}
}
