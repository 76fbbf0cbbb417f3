package job

import (
	"encoding/json"
	"fmt"

	"dsspmesh/cudaops"
	"dsspmesh/modelfile"
)

// LoadInitFrom reads the parameters of --init-from (spec.InitFrom) for
// spec's model; nil when it is not set. A missing file, another model, a
// tensor whose shape differs or a non-finite value is an error naming it.
// The assembler calls it before anything is written to disk and passes
// the result as the node's Deps.InitParams.
func LoadInitFrom(spec Spec) ([]float32, error) {
	if spec.InitFrom == "" {
		return nil, nil
	}
	if spec.External() {
		_, theta, _, err := LoadExternalInitFrom(spec.InitFrom)
		return theta, err // nil for a file whose order the first trainer gives
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

// LoadExternalInitFrom reads an external job's --init-from file. A file a
// mesh of an external job wrote (dssp export, a checkpoint) names the
// job's layout in its metadata: that is the layout, in its order, and
// theta its parameters. Any other safetensors file (a PyTorch save_file)
// keeps its tensors in no meaningful order: layout is then nil and
// tensors lists the file's, for the first trainer to order (its layout
// must hold exactly these names and shapes; theta follows from the file
// in its order, [InitParamsFor]).
func LoadExternalInitFrom(path string) (layout cudaops.Layout, theta []float32, tensors cudaops.Layout, err error) {
	f, err := modelfile.ReadFile(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--init-from: %w", err)
	}
	if f.Meta.Job != "" {
		var spec Spec
		if json.Unmarshal([]byte(f.Meta.Job), &spec) == nil && spec.External() && spec.Layout != "" {
			if layout, err = ParseLayout(spec.Layout); err != nil {
				return nil, nil, nil, fmt.Errorf("--init-from %s: its job's %w", path, err)
			}
			if theta, err = InitParamsFor(f, path, layout); err != nil {
				return nil, nil, nil, err
			}
			return layout, theta, nil, nil
		}
	}
	for _, t := range f.Tensors() {
		tensors = append(tensors, cudaops.Range{Name: t.Name, Shape: t.Shape})
	}
	if tensors, err = Place(tensors); err != nil {
		return nil, nil, nil, fmt.Errorf("--init-from %s: %w", path, err)
	}
	return nil, nil, tensors, nil
}

// InitParamsFor reads f's parameters in layout's order (every tensor F32
// with its shape, all finite); path names the file in errors.
func InitParamsFor(f *modelfile.File, path string, layout cudaops.Layout) ([]float32, error) {
	theta, err := f.Params(layout)
	if err != nil {
		return nil, fmt.Errorf("--init-from %s: %w", path, err)
	}
	if err := modelfile.CheckFinite(layout, theta); err != nil {
		return nil, fmt.Errorf("--init-from %s: %w", path, err)
	}
	return theta, nil
}
