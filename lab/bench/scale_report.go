package bench

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var scaleColumns = []string{"variant", "nodes", "shards", "replicas", "trainers", "members_s", "led_s", "groups_per_node",
	"idle_rss_mib", "idle_rss_max_mib", "idle_cpu", "idle_gossip_bps", "idle_heartbeats_per_s", "idle_goroutines", "idle_cpu_max", "idle_heartbeats_max_per_s",
	"train_hosts_rss_mib", "train_hosts_cpu", "train_hosts_heartbeats_per_s", "train_hosts_goroutines",
	"trainers_rss_mib", "trainers_rss_max_mib", "trainers_cpu", "iters_per_sec",
	"join_moved", "leave_moved", "expected_moved", "join_settle_s", "leave_settle_s", "load1", "took_s", "error"}

func (p ScalePoint) row() []string {
	f := func(x float64, prec int) string { return strconv.FormatFloat(x, 'f', prec, 64) }
	d := func(x time.Duration) string { return f(x.Seconds(), 2) }
	return []string{p.Variant, strconv.Itoa(p.Nodes), strconv.Itoa(p.Shards), strconv.Itoa(p.Replicas), strconv.Itoa(p.Trainers),
		d(p.Members), d(p.Led), f(p.Groups, 2),
		f(p.Idle.RSS, 1), f(p.Idle.RSSMax, 1), f(p.Idle.CPU, 4), f(p.Idle.GossipBps, 0), f(p.Idle.Heartbeats, 1), f(p.Idle.Goroutines, 0), f(p.Idle.CPUMax, 4), f(p.Idle.HeartbeatsMax, 1),
		f(p.TrainHosts.RSS, 1), f(p.TrainHosts.CPU, 4), f(p.TrainHosts.Heartbeats, 1), f(p.TrainHosts.Goroutines, 0),
		f(p.TrainNodes.RSS, 1), f(p.TrainNodes.RSSMax, 1), f(p.TrainNodes.CPU, 4), f(p.ItersPerSec, 2),
		strconv.Itoa(p.JoinMoved), strconv.Itoa(p.LeaveMoved), f(p.Expected, 2), d(p.JoinSettle), d(p.LeaveSettle),
		f(p.Load, 2), d(p.Took), p.Err}
}

func scalePointFromRow(head, row []string) (ScalePoint, error) {
	var p ScalePoint
	if len(row) != len(head) {
		return p, fmt.Errorf("row of %d fields, header %d", len(row), len(head))
	}
	get := func(name string) string {
		if i := slices.Index(head, name); i >= 0 {
			return row[i]
		}
		return ""
	}
	num := func(name string) float64 { v, _ := strconv.ParseFloat(get(name), 64); return v }
	in := func(name string) int { return int(num(name)) }
	dur := func(name string) time.Duration { return secs(num(name)) }
	p = ScalePoint{Variant: get("variant"), Nodes: in("nodes"), Shards: in("shards"), Replicas: in("replicas"), Trainers: in("trainers"),
		Members: dur("members_s"), Led: dur("led_s"), Groups: num("groups_per_node"),
		Idle: NodeCost{RSS: num("idle_rss_mib"), RSSMax: num("idle_rss_max_mib"), CPU: num("idle_cpu"), GossipBps: num("idle_gossip_bps"),
			Heartbeats: num("idle_heartbeats_per_s"), Goroutines: num("idle_goroutines"), CPUMax: num("idle_cpu_max"), HeartbeatsMax: num("idle_heartbeats_max_per_s")},
		TrainHosts:  NodeCost{RSS: num("train_hosts_rss_mib"), CPU: num("train_hosts_cpu"), Heartbeats: num("train_hosts_heartbeats_per_s"), Goroutines: num("train_hosts_goroutines")},
		TrainNodes:  NodeCost{RSS: num("trainers_rss_mib"), RSSMax: num("trainers_rss_max_mib"), CPU: num("trainers_cpu")},
		ItersPerSec: num("iters_per_sec"), JoinMoved: in("join_moved"), LeaveMoved: in("leave_moved"), Expected: num("expected_moved"),
		JoinSettle: dur("join_settle_s"), LeaveSettle: dur("leave_settle_s"), Load: num("load1"), Took: dur("took_s"), Err: get("error")}
	if p.Variant == "" || p.Nodes < 1 || p.Shards < 1 {
		return p, fmt.Errorf("bad row %v", row)
	}
	return p, nil
}

