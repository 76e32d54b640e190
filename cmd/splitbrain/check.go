package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/report"
)

func newCheckCmd(_ *globalFlags) *cobra.Command {
	var (
		timeout  time.Duration
		asJSON   bool
		noReport bool
		memory   int64
	)
	cmd := &cobra.Command{
		Use:   "check DIR|HISTORY",
		Short: "Re-check a stored history offline (a run directory or a history.jsonl) and write report.html beside it",
		Long: "Re-check a stored history through the same checks a run ends with, print the verdict and the first anomaly\n" +
			"in plain words, and write report.html beside the history. A history from another tool can be checked too:\n" +
			"docs/history-format.md describes the format. Exit 0 valid, 1 invalid, 2 unknown (never a pass: e.g. nothing\n" +
			"was tested), 254 a missing, empty or malformed history (the line and the field are named), 255 a history too big\n" +
			"for the memory at hand (one line says how much it needs).",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return &usageError{fmt.Errorf("--timeout must be positive, got %v (e.g. 1m)", timeout)}
			}
			if memory < 0 || (memory == 0 && cmd.Flags().Changed("memory-mib")) {
				return &usageError{fmt.Errorf("--memory-mib must be a positive number of MiB, got %d (leave it out for 90%% of the available memory)", memory)}
			}
			if err := harness.PlanCheckMemory(harness.HistoryPath(args[0]), memory); err != nil {
				return err
			}
			res, rc, err := harness.RecheckInput(cmd.Context(), args[0], timeout)
			if err != nil {
				return err
			}
			if res.History.TornTail {
				fmt.Fprintf(cmd.ErrOrStderr(), "splitbrain: %s: dropped a torn last line (%d bytes), as after a crash\n", args[0], res.History.TornBytes)
			}
			dir := filepath.Dir(harness.HistoryPath(args[0]))
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(res); err != nil {
					return err
				}
			}
			// The verdict and the page share one explanation (the
			// explainer is most of the cost of each); the verdict alone
			// verifies one window, not the page's 50.
			var x *report.Explained
			if !noReport {
				x = report.ExplainRun(res, rc.Input)
			}
			switch {
			case asJSON:
			case x != nil:
				err = x.WriteVerdict(cmd.OutOrStdout())
			default:
				err = report.WriteVerdictInput(cmd.OutOrStdout(), res, rc.Input)
			}
			if err != nil {
				return err
			}
			if x != nil {
				if err := x.WriteRun(dir); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "splitbrain: report.html not written: %v\n", err)
				} else if !asJSON {
					fmt.Fprintf(cmd.OutOrStdout(), "report: %s\n", filepath.Join(dir, report.ReportFile))
				}
			}
			return resultsExit(res)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "bound on the linearizability check (past it: unknown)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the re-check's results (as results.json has them) instead of words")
	cmd.Flags().BoolVar(&noReport, "no-report", false, "do not write report.html beside the history")
	cmd.Flags().Int64Var(&memory, "memory-mib", 0, "memory the check may use, in MiB (default: 90% of the machine's available memory); a history that needs more is refused (exit 255)")
	return cmd
}
