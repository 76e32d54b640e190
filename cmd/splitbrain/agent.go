package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/targets/catalog"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

func newAgentCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:    "agent",
		Short:  "Client agent: speaks the harness protocol on stdin/stdout (runs inside client nodes)",
		Hidden: true,
		Args:   exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(os.Stderr)
			if err != nil {
				return err
			}
			return agent.Serve(cmd.Context(), os.Stdin, os.Stdout, agent.Deps{Lockers: catalog.Lockers(), Log: log.With("component", "agent")})
		},
	}
}
