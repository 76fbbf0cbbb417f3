package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newUpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "up",
		Short: "Start a local mesh of real node processes on loopback and train MNIST",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("up: not built yet: the node (issue 6) does not exist; try 'dssp sim' meanwhile")
		},
	}
}
