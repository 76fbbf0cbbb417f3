package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"dsspmesh/node/launch"
)

func newStatusCmd() *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:     "status --node HOST:PORT",
		Short:   "Print a node's view of the mesh: members, shards, worker clocks, accuracy",
		Example: "  dssp status --node 127.0.0.1:7948",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
			defer cancel()
			s, err := launch.FetchStatus(ctx, addr)
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "node %s (%s)  policy %s  gossip %s  quic %s  evaluator %s\n", s.Node, s.Phase, s.Policy, s.Gossip, s.QUIC, s.Evaluator)
			if s.Eval != nil {
				fmt.Fprintf(out, "test accuracy %.2f%%  loss %.4f  (%d samples, by %s, %s ago)\n",
					100*s.Eval.Accuracy, s.Eval.Loss, s.Eval.Samples, s.Eval.By, s.Now.Sub(s.Eval.At).Round(time.Second))
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "\nMEMBER\tGOSSIP\tQUIC\tTRAINS\tBACKEND")
			for _, m := range s.Members {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\n", m.ID, m.Gossip, m.QUIC, m.Trains, m.Backend)
			}
			fmt.Fprintln(tw, "\nSHARD\tLEADER\tTERM\tPLACEMENT\tHERE\tPUSHES")
			for _, sh := range s.Shards {
				fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%d\n", sh.ID, dash(sh.Leader), sh.Term, strings.Join(sh.Placement, ","), dash(sh.Local), sh.Pushes)
			}
			fmt.Fprintln(tw, "\nWORKER\tCLOCK\tGAP\tGRANT\tWAITING")
			for _, w := range s.Workers {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%v\n", w.ID, w.Clock, w.Gap, w.Grant, w.Waiting)
			}
			if w := s.Worker; w != nil {
				fmt.Fprintf(tw, "\nTHIS WORKER\titer %d\t%.2f it/s\tcompute %.1fs\twait %.1fs\tretries %d\n", w.Iter, w.ItersPerSec, w.ComputeSeconds, w.WaitSeconds, w.Retries)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&addr, "node", "127.0.0.1:7948", "HTTP address of any node (its --http-addr)")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
