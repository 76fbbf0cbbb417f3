package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"dsspmesh/mesh"
	"dsspmesh/node/trust"
	"dsspmesh/nodeclient"
)

func newRevokeCmd() *cobra.Command {
	var addr, keyFile string
	cmd := &cobra.Command{
		Use:   "revoke --node HOST:PORT --key FILE NODE-ID",
		Short: "Revoke a node id: every node refuses its connections, gossip and pushes from then on",
		Long: `Revoke NODE-ID through the node at --node (its HTTP address; any node but the
one revoked). The request is authenticated by the mesh key (--key): whoever
holds it is the mesh's operator.
The node refuses NODE-ID at once and asks every shard's group to apply the
revocation; every node that hosts a replica then refuses the id too (QUIC
handshakes, gossip, pushes and add-workers), its worker leaves every shard's
clock table, and the revocation survives restarts. /status, the dashboard and
dssp status list it. A revocation is never undone: the revoked host rejoins
only under a fresh data dir (a new id), and a host that must not rejoin at all
needs a new mesh key on every other node.`,
		Example: "  dssp revoke --node 127.0.0.1:7948 --key mesh.key node-k5xq3bq2vd6m4c7r2xg3hzjv5e",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := mesh.NodeID(args[0])
			if err := id.Validate(); err != nil {
				return fmt.Errorf("NODE-ID: %w", err)
			}
			key, err := mesh.LoadKeyFile(keyFile)
			if err != nil {
				return fmt.Errorf("--key: %w", err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			res, err := nodeclient.Revoke(ctx, addr, string(id), key.OperatorMAC(trust.RevokeOp, string(id)), time.Minute)
			if err != nil {
				return fmt.Errorf("revoke: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %s: applied by %d of %d shards\n", res.ID, res.Done, res.Shards)
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "node", "127.0.0.1:7948", "HTTP address of any node of the mesh")
	cmd.Flags().StringVar(&keyFile, "key", "", "the mesh key file (dssp keygen); it authenticates the request")
	cmd.MarkFlagRequired("key")
	return cmd
}
