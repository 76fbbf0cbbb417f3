package cudaops

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"
)

// TrainConfig is a single-process training run: the baseline every
// distributed run is compared with.
type TrainConfig struct {
	Epochs    int
	BatchSize int
	SGD       SGD
	// LRDecay multiplies the learning rate after every epoch (1 = constant).
	LRDecay float64
	Seed    uint64 // parameter init and data order
	// Init, if set, is the starting parameters (copied; length
	// Model.NumParams) instead of Model.Init(Seed).
	Init []float32
	// ProgressEvery is how many steps pass between progress callbacks
	// (0 = once per epoch only).
	ProgressEvery int
}

// DefaultTrainConfig is the MNIST baseline setting.
func DefaultTrainConfig() TrainConfig {
	return TrainConfig{Epochs: 10, BatchSize: 64, SGD: DefaultSGD(), LRDecay: 0.85, Seed: 1, ProgressEvery: 100}
}

// Validate names the first bad field.
func (c TrainConfig) Validate() error {
	switch {
	case c.Epochs <= 0:
		return fmt.Errorf("cudaops: TrainConfig.Epochs %d must be > 0", c.Epochs)
	case c.BatchSize <= 0:
		return fmt.Errorf("cudaops: TrainConfig.BatchSize %d must be > 0", c.BatchSize)
	case !(c.LRDecay > 0 && c.LRDecay <= 1):
		return fmt.Errorf("cudaops: TrainConfig.LRDecay %g outside (0,1]", c.LRDecay)
	case c.ProgressEvery < 0:
		return fmt.Errorf("cudaops: TrainConfig.ProgressEvery %d must be >= 0", c.ProgressEvery)
	}
	return c.SGD.Validate()
}

// Progress is reported during training. Test is set only at the end of an
// epoch (EpochDone), when the model is evaluated on the test set.
type Progress struct {
	Epoch, Step, StepsPerEpoch int
	EpochDone                  bool
	TrainLoss                  float64 // mean over the steps since the last report
	LR                         float64
	Elapsed                    time.Duration // training time, evaluation excluded
	Test                       Eval
}

// TrainResult is the outcome of Train.
type TrainResult struct {
	Params  []float32
	Test    Eval          // after the last epoch
	Elapsed time.Duration // training time, evaluation excluded
	Samples int           // training samples processed
	Epochs  int
	History []Progress // one entry per epoch
}

// Train runs mini-batch SGD of m on train for cfg.Epochs passes, evaluating
// on test after each epoch. progress may be nil. It stops early with
// ctx.Err() (wrapped) when ctx is cancelled, and fails if the loss becomes
// NaN or infinite.
func Train(ctx context.Context, m *Model, train, test Dataset, cfg TrainConfig, log *slog.Logger, progress func(Progress)) (TrainResult, error) {
	if err := cfg.Validate(); err != nil {
		return TrainResult{}, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	loader, err := NewLoader(train, LoaderConfig{Worker: 0, Workers: 1, BatchSize: cfg.BatchSize, Seed: cfg.Seed})
	if err != nil {
		return TrainResult{}, err
	}
	params := m.Init(cfg.Seed)
	if cfg.Init != nil {
		if len(cfg.Init) != len(params) {
			return TrainResult{}, fmt.Errorf("cudaops: TrainConfig.Init has %d parameters, model %s has %d", len(cfg.Init), m.Name(), len(params))
		}
		copy(params, cfg.Init)
	}
	grad := make([]float32, len(params))
	velocity := make([]float32, len(params))
	x := make([]float32, cfg.BatchSize*m.InputSize())
	labels := make([]int, cfg.BatchSize)
	opt := cfg.SGD
	steps := loader.BatchesPerEpoch()
	res := TrainResult{}
	var elapsed time.Duration
	for epoch := range cfg.Epochs {
		var lossSum float64
		var lossN int
		for step := range steps {
			if err := ctx.Err(); err != nil {
				return res, fmt.Errorf("cudaops: train stopped at epoch %d step %d: %w", epoch, step, err)
			}
			start := time.Now()
			loader.Next(x, labels)
			loss, err := m.Gradient(params, x, labels, grad)
			if err != nil {
				return res, err
			}
			if math.IsNaN(loss) || math.IsInf(loss, 0) {
				return res, fmt.Errorf("cudaops: train diverged at epoch %d step %d: loss %v (lower the learning rate %g)", epoch, step, loss, opt.LR)
			}
			if err := opt.Step(m.Backend(), params, grad, velocity); err != nil {
				return res, err
			}
			elapsed += time.Since(start)
			res.Samples += cfg.BatchSize
			lossSum += loss
			lossN++
			if cfg.ProgressEvery > 0 && (step+1)%cfg.ProgressEvery == 0 && progress != nil {
				progress(Progress{Epoch: epoch, Step: step + 1, StepsPerEpoch: steps, TrainLoss: lossSum / float64(lossN), LR: float64(opt.LR), Elapsed: elapsed})
				lossSum, lossN = 0, 0
			}
		}
		ev, err := m.Evaluate(params, test)
		if err != nil {
			return res, err
		}
		p := Progress{Epoch: epoch, Step: steps, StepsPerEpoch: steps, EpochDone: true, LR: float64(opt.LR), Elapsed: elapsed, Test: ev}
		if lossN > 0 {
			p.TrainLoss = lossSum / float64(lossN)
		}
		res.History = append(res.History, p)
		log.Info("epoch done", "model", m.Name(), "epoch", epoch+1, "test_acc", ev.Accuracy, "test_loss", ev.Loss, "elapsed", elapsed)
		if progress != nil {
			progress(p)
		}
		opt.LR = float32(float64(opt.LR) * cfg.LRDecay)
		res.Test, res.Epochs = ev, epoch+1
	}
	res.Params, res.Elapsed = params, elapsed
	return res, nil
}
