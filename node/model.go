package node

import (
	"fmt"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile"
)

// LoadInitFrom reads the parameters of --init-from (spec.InitFrom) for
// spec's model; nil when it is not set. A missing file, another model, a
// tensor whose shape differs or a non-finite value is an error naming it.
// The assembler calls it before anything is written to disk and passes
// the result as Deps.InitParams.
func LoadInitFrom(spec JobSpec) ([]float32, error) {
	if spec.InitFrom == "" {
		return nil, nil
	}
	if spec.External() {
		_, theta, err := LoadExternalInitFrom(spec.InitFrom)
		return theta, err
	}
	m, err := cudaops.NewModel(spec.Model, cudaops.ModelOptions{Workers: 1})
	if err != nil {
		return nil, err
	}
	theta, _, err := modelfile.LoadParams(spec.InitFrom, m)
	if err != nil {
		return nil, fmt.Errorf("--init-from: %w", err)
	}
	if err := modelfile.CheckFinite(m.Layout(), theta); err != nil {
		return nil, fmt.Errorf("--init-from %s: %w", spec.InitFrom, err)
	}
	return theta, nil
}
