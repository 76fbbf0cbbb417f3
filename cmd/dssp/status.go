package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"dsspmesh/nodeclient"
)

func newStatusCmd() *cobra.Command {
	var addr string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status --node HOST:PORT",
		Short: "Print the mesh as any node sees it: members, every shard's leader, worker clocks, accuracy, events",
		Long: `Print the mesh as the node at --node sees it. Any node describes every shard:
those it hosts from its own replica, the others from the freshest answer of a
member that hosts one (the VIA column names it, AGE says how old the answer is).
MEMBER lists each member's HTTP address (what --node takes) as the member
last answered it ("-" until it has), how many shards it leads, and this node's
least measured round trip to it (its QUIC connections'; "-" before one measured it).`,
		Example: "  dssp status --node 127.0.0.1:7948\n  dssp status --node 127.0.0.1:7948 --json | jq '.shards[] | {id, leader, term}'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
			defer cancel()
			s, err := nodeclient.FetchStatus(ctx, addr)
			if err != nil {
				return fmt.Errorf("status: %w", err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(s)
			}
			fmt.Fprintf(out, "node %s (%s)  policy %s  gossip %s  quic %s  evaluator %s\n", s.Node, role(s.Phase), s.Policy, s.Gossip, s.QUIC, s.Evaluator)
			if s.Stopped != "" {
				fmt.Fprintf(out, "STOPPED: %s\n", s.Stopped)
			}
			if s.Eval != nil {
				fmt.Fprintf(out, "test accuracy %.2f%%  loss %.4f  (%d samples, by %s, %s ago)\n",
					100*s.Eval.Accuracy, s.Eval.Loss, s.Eval.Samples, s.Eval.By, s.Now.Sub(s.Eval.At).Round(time.Second))
			}
			if t := s.Trainer; t != nil {
				fmt.Fprintf(out, "trainer socket %s: ", t.Socket)
				if t.Attached {
					fmt.Fprintf(out, "attached (pid %d), %d updates; bridge per iteration: %.0f bytes copied in %.0f µs, round trip %.0f µs (trainer's own %.0f µs)\n",
						t.PID, t.Iterations, t.BytesCopiedPerIter, t.CopyMicros, t.RoundTripMicros, t.TrainerMicros)
				} else {
					fmt.Fprintf(out, "no trainer attached (%d so far)\n", t.Attachments)
				}
				if t.Waiting != "" {
					fmt.Fprintf(out, "waiting for a trainer: %s\n", t.Waiting)
				}
			}
			if s.Checkpoint != "" {
				fmt.Fprintf(out, "newest checkpoint here: %s\n", s.Checkpoint)
			}
			for _, w := range s.Warnings { // a lost quorum, a mesh smaller than the replication
				fmt.Fprintf(out, "WARNING: %s\n", w)
			}
			if len(s.Revoked) > 0 {
				fmt.Fprintf(out, "revoked: %s\n", strings.Join(s.Revoked, ", "))
			}
			if len(s.IdentityConflicts) > 0 {
				fmt.Fprintf(out, "WARNING: node ids pinned to two keys, refused until revoked: %s\n", strings.Join(s.IdentityConflicts, ", "))
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "\nMEMBER\tGOSSIP\tQUIC\tHTTP\tTRAINS\tBACKEND\tLEADS\tRTT")
			for _, m := range s.Members {
				rtt := "-"
				if m.RTTMs != nil {
					rtt = fmt.Sprintf("%.1fms", *m.RTTMs)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\t%d\t%s\n", m.ID, m.Gossip, m.QUIC, dash(m.HTTP), m.Trains, m.Backend, m.Leads, rtt)
			}
			fmt.Fprintln(tw, "\nSHARD\tLEADER\tTERM\tVOTERS\tHERE\tVIA\tAGE\tPUSHES")
			for _, sh := range s.Shards {
				fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%d\n", sh.ID, dash(sh.Leader), sh.Term, dash(strings.Join(sh.Voters, ",")),
					dash(sh.Local), dash(sh.From), age(sh.From, sh.AgeSeconds), sh.Pushes)
			}
			fmt.Fprintf(tw, "\nWORKER\tCLOCK ON SHARDS\tGAP\tGRANT\tWAITING\t(via %s, %s)\n", dash(s.WorkersFrom), age(s.WorkersFrom, s.WorkersAgeSeconds))
			for _, w := range s.Workers {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%v\n", w.ID, w.Clock, w.Gap, w.Grant, w.Waiting)
			}
			if w := s.Worker; w != nil {
				fmt.Fprintf(tw, "\nTHIS WORKER\tcomputed %d\t%.2f it/s\tcompute %.1fs\twait %.1fs\tretries %d\n", w.Iter, w.ItersPerSec, w.ComputeSeconds, w.WaitSeconds, w.Retries)
			}
			fmt.Fprintln(tw, "\nTRAINER\tCOMPUTED\tIT/S\tWAIT SHARE\tLOSS\tAGE")
			for _, t := range s.Trainers {
				fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.1f%%\t%.4f\t%s\n", t.ID, t.Iter, t.ItersPerSec, 100*t.WaitShare, t.Loss, age("x", t.AgeSeconds))
			}
			if len(s.Workers) > 0 || len(s.Trainers) > 0 {
				fmt.Fprintln(tw, iterationsNote)
			}
			const recent = 15
			fmt.Fprintf(tw, "\nEVENT (last %d)\tKIND\tNODE\tDETAIL\n", recent)
			for _, e := range s.Events[max(0, len(s.Events)-recent):] {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.At.Local().Format("15:04:05.000"), e.Kind, dash(e.Node), e.Detail)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&addr, "node", "127.0.0.1:7948", "HTTP address of any node (its --http-addr)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the node's /status JSON as is")
	return cmd
}

// iterationsNote says why a worker's two iteration counts differ.
const iterationsNote = "\nCLOCK ON SHARDS is a worker's iteration in the shards' clock table: a worker that joins late or\n" +
	"rejoins starts there at a clock the shards give it (the mesh's slowest), not at 0. COMPUTED counts\n" +
	"the iterations its worker loop computed since its process started."

// role is the phase as the header says it: a node that does not train
// (--train=false) is up as "hosting".
func role(phase string) string {
	if phase == "hosting" {
		return "hosting shards, not training"
	}
	return phase
}

// age is how old a peer's answer is; "-" for what this node knows itself.
func age(from string, seconds float64) string {
	if from == "" {
		return "-"
	}
	return (time.Duration(seconds * float64(time.Second))).Round(100 * time.Millisecond).String()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
