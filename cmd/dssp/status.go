package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newStatusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "not built yet",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("status: not built yet")
		},
	}
}
