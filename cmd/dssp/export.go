package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"dsspmesh/modelfile"
	"dsspmesh/nodeclient"
)

func newExportCmd() *cobra.Command {
	var (
		addr, out string
		evaluated bool
		timeout   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "export --node HOST:PORT --out FILE",
		Short: "Save the mesh's parameters as a safetensors file (a snapshot read from every shard's leader)",
		Long: `Ask a node (its --http-addr) for a snapshot of the mesh's parameters and save
it as safetensors: one F32 tensor per layer parameter (fc1.weight, fc1.bias,
…) with its real shape, and in the metadata the model, dataset, layer shapes
and the training clock.

Consistent means, per shard: the node reads every shard from its current
leader after a Raft barrier, so each shard's slice holds every push that
shard acknowledged before the read began. The shards are independent Raft
groups and training goes on, so the slices are not one global cut; the file
states each shard's t_min, t_max and applied index, and the mesh clock (the
lowest t_min: every live worker's iterations below it are in every slice).

--evaluated fetches instead the snapshot the evaluator last evaluated, with
that accuracy in its metadata; any node answers it (one that does not
evaluate asks the evaluator over the control channel); while the evaluator
holds none (none evaluated yet, or its next evaluation is reading the model)
it asks again every second within --timeout. A node that runs as many
downloads as it allows (for this client or in all) answers 503 with
Retry-After at once; export asks again every second within --timeout then
too. The file is written atomically; nothing is written on error.`,
		Example: "  dssp export --node 127.0.0.1:7948 --out model.safetensors\n" +
			"  dssp eval --model model.safetensors",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return fmt.Errorf("--timeout %v must be > 0", timeout)
			}
			// The node's read is bounded by timeout; the download gets a
			// little longer on top.
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout+10*time.Second)
			defer cancel()
			b, f, err := fetchModel(ctx, cmd.ErrOrStderr(), addr, evaluated, timeout)
			if err != nil {
				return fmt.Errorf("export: %w", err)
			}
			if err := modelfile.WriteAtomic(out, b); err != nil {
				return fmt.Errorf("export: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %s\nsha256 %s\n", out, describeModel(f), nodeclient.Digest(b))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "node", "127.0.0.1:7948", "HTTP address of any node (its --http-addr)")
	f.StringVar(&out, "out", "model.safetensors", "file to write")
	f.BoolVar(&evaluated, "evaluated", false, "the snapshot the evaluator last evaluated (any node fetches it from the evaluator) instead of a fresh one")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "give up when the shards cannot be read within this long")
	return cmd
}

// describeModel is one line about a model file: tensors, clocks, accuracy.
func describeModel(f *modelfile.File) string {
	m := f.Meta
	n := 0
	for _, t := range f.Tensors() {
		size := 1
		for _, d := range t.Shape {
			size *= d
		}
		n += size
	}
	s := fmt.Sprintf("%s, %d parameters in %d tensors, %s, clock %d", m.Model, n, len(f.Tensors()), m.Source, m.Clock)
	if len(m.Shards) > 0 {
		s += " (shards t_min..t_max:"
		for _, sc := range m.Shards {
			s += fmt.Sprintf(" %d:%d..%d", sc.Shard, sc.Min, sc.Max)
		}
		s += ")"
	}
	if !m.TakenAt.IsZero() {
		s += ", taken " + m.TakenAt.UTC().Format(time.RFC3339)
	}
	if e := m.Eval; e != nil {
		s += fmt.Sprintf(", test accuracy %.2f%% (loss %.4f, %d samples)", 100*e.Accuracy, e.Loss, e.Samples)
	}
	return s
}

// exportRetryEvery is how often dssp export asks again.
var exportRetryEvery = time.Second

// fetchModel is nodeclient.FetchModel; it asks again every second, until
// timeout, while the node answers 503 with Retry-After (it runs as many
// downloads as it allows) or, for the evaluated model, 404 (the evaluator
// holds none right now), saying once that it waits. Each ask gives the
// node the time left.
func fetchModel(ctx context.Context, w io.Writer, addr string, evaluated bool, timeout time.Duration) ([]byte, *modelfile.File, error) {
	deadline := time.Now().Add(timeout)
	said := false
	for {
		b, f, err := nodeclient.FetchModel(ctx, addr, evaluated, max(time.Until(deadline), time.Second))
		var se *nodeclient.StatusError
		busy := errors.As(err, &se) && se.Code == http.StatusServiceUnavailable && se.RetryAfter
		missing := evaluated && errors.As(err, &se) && se.Code == http.StatusNotFound
		if !busy && !missing || time.Now().Add(exportRetryEvery).After(deadline) {
			return b, f, err
		}
		if !said {
			what := "the evaluator's model"
			if busy {
				what = "a download place on the node"
			}
			fmt.Fprintf(w, "waiting for %s (%s)\n", what, se.Text)
			said = true
		}
		t := time.NewTimer(exportRetryEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, err
		case <-t.C:
		}
	}
}
