package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"dsspmesh/balance"
	"dsspmesh/clock"
	"dsspmesh/lab/sim"
)

// balanceParadigms is --paradigms' default under --balance: the gates of
// the figure, BSP and SSP(1) first.
const balanceParadigms = "bsp,ssp:1,ssp:3,asp,dssp:3:12,dssp-paper:3:12"

// simBalance prints each policy without and with the balance layer, in
// samples: throughput, utilisation (samples / (time × Σ speeds)), wait,
// gaps, re-allocations and the final batches.
//
// With localSteps H > 1 every push is a round of H steps of the base
// batch (the latency paid once a round), and the balance layer sizes each
// worker's round — its local steps — to its speed.
func simBalance(out io.Writer, cfg sim.Config, policies []clock.Policy, base int64, overhead time.Duration, localSteps int) error {
	bc := sim.BalanceConfig{Base: base, Overhead: overhead, Balancer: balance.DefaultConfig(base), LocalSteps: localSteps}
	fmt.Fprintf(out, "balance: base batch %d per worker, global %d, overhead %v a step; capacity %.0f samples/s\n",
		base, base*int64(cfg.Workers), overhead, cfg.Capacity(base))
	if localSteps > 1 {
		fmt.Fprintf(out, "local rounds: %d steps a round at the base batch; +balance sizes each worker's steps to its speed (batches below are a round's samples)\n", localSteps)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "paradigm\tsamples/s\tutilisation\twait\tmean gap\tmax gap\tmoves\tbatches\twall\t")
	for _, p := range policies {
		for _, on := range []bool{false, true} {
			start := time.Now()
			r, err := sim.RunBalance(cfg, p, bc, on)
			if err != nil {
				return err
			}
			name, moves, batches := p.String(), "-", "-"
			if on {
				name += "+balance"
				moves = fmt.Sprint(r.Moves)
				batches = fmt.Sprint(r.Batches)
				if len(r.Batches) > 8 {
					batches = fmt.Sprint(r.Batches[:8]) + "…"
				}
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%.1f%%\t%.1f%%\t%.2f\t%d\t%s\t%s\t%v\t\n",
				name, float64(r.Samples)/r.SimTime.Seconds(), 100*r.Utilisation, 100*r.WaitFraction,
				r.MeanGap, r.MaxGap, moves, batches, time.Since(start).Round(time.Millisecond))
		}
	}
	return tw.Flush()
}
