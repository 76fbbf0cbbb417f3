package cli

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"dsspmesh/clock"
	"dsspmesh/lab/sim"
	"dsspmesh/node"
)

// NewSimCmd is `dssp-lab sim`: the discrete-event simulator of package lab/sim.
func NewSimCmd() *cobra.Command {
	var (
		workers, iters, stragIters   int
		speeds, paradigms, dist      string
		compute, latency             time.Duration
		spread, stragProb, stragFact float64
		seed                         uint64
		parallel                     int
		cpuprofile                   string
		balanced                     bool
		batch                        int64
		overhead                     time.Duration
		localSteps                   int
	)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Simulate N workers through the synchronization paradigms",
		Long: `Simulate N workers pushing through a shard's gate (discrete events, simulated
time) and print, per paradigm, throughput, wait fraction, gaps, controller
invocations and grants. The run stops after workers×iters pushes in total, so
--iters is the mean per worker: fast workers do more where the paradigm lets
them. Every paradigm sees the same compute-time draws (same --seed). The
paradigms run in parallel (--parallel, one per core by default); each row's
wall is its own run's, and the last line the whole command's wall time.
Results do not depend on --parallel.`,
		Example: `  dssp-lab sim --workers 4 --speeds 1,1,1,4 --paradigms bsp,asp,ssp:3,ssp:15,dssp:3:12,dssp-paper:3:12 --iters 10000
  dssp-lab sim --balance --workers 4 --speeds 1,1,2,4
  dssp-lab sim --balance --workers 4 --speeds 1,1,2,4 --local-steps 16 --latency 20ms --paradigms bsp,ssp:1`,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := sim.ParseDist(dist)
			if err != nil {
				return err
			}
			factors, err := parseSpeeds(speeds)
			if err != nil {
				return err
			}
			if balanced && !cmd.Flags().Changed("paradigms") {
				paradigms = balanceParadigms
			}
			policies, err := parseParadigms(paradigms)
			if err != nil {
				return err
			}
			cfg := sim.Config{Workers: workers, Iters: iters, Latency: latency, Seed: seed}
			for _, f := range factors {
				cfg.Models = append(cfg.Models, sim.Model{
					Dist: d, Mean: compute, Spread: spread, Slowdown: f,
					StragglerProb: stragProb, StragglerFactor: stragFact, StragglerIters: stragIters,
				})
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if balanced {
				return simBalance(out, cfg, policies, batch, overhead, localSteps)
			}
			fmt.Fprintf(out, "%d workers, speeds %s (cycled), %s compute %v, latency %v, %d pushes per paradigm\n\n",
				workers, speeds, d, compute, latency, int64(workers)*int64(iters))
			if cpuprofile != "" {
				stop, err := startCPUProfile(cpuprofile)
				if err != nil {
					return err
				}
				defer stop()
			}
			start := time.Now()
			runs := runParadigms(cfg, policies, parallel)
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "paradigm\titers/s\tvs first\twait\tmean gap\tmax gap\tcontroller\tgrants\tgranted\twall\t")
			first := runs[0].res.ItersPerSec
			for i, run := range runs {
				if run.err != nil {
					return fmt.Errorf("%s: %w", policies[i], run.err)
				}
				r := run.res
				fmt.Fprintf(tw, "%s\t%.2f\t%.2fx\t%.1f%%\t%.2f\t%d\t%d\t%d\t%d\t%v\t\n",
					r.Policy, r.ItersPerSec, r.ItersPerSec/first, 100*r.WaitFraction, r.MeanGap, r.MaxGap,
					r.ControllerCalls, r.Grants, r.GrantedPushes, run.wall.Round(time.Millisecond))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(out, "\nwall time %v: %d paradigm(s), %d at a time\n",
				time.Since(start).Round(time.Millisecond), len(policies), min(max(parallel, 1), len(policies)))
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&workers, "workers", 4, "number of simulated workers")
	f.IntVar(&iters, "iters", 1000, "mean iterations per worker: the run stops after workers×iters pushes in total")
	f.StringVar(&speeds, "speeds", "1", "comma-separated slow-down factors, cycled over the workers (1,1,1,4: every 4th worker is 4× slower)")
	f.StringVar(&paradigms, "paradigms", "bsp,asp,ssp:3,dssp:3:12,dssp-paper:3:12", "comma-separated policies: bsp, asp, ssp:S, dssp:SL:RMAX[:wait], dssp-paper:SL:RMAX[:wait]")
	f.StringVar(&dist, "dist", "jitter", "compute-time distribution: fixed, jitter (uniform ±spread) or lognormal (sigma = spread)")
	f.DurationVar(&compute, "compute", 100*time.Millisecond, "mean compute time of a speed-1 worker")
	f.Float64Var(&spread, "spread", 0.1, "relative jitter half-width, or lognormal sigma")
	f.DurationVar(&latency, "latency", 0, "push round-trip latency")
	f.Float64Var(&stragProb, "straggler-prob", 0, "per-iteration probability that a worker becomes a transient straggler")
	f.Float64Var(&stragFact, "straggler-factor", 4, "slow-down of a transient straggler")
	f.IntVar(&stragIters, "straggler-iters", 10, "iterations a transient straggle lasts")
	f.Uint64Var(&seed, "seed", 1, "random seed")
	f.IntVar(&parallel, "parallel", runtime.GOMAXPROCS(0), "paradigms simulated at a time")
	f.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the simulation to this file")
	f.BoolVar(&balanced, "balance", false, "run each paradigm without and with the balance layer (per-worker batch sizing) and report utilisation = samples/(time·Σ speeds)")
	f.Int64Var(&batch, "batch", 64, "with --balance: the base batch per worker, whose compute time is --compute")
	f.DurationVar(&overhead, "overhead", 0, "with --balance: per-step time that does not grow with the batch")
	f.IntVar(&localSteps, "local-steps", 1, "with --balance: local steps H a round (each push a round of H steps at --batch, --latency paid once a round); +balance then sizes each worker's steps to its speed (Dynamic Local Updates)")
	return cmd
}

func parseSpeeds(s string) ([]float64, error) {
	out, err := node.ParseFloats("speeds", s)
	for _, v := range out {
		if err == nil && !(v > 0) {
			err = fmt.Errorf("--speeds: %v is not a positive number", v)
		}
	}
	return out, err
}

func parseParadigms(s string) ([]clock.Policy, error) {
	var out []clock.Policy
	for _, part := range strings.Split(s, ",") {
		p, err := clock.ParsePolicy(part)
		if err != nil {
			return nil, fmt.Errorf("--paradigms: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// simRun is one paradigm's simulation and its own wall time.
type simRun struct {
	res  sim.Result
	err  error
	wall time.Duration
}

// runParadigms simulates cfg under each policy, up to parallel at a time
// (each run is independent and deterministic), and returns the runs in the
// policies' order.
func runParadigms(cfg sim.Config, policies []clock.Policy, parallel int) []simRun {
	runs := make([]simRun, len(policies))
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for i, p := range policies {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			start := time.Now()
			runs[i].res, runs[i].err = sim.Run(cfg, p)
			runs[i].wall = time.Since(start)
		})
	}
	wg.Wait()
	return runs
}

// startCPUProfile writes a CPU profile to path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
