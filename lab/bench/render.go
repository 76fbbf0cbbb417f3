package bench

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"dsspmesh/lab/netlab"
	"dsspmesh/node"
	"dsspmesh/node/launch"
)

// LoadParadigms reads back a comparison that RunParadigms wrote into dir
// (runs.csv, and each run's accuracy.csv under runs/ for the plots), so its
// report can be rendered again, e.g. with another reference target.
func LoadParadigms(dir string) (*ParadigmsResult, error) {
	rows, err := readCSV(filepath.Join(dir, "runs.csv"))
	if err != nil {
		return nil, err
	}
	if len(rows) < 2 {
		return nil, fmt.Errorf("bench: %s/runs.csv has no runs", dir)
	}
	head := rows[0]
	col := func(name string) int { return slices.Index(head, name) }
	cfg := DefaultParadigmsConfig()
	cfg.Binary, cfg.OutDir = "(loaded)", dir
	cfg.Targets, cfg.Variants, cfg.Settings = nil, nil, nil
	var targetCols, waitCols []int
	for i, h := range head {
		if t, ok := strings.CutPrefix(h, "time_to_"); ok {
			f, err := strconv.ParseFloat(strings.TrimSuffix(t, "_s"), 64)
			if err != nil {
				return nil, fmt.Errorf("bench: runs.csv column %q: %w", h, err)
			}
			cfg.Targets = append(cfg.Targets, f)
			targetCols = append(targetCols, i)
		}
		if strings.HasPrefix(h, "wait_share_node") {
			waitCols = append(waitCols, i)
		}
	}
	cfg.Workers = len(waitCols)
	need := []string{"setting", "slowdown", "paradigm", "repeat", "final_acc", "elapsed_s", "limit_s", "iters_per_sec", "error"}
	for _, n := range need {
		if col(n) < 0 {
			return nil, fmt.Errorf("bench: runs.csv lacks column %q", n)
		}
	}
	res := &ParadigmsResult{Config: cfg}
	num := func(row []string, name string) float64 {
		f, _ := strconv.ParseFloat(row[col(name)], 64)
		return f
	}
	for _, row := range rows[1:] {
		if len(row) != len(head) {
			return nil, fmt.Errorf("bench: runs.csv row %v has %d fields, header %d", row, len(row), len(head))
		}
		r := RunSummary{Setting: row[col("setting")], Variant: Variant(row[col("paradigm")]),
			Limit: secs(num(row, "limit_s")), FinalAcc: num(row, "final_acc"), Elapsed: secs(num(row, "elapsed_s")),
			ItersPerSec: num(row, "iters_per_sec"), Err: row[col("error")]}
		r.Repeat, _ = strconv.Atoi(row[col("repeat")])
		if c := col("load1"); c >= 0 { // absent from reports written before it was recorded
			r.Load, _ = strconv.ParseFloat(row[c], 64)
		}
		for name, dst := range map[string]*float64{"samples_per_sec": &r.SamplesPerSec, "bytes_per_sample": &r.BytesPerSample,
			"busy": &r.Busy, "of_ceiling": &r.OfCeiling} {
			if c := col(name); c >= 0 { // absent from reports written before local rounds
				*dst, _ = strconv.ParseFloat(row[c], 64)
			}
		}
		for _, t := range cfg.Targets {
			n := 0.0
			if c := col("samples_to_" + strconv.FormatFloat(t, 'g', -1, 64)); c >= 0 { // absent from reports written before it was recorded
				n, _ = strconv.ParseFloat(row[c], 64)
			}
			r.SamplesTo = append(r.SamplesTo, n)
		}
		for _, c := range targetCols {
			d := NotReached
			if row[c] != "" {
				f, _ := strconv.ParseFloat(row[c], 64)
				d = secs(f)
			}
			r.ToTarget = append(r.ToTarget, d)
		}
		for _, c := range waitCols {
			f, _ := strconv.ParseFloat(row[c], 64)
			r.Wait = append(r.Wait, f)
		}
		r.Evals, _ = loadEvals(filepath.Join(dir, "runs", runDirName(r.Setting, r.Variant, r.Repeat), "accuracy.csv"))
		res.Runs = append(res.Runs, r)
		cfg.TimeLimit = r.Limit
		if !slices.Contains(cfg.Variants, r.Variant) {
			cfg.Variants = append(cfg.Variants, r.Variant)
		}
		if !slices.ContainsFunc(cfg.Settings, func(s Setting) bool { return s.Name == r.Setting }) {
			s := Setting{Name: r.Setting}
			if sd := row[col("slowdown")]; sd != "" {
				if s.Slowdown, err = node.ParseFloats("slowdown", sd); err != nil {
					return nil, err
				}
			}
			if c := col("link"); c >= 0 && row[c] != "" { // absent from reports written before the link lab
				spec, err := netlab.ParseSpec(row[c])
				if err != nil {
					return nil, err
				}
				s.Link = &spec
			}
			if c := col("baseline"); c >= 0 {
				s.Baseline = row[c]
			}
			cfg.Settings = append(cfg.Settings, s)
		}
	}
	cfg.Repeats = 0
	for _, r := range res.Runs {
		cfg.Repeats = max(cfg.Repeats, r.Repeat)
	}
	if !slices.Contains(cfg.Targets, cfg.RefTarget) && len(cfg.Targets) > 0 {
		cfg.RefTarget = slices.Max(cfg.Targets)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "link.txt")); err == nil {
		res.Paths = strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	res.Config = cfg
	return res, nil
}

func secs(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

func runDirName(setting string, v Variant, rep int) string {
	return fmt.Sprintf("%s-%s-r%d", setting, strings.ReplaceAll(string(v), ":", "_"), rep)
}

// loadEvals reads launch's accuracy.csv (elapsed_s, accuracy, loss, by).
func loadEvals(path string) ([]launch.EvalPoint, error) {
	rows, err := readCSV(path)
	if err != nil {
		return nil, err
	}
	var out []launch.EvalPoint
	for _, row := range rows[1:] {
		if len(row) < 2 {
			continue
		}
		el, err1 := strconv.ParseFloat(row[0], 64)
		acc, err2 := strconv.ParseFloat(row[1], 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("bench: %s: bad row %v", path, row)
		}
		out = append(out, launch.EvalPoint{Elapsed: secs(el), Accuracy: acc})
	}
	return out, nil
}

func readCSV(path string) ([][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", path, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("bench: %s is empty", path)
	}
	return rows, nil
}
