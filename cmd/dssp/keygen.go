package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"dsspmesh/mesh"
)

func newKeygenCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "keygen --out FILE",
		Short: "Write a new random mesh key (32 bytes, mode 0600)",
		Long: `Write a new random mesh key. Every node of one mesh is started with a copy
of the same key file: gossip encryption and the mesh certificate authority are
derived from it, so a node without it can neither gossip nor connect.
An existing file is never overwritten.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("keygen: --out FILE is required")
			}
			if err := mesh.WriteKeyFile(out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote mesh key to %s (mode 0600); copy it to every node of the mesh\n", out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write the key to (must not exist)")
	return cmd
}
