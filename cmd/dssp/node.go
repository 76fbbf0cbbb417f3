package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newNodeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "node",
		Short: "not built yet",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("node: not built yet")
		},
	}
}
