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
	)
	cmd := &cobra.Command{
		Use:   "check DIR|HISTORY",
		Short: "Re-check a stored history offline (a run directory or a history.jsonl) and write report.html beside it",
		Long: "Re-check a stored history through the same checks a run ends with, print the verdict and the first anomaly\n" +
			"in plain words, and write report.html beside the history. A history from another tool can be checked too:\n" +
			"docs/history-format.md describes the format. Exit 0 valid, 1 invalid, 2 unknown (never a pass: e.g. nothing\n" +
			"was tested), 254 a missing, empty or malformed history (the line and the field are named).",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, events, err := harness.Recheck(cmd.Context(), args[0], timeout)
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
			} else if err := report.WriteVerdict(cmd.OutOrStdout(), res, events); err != nil {
				return err
			}
			if !noReport {
				if err := report.WriteRun(dir, res, events); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "splitbrain: report.html not written: %v\n", err)
				} else if !asJSON {
					fmt.Fprintf(cmd.OutOrStdout(), "report: %s\n", filepath.Join(dir, report.ReportFile))
				}
			}
			return &exitError{code: verdictCode(res.Valid)}
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "bound on the linearizability check (past it: unknown)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the re-check's results (as results.json has them) instead of words")
	cmd.Flags().BoolVar(&noReport, "no-report", false, "do not write report.html beside the history")
	return cmd
}
