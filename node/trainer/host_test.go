package trainer

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"

	"dsspmesh/cudaops"
	"dsspmesh/internal/testlogger"
	"dsspmesh/node/job"
)

// TestHostFirstTrainerFixesTheLayout: a builtin job refuses a trainer
// (not-external); on a new external job the first trainer is admitted
// with send_init, its init fixes the layout and θ₀ (AwaitLayout returns
// them), and a later trainer with another shape is refused naming the
// tensor.
func TestHostFirstTrainerFixesTheLayout(t *testing.T) {
	spec := job.DefaultSpec()
	h, err := NewHost(context.Background(), HostDeps{Socket: filepath.Join(t.TempDir(), "trainer.sock"), Node: "node-1",
		Job: func() *job.Spec { return &spec }, Logger: testlogger.New(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close("test over")
	l := cudaops.Layout{{Name: "w", Shape: []int{2, 3}, Offset: 0}, {Name: "b", Shape: []int{2}, Offset: 6}}
	if _, ref := h.admit(l); ref == nil || ref.Code != CodeNotExternal {
		t.Fatalf("builtin job: refusal %v, want %s", ref, CodeNotExternal)
	}
	spec.Model = job.ExternalModel
	adm, ref := h.admit(l)
	if ref != nil || !adm.SendInit || adm.Batch != spec.BatchSize {
		t.Fatalf("first trainer: %+v %v", adm, ref)
	}
	if err := h.init(make([]float32, 3)); err == nil {
		t.Fatal("an init of the wrong size was taken")
	}
	theta := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	if err := h.init(theta); err != nil {
		t.Fatal(err)
	}
	got, theta0, err := h.AwaitLayout(context.Background())
	if err != nil || !slices.Equal(theta0, theta) || job.FormatLayout(got) != job.FormatLayout(l) {
		t.Fatalf("AwaitLayout: %v %v %v", got, theta0, err)
	}
	other := cudaops.Layout{{Name: "w", Shape: []int{3, 2}, Offset: 0}, {Name: "b", Shape: []int{2}, Offset: 6}}
	if _, ref := h.admit(other); ref == nil || ref.Code != CodeLayoutMismatch || ref.Tensor != "w" {
		t.Fatalf("second trainer of another shape: refusal %+v", ref)
	}
	if adm, ref := h.admit(l); ref != nil || adm.SendInit {
		t.Fatalf("second trainer of the job's layout: %+v %v", adm, ref)
	}
}

// TestSameTensors: the --init-from file's tensors in any order are
// accepted; a missing, extra or reshaped tensor is named.
func TestSameTensors(t *testing.T) {
	file := cudaops.Layout{{Name: "a", Shape: []int{2}}, {Name: "b", Shape: []int{3, 1}}}
	if err := sameTensors(file, cudaops.Layout{file[1], file[0]}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		got    cudaops.Layout
		tensor string
	}{
		{cudaops.Layout{file[0]}, "b"},
		{cudaops.Layout{file[0], file[1], {Name: "c", Shape: []int{1}}}, "c"},
		{cudaops.Layout{file[0], {Name: "b", Shape: []int{1, 3}}}, "b"},
	} {
		if err := sameTensors(file, c.got); err == nil || err.tensor != c.tensor {
			t.Errorf("%v: %v, want tensor %s named", c.got, err, c.tensor)
		}
	}
}
