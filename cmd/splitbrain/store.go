package main

import (
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/targets/store"
)

func newStoreCmd(g *globalFlags) *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:    "store",
		Short:  "Counter store server (runs inside the store node)",
		Hidden: true,
		Args:   exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return store.Serve(ctx, listen, log)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", ":7000", "address to listen on")
	return cmd
}
