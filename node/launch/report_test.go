package launch

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestWriteReportDrawsOnlyThroughCharts: the report's CSV files are this
// package's; charts are drawn only by the function given (lab/plot's in
// dssp up), after the CSV files, and its error is the report's.
func TestWriteReportDrawsOnlyThroughCharts(t *testing.T) {
	r := &Result{Evals: []EvalPoint{{Elapsed: time.Second, Accuracy: 0.5, By: "n0"}}}
	names := func(dir string) []string {
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}
	dir := t.TempDir()
	if err := WriteReport(dir, r, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := names(dir), []string{"accuracy.csv", "workers.csv"}; !slices.Equal(got, want) {
		t.Errorf("without charts the report holds %v, want %v", got, want)
	}
	dir = t.TempDir()
	drawn := errors.New("drawn")
	err := WriteReport(dir, r, func(d string, got *Result) error {
		if d != dir || got != r || !slices.Contains(names(d), "workers.csv") {
			t.Errorf("charts called with %s %p before the CSV files were there (%v)", d, got, names(d))
		}
		return drawn
	})
	if !errors.Is(err, drawn) {
		t.Errorf("WriteReport = %v, want the charts' error", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "accuracy.csv")); err != nil {
		t.Error(err)
	}
}
