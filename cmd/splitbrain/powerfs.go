package main

import (
	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/internal/powerfs"
)

// newPowerfsCmd is the power-loss fault's node side (internal/powerfs's
// Main): `splitbrain powerfs exec --dir D -- CMD`, the entry of a node of a
// run with --nemesis power-loss (a FUSE filesystem over each state
// directory, then CMD as the node's main process), and `splitbrain powerfs
// cut`, which the fault runs inside the node. It keeps powerfs's own
// syntax and exit codes (0 ok, 1 failure, 2 usage, 3 no FUSE).
func newPowerfsCmd(_ *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:                "powerfs <exec|serve|stats|cut> [flags]",
		Short:              "The power-loss fault's filesystem inside a node ('powerfs help' for usage)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := powerfs.Main(cmd.Context(), args, cmd.OutOrStdout(), cmd.ErrOrStderr()); code != powerfs.ExitOK {
				// powerfs printed its one-line error.
				return &exitError{code: code}
			}
			return nil
		},
	}
}
