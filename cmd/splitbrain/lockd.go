package main

import (
	"errors"
	"flag"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/targets/lockd/server"
)

// newLockdCmd is the lockd server, run as PID 1 of a lockd node: it
// handles SIGTERM and SIGINT itself (PID 1 gets no default signal actions)
// and shuts down cleanly on either.
func newLockdCmd(g *globalFlags) *cobra.Command {
	cfg := server.DefaultConfig()
	cmd := &cobra.Command{
		Use:    "lockd",
		Short:  "lockd lock-service node (runs inside lockd nodes)",
		Hidden: true,
		Args:   exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				// One line: Validate puts each problem on its own.
				return &usageError{errors.New(strings.NewReplacer(":\n", ": ", "\n", "; ").Replace(err.Error()))}
			}
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return server.Run(ctx, cfg, log)
		},
	}
	fs := flag.NewFlagSet("lockd", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	cmd.Flags().AddGoFlagSet(fs)
	return cmd
}
