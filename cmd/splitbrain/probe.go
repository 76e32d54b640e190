package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/targets"
)

// newProbeCmd is `splitbrain probe <backend>`, one subcommand per
// registered backend with a health probe (targets.Backend.Probe): the
// backend's Target runs it inside its nodes.
func newProbeCmd(_ *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:    "probe",
		Short:  "Ask a backend member for its status (runs inside nodes)",
		Hidden: true,
	}
	for _, b := range targets.Backends() {
		if b.Probe == nil {
			continue
		}
		probe := b.Probe
		var endpoint string
		sub := &cobra.Command{
			Use:   b.Name,
			Short: "Print the status of the " + b.Name + " member at --endpoint as JSON",
			Args:  exactArgs(0),
			RunE: func(cmd *cobra.Command, _ []string) error {
				ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
				defer cancel()
				s, err := probe.Run(ctx, endpoint)
				if err != nil {
					return err
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(s)
			},
		}
		sub.Flags().StringVar(&endpoint, "endpoint", probe.Endpoint, "the member's endpoint")
		cmd.AddCommand(sub)
	}
	return cmd
}
