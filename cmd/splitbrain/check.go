package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/history"
)

func newCheckCmd(_ *globalFlags) *cobra.Command {
	var (
		timeout time.Duration
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "check DIR|HISTORY",
		Short: "Re-check a stored history offline (a run directory or a history.jsonl)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			if st, err := os.Stat(path); err == nil && st.IsDir() {
				path = filepath.Join(path, "history.jsonl")
			}
			ttl := leaseTTL(filepath.Join(filepath.Dir(path), "results.json"))
			events, rep, err := history.ReadFile(path)
			switch {
			case errors.Is(err, os.ErrNotExist):
				return harness.BadInput("no history at %s (give a run directory or a history.jsonl)", path)
			case errors.Is(err, history.ErrCorrupt):
				return harness.BadInput("%s: %v (the file is damaged beyond its last line)", path, err)
			case err != nil:
				return harness.BadInput("%s: %v", path, err)
			}
			if rep.TornTail {
				fmt.Fprintf(cmd.ErrOrStderr(), "splitbrain: %s: dropped a torn last line (%d bytes), as after a crash\n", path, rep.TornBytes)
			}
			in := checkers.NewInput(events)
			report := checkers.Check(context.Background(), in, checkers.ForRun(checkers.LinearizableOptions{Timeout: timeout}, ttl)...)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(struct {
					checkers.Report
					History history.ReadReport `json:"history"`
				}{report, rep}); err != nil {
					return err
				}
			} else {
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "valid: %s (%d events)\n", report.Valid, rep.Events)
				for _, name := range []string{"linearizable", "summary", "mutex", "fencing", "liveness"} {
					r := report.Checkers[name]
					b, _ := json.Marshal(r.Details)
					fmt.Fprintf(w, "%s: %s %s\n", name, r.Verdict, b)
				}
			}
			return &exitError{code: verdictCode(report.Valid)}
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "bound on the linearizability check (past it: unknown)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the full report as JSON")
	return cmd
}

// leaseTTL reads the lease TTL from a run's results.json, zero when there
// is none (the early-overlap count then stays unknown).
func leaseTTL(path string) time.Duration {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var r struct {
		Options struct {
			LeaseTTL time.Duration `json:"lease_ttl_ns"`
		} `json:"options"`
	}
	if json.Unmarshal(b, &r) != nil {
		return 0
	}
	return r.Options.LeaseTTL
}
