package launch

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// WriteReport writes into dir:
//
//	workers.csv   one row per poll per node: elapsed_s, node, id, up, iter,
//	              iters_per_sec, compute_s, wait_s, loss, slices_kept, slices_pulled,
//	              batch, alloc_version, predicted_s (these three: --balance),
//	              samples, local_steps
//	accuracy.csv  one row per evaluation: elapsed_s, accuracy, loss, by
//	chaos.csv     one row per kill (only with chaos)
//
// and then, when charts is not nil, calls it with dir and r to draw the
// plots (`dssp up` draws them with lab/plot; this package draws none).
func WriteReport(dir string, r *Result, charts func(dir string, r *Result) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	secs := func(d interface{ Seconds() float64 }) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) }
	var rows [][]string
	rows = append(rows, []string{"elapsed_s", "node", "id", "up", "iter", "iters_per_sec", "compute_s", "wait_s", "loss", "slices_kept", "slices_pulled", "batch", "alloc_version", "predicted_s", "samples", "local_steps"})
	for _, s := range r.Samples {
		rows = append(rows, []string{secs(s.Elapsed), strconv.Itoa(s.Node), s.ID, strconv.FormatBool(s.Up),
			strconv.FormatUint(s.Worker.Iter, 10), fmt.Sprintf("%.3f", s.Worker.ItersPerSec),
			fmt.Sprintf("%.3f", s.Worker.ComputeSeconds), fmt.Sprintf("%.3f", s.Worker.WaitSeconds), fmt.Sprintf("%.5f", s.Worker.Loss),
			strconv.FormatUint(s.Worker.SlicesKept, 10), strconv.FormatUint(s.Worker.SlicesPulled, 10),
			strconv.FormatInt(s.Worker.Batch, 10), strconv.FormatUint(s.Worker.AllocVersion, 10), fmt.Sprintf("%.4f", s.Worker.PredictedSeconds),
			strconv.FormatUint(s.Worker.Samples, 10), strconv.Itoa(s.Worker.LocalSteps)})
	}
	if err := writeCSV(filepath.Join(dir, "workers.csv"), rows); err != nil {
		return err
	}
	rows = [][]string{{"elapsed_s", "accuracy", "loss", "by"}}
	for _, e := range r.Evals {
		rows = append(rows, []string{secs(e.Elapsed), fmt.Sprintf("%.5f", e.Accuracy), fmt.Sprintf("%.5f", e.Loss), e.By})
	}
	if err := writeCSV(filepath.Join(dir, "accuracy.csv"), rows); err != nil {
		return err
	}
	if len(r.Chaos) > 0 {
		rows = [][]string{{"node", "id", "killed_s", "recovered_after_s", "survivors_training_after_s", "restarted_s", "rejoined_after_s"}}
		for _, c := range r.Chaos {
			rows = append(rows, []string{strconv.Itoa(c.Node), c.ID, secs(c.Killed), secs(c.Recovered), secs(c.Resumed), secs(c.Restarted), secs(c.Rejoined)})
		}
		if err := writeCSV(filepath.Join(dir, "chaos.csv"), rows); err != nil {
			return err
		}
	}
	if charts == nil {
		return nil
	}
	return charts(dir, r)
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	w := csv.NewWriter(f)
	w.WriteAll(rows)
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("report: %s: %w", path, err)
	}
	return f.Close()
}
