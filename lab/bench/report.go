package bench

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Write puts the comparison into dir:
//
//	report.md                  the markdown tables (medians) per setting
//	runs.csv                   one row per mesh run
//	link.txt                   the shaped link as measured (with --link)
//	summary.csv                one row per (setting, variant): the medians
//	accuracy-<setting>.png     test accuracy vs wall time, one line per run
//	runs/<setting>-<variant>-r<k>/  each mesh's own launch report
func (r *ParadigmsResult) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.Markdown()), 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := writeCSV(filepath.Join(dir, "runs.csv"), r.runRows()); err != nil {
		return err
	}
	if len(r.Paths) > 0 {
		if err := os.WriteFile(filepath.Join(dir, "link.txt"), []byte(strings.Join(r.Paths, "\n")+"\n"), 0o644); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	if err := writeCSV(filepath.Join(dir, "summary.csv"), r.cellRows()); err != nil {
		return err
	}
	for _, s := range r.Config.Settings {
		if err := r.plot(filepath.Join(dir, "accuracy-"+s.Name+".png"), s); err != nil {
			return err
		}
	}
	return nil
}

// Markdown renders one table per setting, medians over repeats, with the
// time to RefTarget of every variant divided by that of dssp and of
// dssp-paper (above 1: DSSP was faster), and the machine's load average
// at the end of each run (its median), since a shared machine's load moves
// every figure.
func (r *ParadigmsResult) Markdown() string {
	cfg := r.Config
	var b strings.Builder
	ref := slices.Index(cfg.Targets, cfg.RefTarget)
	cells := Cells(r.Runs, len(cfg.Targets))
	fmt.Fprintf(&b, "%d workers; %d repeat(s) per cell, median shown; each mesh stopped at %s or after %s",
		cfg.Workers, cfg.Repeats, pct(slices.Max(cfg.Targets)), cfg.TimeLimit)
	if !r.Start.IsZero() {
		fmt.Fprintf(&b, "; started %s, took %s", r.Start.Format(time.DateTime), r.Took.Round(time.Second))
	}
	b.WriteString(". A time to a target runs from the moment every node process of the mesh was started (the " +
		"bootstrap node already answering) to the first evaluation at or above it: it includes the mesh's " +
		"forming and the workers' joining, which come before the first iteration.\n\n")
	if len(r.Paths) > 0 {
		b.WriteString("The shaped link as measured before the runs (UDP round trips, one TCP stream of 2 s):\n\n")
		for _, p := range r.Paths {
			fmt.Fprintf(&b, "- %s\n", p)
		}
		b.WriteString("\n")
	}
	b.WriteString(linksTable(cfg, cells))
	for _, set := range cfg.Settings {
		var mine []Cell
		for _, c := range cells {
			if c.Setting == set.Name {
				mine = append(mine, c)
			}
		}
		fmt.Fprintf(&b, "#### %s\n\n", set)
		refs := refCells(mine)
		b.WriteString("| paradigm |")
		for _, t := range cfg.Targets {
			fmt.Fprintf(&b, " time to %s |", pct(t))
		}
		b.WriteString(" final acc | iters/s (mesh) | wait share per worker | load |")
		for _, rc := range refs {
			fmt.Fprintf(&b, " t%s ÷ t(%s) |", pct(cfg.RefTarget), rc.Variant)
		}
		b.WriteString("\n|---|")
		b.WriteString(strings.Repeat("---:|", len(cfg.Targets)+2))
		b.WriteString("---|---:|")
		b.WriteString(strings.Repeat("---:|", len(refs)))
		b.WriteString("\n")
		for _, c := range mine {
			fmt.Fprintf(&b, "| %s |", c.Variant)
			for t := range cfg.Targets {
				fmt.Fprintf(&b, " %s |", cellTime(c, t, cfg.TimeLimit))
			}
			fmt.Fprintf(&b, " %.2f%% | %.1f | %s | %s |", 100*c.FinalAcc, c.ItersPerSec, fmtShares(c.Wait), fmtLoad(c.Load))
			for _, rc := range refs {
				fmt.Fprintf(&b, " %s |", Ratio(c.ToTarget[ref], rc.ToTarget[ref], cfg.TimeLimit))
			}
			b.WriteString("\n")
		}
		if len(refs) > 0 && len(cfg.Targets) > 1 {
			b.WriteString("\nTime to each target divided by the reference's (above 1: the reference was faster; \"> x\": not reached within the limit; —: the reference did not reach it):\n\n| paradigm |")
			for _, rc := range refs {
				for _, t := range cfg.Targets {
					fmt.Fprintf(&b, " %s ÷ %s |", pct(t), rc.Variant)
				}
			}
			b.WriteString("\n|---|" + strings.Repeat("---:|", len(refs)*len(cfg.Targets)) + "\n")
			for _, c := range mine {
				fmt.Fprintf(&b, "| %s |", c.Variant)
				for _, rc := range refs {
					for t := range cfg.Targets {
						fmt.Fprintf(&b, " %s |", Ratio(c.ToTarget[t], rc.ToTarget[t], cfg.TimeLimit))
					}
				}
				b.WriteString("\n")
			}
		}
		b.WriteString(throughputTable(mine, r.Ceiling, ref, cfg.RefTarget))
		for _, c := range mine {
			if c.Errors > 0 {
				fmt.Fprintf(&b, "\n%s: %d of %d runs ended with an error (see runs.csv).", c.Variant, c.Errors, c.Runs)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// refCells are the rows the ratios divide by: dssp and dssp-paper, and
// when a run has a balanced or pipelined variant (their figures are
// against them) bsp and asp; never a variant with a suffix.
func refCells(cells []Cell) []Cell {
	var out []Cell
	balanced := slices.ContainsFunc(cells, func(c Cell) bool { return c.Variant.Balanced() || c.Variant.Pipelined() })
	for _, prefix := range []string{"bsp", "asp", "dssp:", "dssp-paper:"} {
		exact := !strings.HasSuffix(prefix, ":")
		if exact && !balanced {
			continue
		}
		for _, c := range cells {
			if (exact && string(c.Variant) == prefix) || (!exact && strings.HasPrefix(string(c.Variant), prefix) && !strings.Contains(string(c.Variant), "+")) {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// Ratio is t/ref as text: "1.85"; "> 1.60" when t was not reached within
// limit but ref was; "—" when ref was not reached.
func Ratio(t, ref, limit time.Duration) string {
	switch {
	case ref == NotReached || ref <= 0:
		return "—"
	case t == NotReached:
		return fmt.Sprintf("> %.2f", limit.Seconds()/ref.Seconds())
	}
	return fmt.Sprintf("%.2f", t.Seconds()/ref.Seconds())
}

func cellTime(c Cell, t int, limit time.Duration) string {
	s := fmtTime(c.ToTarget[t], limit)
	if c.Runs > 1 && c.ReachedBy[t] < c.Runs {
		s += fmt.Sprintf(" (%d/%d reached)", c.ReachedBy[t], c.Runs)
	}
	return s
}

// csvLoad leaves the load empty where it was not recorded.
func csvLoad(l float64) string {
	if l == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f", l)
}

func fmtLoad(l float64) string {
	if l == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f", l)
}

func pct(f float64) string { return strconv.FormatFloat(100*f, 'g', -1, 64) + "%" }

func secsOrEmpty(d time.Duration) string {
	if d == NotReached {
		return ""
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 1, 64)
}

func (r *ParadigmsResult) runRows() [][]string {
	cfg := r.Config
	slow, link, baseline := map[string]string{}, map[string]string{}, map[string]string{}
	for _, s := range cfg.Settings {
		slow[s.Name] = FormatFloats(s.Slowdown)
		if s.Link != nil {
			link[s.Name] = s.Link.String()
		}
		baseline[s.Name] = s.Baseline
	}
	workers := cfg.Workers
	head := []string{"setting", "slowdown", "paradigm", "repeat"}
	for _, t := range cfg.Targets {
		head = append(head, "time_to_"+strconv.FormatFloat(t, 'g', -1, 64)+"_s")
	}
	head = append(head, "final_acc", "elapsed_s", "limit_s", "iters_per_sec")
	for w := range workers {
		head = append(head, fmt.Sprintf("wait_share_node%d", w))
	}
	head = append(head, "load1", "error", "samples_per_sec", "bytes_per_sample", "busy", "of_ceiling")
	for _, t := range cfg.Targets {
		head = append(head, "samples_to_"+strconv.FormatFloat(t, 'g', -1, 64))
	}
	head = append(head, "link", "baseline")
	rows := [][]string{head}
	for _, run := range r.Runs {
		row := []string{run.Setting, slow[run.Setting], string(run.Variant), strconv.Itoa(run.Repeat)}
		for t := range cfg.Targets {
			d := NotReached
			if t < len(run.ToTarget) {
				d = run.ToTarget[t]
			}
			row = append(row, secsOrEmpty(d))
		}
		row = append(row, fmt.Sprintf("%.4f", run.FinalAcc), fmt.Sprintf("%.1f", run.Elapsed.Seconds()),
			fmt.Sprintf("%.0f", run.Limit.Seconds()), fmt.Sprintf("%.2f", run.ItersPerSec))
		for w := range workers {
			v := ""
			if w < len(run.Wait) {
				v = fmt.Sprintf("%.3f", run.Wait[w])
			}
			row = append(row, v)
		}
		row = append(row, csvLoad(run.Load), run.Err, fmt.Sprintf("%.1f", run.SamplesPerSec),
			fmt.Sprintf("%.0f", run.BytesPerSample), fmt.Sprintf("%.3f", run.Busy), fmt.Sprintf("%.3f", run.OfCeiling))
		for t := range cfg.Targets {
			row = append(row, samplesOrEmpty(run.SamplesTo, t))
		}
		row = append(row, link[run.Setting], baseline[run.Setting])
		rows = append(rows, row)
	}
	return rows
}

func (r *ParadigmsResult) cellRows() [][]string {
	cfg := r.Config
	head := []string{"setting", "paradigm", "runs"}
	for _, t := range cfg.Targets {
		f := strconv.FormatFloat(t, 'g', -1, 64)
		head = append(head, "median_time_to_"+f+"_s", "reached_"+f)
	}
	head = append(head, "median_final_acc", "median_iters_per_sec", "median_wait_share_per_worker", "median_load1",
		"median_samples_per_sec", "median_bytes_per_sample", "median_busy", "median_of_ceiling")
	for _, t := range cfg.Targets {
		head = append(head, "median_samples_to_"+strconv.FormatFloat(t, 'g', -1, 64))
	}
	rows := [][]string{head}
	for _, c := range Cells(r.Runs, len(cfg.Targets)) {
		row := []string{c.Setting, string(c.Variant), strconv.Itoa(c.Runs)}
		for t := range cfg.Targets {
			row = append(row, secsOrEmpty(c.ToTarget[t]), strconv.Itoa(c.ReachedBy[t]))
		}
		var ws []string
		for _, w := range c.Wait {
			ws = append(ws, fmt.Sprintf("%.3f", w))
		}
		row = append(row, fmt.Sprintf("%.4f", c.FinalAcc), fmt.Sprintf("%.2f", c.ItersPerSec), strings.Join(ws, " "), csvLoad(c.Load),
			fmt.Sprintf("%.1f", c.SamplesPerSec), fmt.Sprintf("%.0f", c.BytesPerSample), fmt.Sprintf("%.3f", c.Busy), fmt.Sprintf("%.3f", c.OfCeiling))
		for t := range cfg.Targets {
			row = append(row, samplesOrEmpty(c.SamplesTo, t))
		}
		rows = append(rows, row)
	}
	return rows
}

// plot draws test accuracy against wall time for every run of one setting,
// one colour per variant, with the targets as dashed lines.
func (r *ParadigmsResult) plot(path string, set Setting) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Test accuracy vs wall time, %d workers, %s", r.Config.Workers, set)
	p.X.Label.Text = "wall time since the mesh started (s)"
	p.Y.Label.Text = "test accuracy"
	p.Add(plotter.NewGrid())
	lo := 1.0
	for i, v := range r.Config.Variants {
		first := true
		for _, run := range r.Runs {
			if run.Setting != set.Name || run.Variant != v || len(run.Evals) == 0 {
				continue
			}
			pts := make(plotter.XYs, len(run.Evals))
			for k, e := range run.Evals {
				pts[k] = plotter.XY{X: e.Elapsed.Seconds(), Y: e.Accuracy}
				if e.Elapsed > 10*time.Second {
					lo = min(lo, e.Accuracy)
				}
			}
			ln, err := plotter.NewLine(pts)
			if err != nil {
				return fmt.Errorf("bench: plot: %w", err)
			}
			ln.Color = plotutil.Color(i)
			ln.Width = vg.Points(1.5)
			if strings.HasPrefix(string(v), "dssp") {
				ln.Width = vg.Points(2.5) // the subject of the comparison
			}
			ln.Dashes = plotutil.Dashes(i / 7)
			p.Add(ln)
			if first {
				p.Legend.Add(string(v), ln)
				first = false
			}
		}
	}
	// The interesting part is near the targets; the first seconds climb
	// from 10% and would squash it.
	p.Y.Min, p.Y.Max = max(0, min(lo, slices.Min(r.Config.Targets))-0.05), 1
	for _, t := range r.Config.Targets {
		ln, err := plotter.NewLine(plotter.XYs{{X: 0, Y: t}, {X: r.Config.TimeLimit.Seconds(), Y: t}})
		if err != nil {
			continue
		}
		ln.Color = color.Gray{Y: 150}
		ln.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(ln)
	}
	// Bottom right, inside the axes: the curves are high up there.
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.XOffs, p.Legend.YOffs = -vg.Points(10), vg.Points(10)
	p.Legend.ThumbnailWidth = vg.Points(25)
	if err := p.Save(9*vg.Inch, 5.5*vg.Inch, path); err != nil {
		return fmt.Errorf("bench: %s: %w", path, err)
	}
	return nil
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	w := csv.NewWriter(f)
	w.WriteAll(rows)
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("bench: %s: %w", path, err)
	}
	return f.Close()
}

// throughputTable is the wire and throughput table of one setting's
// cells: samples/s, model bytes on the wire per training sample, the
// share of the workers' own capacity used, when measured the share of
// the machine's compute ceiling (the figures local rounds move), and the
// samples to the reference target Targets[ref] (no column when ref < 0).
func throughputTable(cells []Cell, ceiling float64, ref int, refTarget float64) string {
	var b strings.Builder
	b.WriteString("\nThroughput and wire (medians): samples/s of the mesh; model bytes pushed and returned per training sample; " +
		"capacity used = samples/s ÷ Σ each worker's samples per compute second, over the same window")
	if ceiling > 0 {
		fmt.Fprintf(&b, "; mesh ÷ compute ceiling = samples/s ÷ %.0f (one single-threaded worker in process × the cores)", ceiling)
	}
	if ref >= 0 {
		fmt.Fprintf(&b, "; samples to %s = the samples the workers had computed by the evaluation that first reached it", pct(refTarget))
	}
	b.WriteString(":\n\n| paradigm | local steps | samples/s | bytes/sample | capacity used | mesh ÷ ceiling |")
	if ref >= 0 {
		fmt.Fprintf(&b, " samples to %s |", pct(refTarget))
	}
	b.WriteString(" wait share per worker |\n|---|---:|---:|---:|---:|---:|")
	if ref >= 0 {
		b.WriteString("---:|")
	}
	b.WriteString("---|\n")
	for _, c := range cells {
		ofc := "—"
		if c.OfCeiling > 0 {
			ofc = fmt.Sprintf("%.2f", c.OfCeiling)
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %.2f | %s |", c.Variant, c.Variant.LocalSteps(), c.SamplesPerSec,
			c.BytesPerSample, c.Busy, ofc)
		if ref >= 0 {
			n := "—"
			if ref < len(c.SamplesTo) && c.SamplesTo[ref] > 0 {
				n = fmt.Sprintf("%.0fk", c.SamplesTo[ref]/1000)
			}
			fmt.Fprintf(&b, " %s |", n)
		}
		fmt.Fprintf(&b, " %s |\n", fmtShares(c.Wait))
	}
	return b.String()
}

// samplesOrEmpty is v[i] as a whole number for a CSV cell, "" where v has
// none or it is 0 (the target was not reached).
func samplesOrEmpty(v []float64, i int) string {
	if i >= len(v) || v[i] <= 0 {
		return ""
	}
	return fmt.Sprintf("%.0f", v[i])
}
