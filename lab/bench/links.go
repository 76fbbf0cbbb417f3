package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"dsspmesh/lab/netlab"
	"dsspmesh/node/launch"
)

// LinkSettings is every base setting twice, on the link lab's topology
// spec: unshaped (the same namespaces and addresses, no qdisc, delay or
// loss: the baseline) and shaped, named <base>-unshaped and <base>-shaped.
// A paradigms run alternates the two for each variant.
func LinkSettings(base []Setting, spec netlab.Spec) []Setting {
	var out []Setting
	for _, s := range base {
		un, sh := spec.Unshaped(), spec
		out = append(out,
			Setting{Name: s.Name + "-unshaped", Slowdown: s.Slowdown, Link: &un},
			Setting{Name: s.Name + "-shaped", Slowdown: s.Slowdown, Link: &sh, Baseline: s.Name + "-unshaped"})
	}
	return out
}

// onLink starts the lab of spec (nil: none, the mesh runs on loopback)
// and returns the hosts its nodes run on and how to remove it.
func onLink(ctx context.Context, spec *netlab.Spec, log *slog.Logger) ([]launch.Host, func(), error) {
	if spec == nil {
		return nil, func() {}, nil
	}
	lab, err := netlab.Start(ctx, *spec, log)
	if err != nil {
		return nil, nil, err
	}
	return lab.LaunchHosts(), func() {
		if err := lab.Close(); err != nil {
			log.Error("link lab not removed", "err", err)
		}
	}, nil
}

// measureLink starts the lab of spec alone and measures its paths (a TCP
// stream of 2 s each); one line a path.
func measureLink(ctx context.Context, spec netlab.Spec, log *slog.Logger) ([]string, error) {
	lab, err := netlab.Start(ctx, spec, log)
	if err != nil {
		return nil, err
	}
	defer lab.Close()
	return lab.Paths(ctx, 2*time.Second)
}

// runOrder is the order of one repeat's settings: each setting without a
// baseline, and right after it for each variant the settings measured
// against it.
func runOrder(settings []Setting) [][]Setting {
	var out [][]Setting
	for _, s := range settings {
		if s.Baseline != "" {
			continue
		}
		g := []Setting{s}
		for _, t := range settings {
			if t.Baseline == s.Name {
				g = append(g, t)
			}
		}
		out = append(out, g)
	}
	return out
}

// linksTable sets each shaped setting's cells against its baseline's, per
// variant: samples/s, bytes per sample, wait share and the time to the
// reference target, each ratio shaped ÷ unshaped.
func linksTable(cfg ParadigmsConfig, cells []Cell) string {
	ref := slices.Index(cfg.Targets, cfg.RefTarget)
	var b strings.Builder
	for _, set := range cfg.Settings {
		if set.Baseline == "" {
			continue
		}
		fmt.Fprintf(&b, "#### %s against %s\n\n", set.Name, set.Baseline)
		fmt.Fprintf(&b, "| paradigm | samples/s shaped, unshaped | ÷ | bytes/sample shaped, unshaped | wait shaped | wait unshaped | time to %s shaped, unshaped | ÷ | final acc shaped, unshaped |\n", pct(cfg.RefTarget))
		b.WriteString("|---|---:|---:|---:|---|---|---:|---:|---:|\n")
		for _, v := range cfg.Variants {
			sh, okS := findCell(cells, set.Name, v)
			un, okU := findCell(cells, set.Baseline, v)
			if !okS || !okU {
				continue
			}
			ratio := "—"
			if un.SamplesPerSec > 0 {
				ratio = fmt.Sprintf("%.2f", sh.SamplesPerSec/un.SamplesPerSec)
			}
			fmt.Fprintf(&b, "| %s | %.0f, %.0f | %s | %.0f, %.0f | %s | %s | %s, %s | %s | %.2f%%, %.2f%% |\n", v,
				sh.SamplesPerSec, un.SamplesPerSec, ratio, sh.BytesPerSample, un.BytesPerSample,
				fmtShares(sh.Wait), fmtShares(un.Wait), cellTime(sh, ref, cfg.TimeLimit), cellTime(un, ref, cfg.TimeLimit),
				Ratio(sh.ToTarget[ref], un.ToTarget[ref], cfg.TimeLimit), 100*sh.FinalAcc, 100*un.FinalAcc)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func findCell(cells []Cell, setting string, v Variant) (Cell, bool) {
	i := slices.IndexFunc(cells, func(c Cell) bool { return c.Setting == setting && c.Variant == v })
	if i < 0 {
		return Cell{}, false
	}
	return cells[i], true
}
