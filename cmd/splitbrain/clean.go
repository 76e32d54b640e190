package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/runtime/docker"
)

func newCleanCmd(g *globalFlags) *cobra.Command {
	var (
		runID string
		sf    sshFlags
	)
	cmd := &cobra.Command{
		Use:   "clean",
		Short: "Remove containers and networks left by earlier runs (found by their labels)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sf.enabled() {
				log, err := g.logger(cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				return sshClean(cmd.Context(), &sf, runID, log)
			}
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
	sf.register(cmd)
	return cmd
}
