package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newSimCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "sim",
		Short: "Simulate N workers through the synchronization paradigms",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("sim: not built yet")
		},
	}
}
