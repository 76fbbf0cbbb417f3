package cli

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"dsspmesh/cmd/dssp/upcmd"
	"dsspmesh/lab/netlab"
	"dsspmesh/node/launch"
)

// NewUpCmd is `dssp-lab up`: the product's `dssp up` (package upcmd) with
// --link, which puts the nodes on the link lab (root; lab/netlab).
func NewUpCmd() *cobra.Command {
	var link string
	cmd := upcmd.New(func(ctx context.Context, cmd *cobra.Command, cfg *launch.Config, log *slog.Logger) (func(), error) {
		if link == "" {
			return func() {}, nil
		}
		spec, err := netlab.ParseSpec(link)
		if err != nil {
			return nil, err
		}
		if !cmd.Flags().Changed("nodes") {
			cfg.Nodes = spec.Nodes()
		}
		if cfg.Nodes != spec.Nodes() {
			return nil, fmt.Errorf("up: --link %s has %d hosts for --nodes %d (one host a node)", link, spec.Nodes(), cfg.Nodes)
		}
		lab, err := netlab.Start(ctx, spec, log)
		if err != nil {
			return nil, err
		}
		cfg.Hosts = lab.LaunchHosts()
		fmt.Fprintf(cmd.OutOrStdout(), "link lab: %s\n", spec.Describe())
		return func() { lab.Close() }, nil
	})
	cmd.Short = "dssp up, and with --link (root) on the link lab: each node in a network namespace, on shaped links"
	cmd.Long += `

With --link (root) the nodes run on the link lab instead of loopback: each in
a network namespace of its own, joined by shaped links (lab/README.md).`
	cmd.Example = `  sudo dssp-lab up --link two-sites --local-steps 16
  sudo dssp-lab up --link two-sites,delay=50ms --target-acc 0.95`
	cmd.Flags().StringVar(&link, "link", "", "run the nodes on the link lab (root): each in a network namespace, on a topology with finite links — two-sites (2 × 2 hosts, 1gbit within, 100mbit and 25ms one way between), switch (4 hosts at 100mbit), or keys sites, hosts, rate, between, delay, loss, queue over a preset; --nodes defaults to its hosts")
	return cmd
}