// appendScaleCSV adds p to path, replacing an earlier row of the same
// variant, N and S.
func appendScaleCSV(path string, p ScalePoint) error {
	rows := [][]string{scaleColumns}
	if old, err := readCSV(path); err == nil {
		if !slices.Equal(old[0], scaleColumns) {
			return fmt.Errorf("bench: %s has other columns; move it away", path)
		}
		for _, r := range old[1:] {
			q, err := scalePointFromRow(old[0], r)
			if err == nil && (q.Variant != p.Variant || q.Nodes != p.Nodes || q.Shards != p.Shards) {
				rows = append(rows, r)
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	rows = append(rows, p.row())
	return writeCSVFile(path, rows)
}

func writeCSVFile(path string, rows [][]string) error {
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

// LoadScale reads dir/scale.csv, sorted by variant, N and S.
func LoadScale(dir string) (*ScaleResult, error) {
	rows, err := readCSV(filepath.Join(dir, "scale.csv"))
	if err != nil {
		return nil, err
	}
	res := &ScaleResult{Config: DefaultScaleConfig(), CPU: CPUModel(), Cores: runtime.NumCPU()}
	res.Config.OutDir = dir
	for _, r := range rows[1:] {
		p, err := scalePointFromRow(rows[0], r)
		if err != nil {
			return nil, fmt.Errorf("bench: %s/scale.csv: %w", dir, err)
		}
		res.Points = append(res.Points, p)
	}
	slices.SortStableFunc(res.Points, func(a, b ScalePoint) int {
		return cmp.Or(cmp.Compare(a.Variant, b.Variant), cmp.Compare(a.Nodes, b.Nodes), cmp.Compare(a.Shards, b.Shards))
	})
	return res, nil
}

// Markdown is the table: one row per variant, N and S.
func (r *ScaleResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %d cores. N host-only nodes form the mesh (every node runs every replica placement gives it, R per shard); "+
		"costs are per node, means over the nodes of a role, CPU in %% of one core; the trainers join for the training window only.\n\n", r.CPU, r.Cores)
	b.WriteString("| variant | N | S | raft groups/node | all members see all | every shard led, full voters | idle RSS MiB (max) | idle CPU % (max) | gossip B/s | raft heartbeats/s (max) | goroutines | training: host CPU % / RSS MiB | trainer CPU % / RSS MiB | it/s | replicas moved on join / leave (S·R/(N+1)) | join / leave settles | load |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range r.Points {
		if p.Err != "" {
			fmt.Fprintf(&b, "| %s | %d | %d | failed: %s | | | | | | | | | | | | | %.1f |\n", p.Variant, p.Nodes, p.Shards, p.Err, p.Load)
			continue
		}
		train, trainer, its := "—", "—", "—"
		if p.Trainers > 0 {
			train = fmt.Sprintf("%.1f / %.0f", 100*p.TrainHosts.CPU, p.TrainHosts.RSS)
			trainer = fmt.Sprintf("%.0f / %.0f", 100*p.TrainNodes.CPU, p.TrainNodes.RSS)
			its = fmt.Sprintf("%.1f", p.ItersPerSec)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %.1f | %s | %s | %.0f (%.0f) | %.1f (%.0f) | %.0f | %.0f (%.0f) | %.0f | %s | %s | %s | %d / %d (%.1f) | %s / %s | %.1f |\n",
			p.Variant, p.Nodes, p.Shards, p.Groups, fmtDur(p.Members), fmtDur(p.Led), p.Idle.RSS, p.Idle.RSSMax, 100*p.Idle.CPU, 100*p.Idle.CPUMax,
			p.Idle.GossipBps, p.Idle.Heartbeats, p.Idle.HeartbeatsMax, p.Idle.Goroutines, train, trainer, its,
			p.JoinMoved, p.LeaveMoved, p.Expected, fmtDur(p.JoinSettle), fmtDur(p.LeaveSettle), p.Load)
	}
	return b.String()
}

// Write puts scale.md and scale.png (each cost against N) into dir.
func (r *ScaleResult) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scale.md"), []byte(r.Markdown()), 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return r.plot(filepath.Join(dir, "scale.png"))
}

type scaleCost struct {
	title, unit string
	get         func(ScalePoint) float64
}

var scaleCosts = []scaleCost{
	{"all members see all", "s", func(p ScalePoint) float64 { return p.Members.Seconds() }},
	{"every shard led, full voters", "s", func(p ScalePoint) float64 { return p.Led.Seconds() }},
	{"idle RSS per node", "MiB", func(p ScalePoint) float64 { return p.Idle.RSS }},
	{"idle CPU per node", "% of a core", func(p ScalePoint) float64 { return 100 * p.Idle.CPU }},
	{"gossip sent per node", "bytes/s", func(p ScalePoint) float64 { return p.Idle.GossipBps }},
	{"raft heartbeats per node", "per s", func(p ScalePoint) float64 { return p.Idle.Heartbeats }},
	{"goroutines per node", "", func(p ScalePoint) float64 { return p.Idle.Goroutines }},
	{"replicas moved on a join", "replicas", func(p ScalePoint) float64 { return float64(p.JoinMoved) }},
}

// plot draws one panel per cost against N, a line per variant and S.
func (r *ScaleResult) plot(path string) error {
	var keys []string
	for _, p := range r.Points {
		if p.Err != "" {
			continue
		}
		k := fmt.Sprintf("S=%d", p.Shards)
		if len(r.variants()) > 1 {
			k = p.Variant + " " + k
		}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	const cols = 4
	rows := (len(scaleCosts) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for ci, c := range scaleCosts {
		pl := plot.New()
		pl.Title.Text = c.title
		pl.X.Label.Text = "nodes N"
		pl.Y.Label.Text = c.unit
		pl.Add(plotter.NewGrid())
		for si, k := range keys {
			var pts plotter.XYs
			for _, p := range r.Points {
				kk := fmt.Sprintf("S=%d", p.Shards)
				if len(r.variants()) > 1 {
					kk = p.Variant + " " + kk
				}
				if p.Err == "" && kk == k {
					pts = append(pts, plotter.XY{X: float64(p.Nodes), Y: c.get(p)})
				}
			}
			if len(pts) == 0 {
				continue
			}
			line, dots, err := plotter.NewLinePoints(pts)
			if err != nil {
				return fmt.Errorf("bench: %w", err)
			}
			line.Color = plotutil.Color(si)
			dots.Color, dots.Shape = line.Color, plotutil.Shape(si)
			pl.Add(line, dots)
			if ci == 0 {
				pl.Legend.Add(k, line, dots)
			}
		}
		if ci == len(scaleCosts)-1 { // the placement's expectation
			for si, k := range keys {
				var pts plotter.XYs
				for _, p := range r.Points {
					if p.Err == "" && strings.HasSuffix(k, fmt.Sprintf("S=%d", p.Shards)) && (len(r.variants()) == 1 || strings.HasPrefix(k, p.Variant+" ")) {
						pts = append(pts, plotter.XY{X: float64(p.Nodes), Y: p.Expected})
					}
				}
				if ln, err := plotter.NewLine(pts); err == nil && len(pts) > 0 {
					ln.Color = plotutil.Color(si)
					ln.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
					pl.Add(ln)
				}
			}
			pl.Title.Text += " (dashed: S·R/(N+1))"
		}
		pl.Legend.Top = true
		pl.Y.Min = 0
		plots[ci/cols][ci%cols] = pl
	}
	for i := range plots {
		for j := range plots[i] {
			if plots[i][j] == nil {
				plots[i][j] = plot.New()
			}
		}
	}
	img := vgimg.New(vg.Points(float64(cols)*300), vg.Points(float64(rows)*260))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(6), PadY: vg.Points(6), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4)}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		for j := range plots[i] {
			plots[i][j].Draw(canvases[i][j])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("bench: %s: %w", path, err)
	}
	return f.Close()
}

func (r *ScaleResult) variants() []string {
	var out []string
	for _, p := range r.Points {
		if !slices.Contains(out, p.Variant) {
			out = append(out, p.Variant)
		}
	}
	return out
}
