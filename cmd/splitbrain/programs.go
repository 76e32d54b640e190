package main

import (
	"errors"
	"flag"
	"fmt"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/store"
)

// newProgramCmds are the node programs the registered backends and
// counter stores declare (targets.Backend.Programs, store.Kind.Programs), each a hidden command run as PID 1 of a
// node: it handles SIGTERM and SIGINT itself (PID 1 gets no default signal
// actions) and shuts down cleanly on either.
func newProgramCmds(g *globalFlags, taken []*cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	add := func(owner string, p targets.Program) {
		for _, c := range taken {
			if c.Name() == p.Name {
				panic(fmt.Sprintf("%s's program %q is also a splitbrain command", owner, p.Name))
			}
		}
		for _, c := range out {
			if c.Name() == p.Name {
				panic(fmt.Sprintf("%s's program %q is declared twice", owner, p.Name))
			}
		}
		out = append(out, newProgramCmd(g, p))
	}
	for _, b := range targets.Backends() {
		for _, p := range b.Programs {
			add("backend "+b.Name, p)
		}
	}
	for _, k := range store.Kinds() {
		for _, p := range k.Programs {
			add("store "+k.Name, p)
		}
	}
	return out
}

func newProgramCmd(g *globalFlags, p targets.Program) *cobra.Command {
	fs := flag.NewFlagSet(p.Name, flag.ContinueOnError)
	check, run := p.Flags(fs)
	cmd := &cobra.Command{
		Use:    p.Name,
		Short:  p.Short,
		Hidden: true,
		Args:   exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := check(); err != nil {
				// One line, whatever the program's check says.
				return &usageError{errors.New(strings.NewReplacer(":\n", ": ", "\n", "; ").Replace(err.Error()))}
			}
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return run(ctx, log)
		},
	}
	cmd.Flags().AddGoFlagSet(fs)
	return cmd
}
