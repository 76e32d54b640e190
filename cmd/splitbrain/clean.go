package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/harness/runtime/docker"
)

func newCleanCmd(_ *globalFlags) *cobra.Command {
	var runID string
	cmd := &cobra.Command{
		Use:   "clean",
		Short: "Remove containers and networks left by earlier runs (found by their labels)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cli, err := docker.Connect(cmd.Context())
			if err != nil {
				return err
			}
			defer cli.Close()
			c, n, err := docker.Clean(cmd.Context(), cli, runID)
			fmt.Fprintf(cmd.OutOrStdout(), "removed %d containers, %d networks\n", c, n)
			return err
		},
	}
	cmd.Flags().StringVar(&runID, "run", "", "only this run's (default: every splitbrain run's)")
	return cmd
}
