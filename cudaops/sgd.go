package cudaops

import "fmt"

// SGD is stochastic gradient descent with momentum and L2 weight decay on
// flat slices: v = Momentum*v + g + WeightDecay*p; p -= LR*v. It works on any
// contiguous slice of the parameter vector, so a shard applies it to its own
// range with the matching ranges of the gradient and velocity.
type SGD struct {
	LR          float32
	Momentum    float32
	WeightDecay float32
}

// DefaultSGD is the setting the MNIST baselines use.
func DefaultSGD() SGD { return SGD{LR: 0.05, Momentum: 0.9, WeightDecay: 0} }

// Validate names the first bad field.
func (s SGD) Validate() error {
	switch {
	case !(s.LR > 0):
		return fmt.Errorf("cudaops: SGD.LR %g must be > 0", s.LR)
	case !(s.Momentum >= 0 && s.Momentum < 1):
		return fmt.Errorf("cudaops: SGD.Momentum %g outside [0,1)", s.Momentum)
	case !(s.WeightDecay >= 0):
		return fmt.Errorf("cudaops: SGD.WeightDecay %g must be >= 0", s.WeightDecay)
	}
	return nil
}

// Step updates params and velocity in place from grad on backend be (nil
// means CPU{}). The three slices must have the same length.
func (s SGD) Step(be Backend, params, grad, velocity []float32) error {
	if len(grad) != len(params) || len(velocity) != len(params) {
		return fmt.Errorf("cudaops: SGD step: %w: params %d, grad %d, velocity %d", ErrShape, len(params), len(grad), len(velocity))
	}
	if be == nil {
		be = CPU{}
	}
	be.SGDStep(params, grad, velocity, s.LR, s.Momentum, s.WeightDecay)
	return nil
}
