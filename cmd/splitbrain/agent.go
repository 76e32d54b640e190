package main

import (
	"io"
	"os"
	goruntime "runtime"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets/external"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

func newAgentCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:    "agent",
		Short:  "Client agent: speaks the harness protocol on its console, stdio or the runtime's socket (runs inside client nodes)",
		Hidden: true,
		Args:   exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(os.Stderr)
			if err != nil {
				return err
			}
			// The agent runs one operation at a time: on one P its
			// goroutines hand over to each other without waking a second
			// thread, which on a busy machine costs more than the work
			// itself (docs/performance.md, "Recording overhead"). An
			// explicit GOMAXPROCS in the environment wins.
			if os.Getenv("GOMAXPROCS") == "" {
				goruntime.GOMAXPROCS(1)
			}
			deps := agent.Deps{Lockers: external.Lockers(), Log: log.With("component", "agent")}
			return runtime.ServeConsole(cmd.Context(), func(in io.Reader, out io.Writer) error {
				return agent.Serve(cmd.Context(), in, out, deps)
			})
		},
	}
}
