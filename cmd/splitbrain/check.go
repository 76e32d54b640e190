package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
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
			if err := planCheckMemory(harness.HistoryPath(args[0]), memory); err != nil {
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
			return &exitError{code: verdictCode(res.Valid)}
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "bound on the linearizability check (past it: unknown)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the re-check's results (as results.json has them) instead of words")
	cmd.Flags().BoolVar(&noReport, "no-report", false, "do not write report.html beside the history")
	cmd.Flags().Int64Var(&memory, "memory-mib", 0, "memory the check may use, in MiB (default: 90% of the machine's available memory); a history that needs more is refused (exit 255)")
	return cmd
}

// checkBytesPerHistoryByte estimates the check's peak memory from the
// history's size: the decoded events (288-byte structs, about 1.6× the
// text of a typical line), the operations, the checkers' compact per-key
// forms, and the report. docs/performance.md has the measurements.
const checkBytesPerHistoryByte = 2.5

// checkMemoryLimitPerHistoryByte sets the Go memory limit of a check.
const checkMemoryLimitPerHistoryByte = 2.7

// planCheckMemory refuses a history whose check would not fit in the
// memory at hand (budgetMiB, or 90% of MemAvailable), with one line and exit
// 255 instead of a Go runtime out-of-memory trace, and sets the Go memory
// limit (unless GOMEMLIMIT is set) to 2.7× the history's size within the
// budget, so that the collector keeps the peak near the live data.
func planCheckMemory(path string, budgetMiB int64) error {
	st, err := os.Stat(path)
	if err != nil {
		return nil // Recheck names the problem
	}
	size := st.Size()
	budget := budgetMiB << 20
	if budget <= 0 {
		budget = int64(float64(memAvailable()) * 0.9)
	}
	need := int64(float64(size)*checkBytesPerHistoryByte) + 64<<20
	if budget > 0 && need > budget {
		return fmt.Errorf("%s: checking this %d MiB history needs about %d MiB, more than the %d MiB at hand; check it on a machine with more memory (or give --memory-mib)",
			path, size>>20, need>>20, budget>>20)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// The peak follows the limit (the collector lets garbage grow up
		// to it): 2.7× leaves room under the 3× goal for what the runtime
		// holds outside the heap.
		limit := max(int64(checkMemoryLimitPerHistoryByte*float64(size)), 64<<20)
		if budget > 0 {
			limit = min(limit, budget)
		}
		debug.SetMemoryLimit(limit)
	}
	return nil
}

// memAvailable is the kernel's estimate of the memory available without
// swapping (MemAvailable in /proc/meminfo), 0 when unknown.
func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemAvailable:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n << 10
		}
	}
	return 0
}
