package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newTrainCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "train",
		Short: "not built yet",
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("train: not built yet")
		},
	}
}
