package main

import (
	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/internal/clockskew"
)

// newClockCmd is the clock helper (internal/clockskew's HelperMain),
// which the clock nemesis execs inside nodes: `splitbrain clock vdso
// inject --pid 1 --realtime +3s`, `splitbrain clock file set --realtime
// +3s`, and so on. It keeps the helper's own syntax and exit codes (0 ok,
// 1 failure, 2 usage, 3 environment or permission).
func newClockCmd(_ *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "clock <vdso|file|shim> <op> [flags]",
		Short: "Skew one process's clock without touching the host's (runs inside nodes; 'clock help' for usage)",
		Long: "Skews the clock of a single process: Go programs by patching their vDSO through ptrace\n" +
			"(vdso inject|set|reset|restore|show|now --pid P), C programs through the LD_PRELOAD shim's\n" +
			"control file (file set|reset|show). The clock nemesis runs it inside nodes; run\n" +
			"'splitbrain clock help' for the full syntax.",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := clockskew.HelperMain(cmd.Context(), args, cmd.OutOrStdout(), cmd.ErrOrStderr()); code != clockskew.ExitOK {
				// The helper printed its one-line error.
				return &exitError{code: code}
			}
			return nil
		},
	}
}
