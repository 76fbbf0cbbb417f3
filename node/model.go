package node

import (
	"fmt"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile"
	"dsspmesh/node/job"
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

// LoadExternalInitFrom reads an external job's --init-from file: its
// tensors, in the file's order, become the layout.
func LoadExternalInitFrom(path string) (cudaops.Layout, []float32, error) {
	f, err := modelfile.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("--init-from: %w", err)
	}
	var l cudaops.Layout
	for _, t := range f.Tensors() {
		l = append(l, cudaops.Range{Name: t.Name, Shape: t.Shape})
	}
	if l, err = job.Place(l); err != nil {
		return nil, nil, fmt.Errorf("--init-from %s: %w", path, err)
	}
	theta, err := f.Params(l)
	if err != nil {
		return nil, nil, fmt.Errorf("--init-from %s: %w", path, err)
	}
	if err := modelfile.CheckFinite(l, theta); err != nil {
		return nil, nil, fmt.Errorf("--init-from %s: %w", path, err)
	}
	return l, theta, nil
}
