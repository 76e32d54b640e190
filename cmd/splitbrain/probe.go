package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/targets/etcd"
)

func newProbeCmd(_ *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:    "probe",
		Short:  "Ask a backend member for its status (runs inside nodes)",
		Hidden: true,
	}
	var endpoint string
	ec := &cobra.Command{
		Use:  "etcd",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
			defer cancel()
			s, err := etcd.Probe(ctx, endpoint)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(s)
		},
	}
	ec.Flags().StringVar(&endpoint, "endpoint", "127.0.0.1:2379", "member client endpoint")
	cmd.AddCommand(ec)
	return cmd
}
