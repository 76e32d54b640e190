package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/targets/etcd"
	"github.com/splitbrain/splitbrain/targets/lockd"
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
	var lockdEndpoint string
	lc := &cobra.Command{
		Use:  "lockd",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
			defer cancel()
			s, err := lockd.Probe(ctx, lockdEndpoint)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(s)
		},
	}
	lc.Flags().StringVar(&lockdEndpoint, "endpoint", "127.0.0.1:7002", "node HTTP endpoint")
	cmd.AddCommand(ec, lc)
	return cmd
}
