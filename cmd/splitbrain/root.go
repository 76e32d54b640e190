package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/report"
)

// Exit codes.
const (
	exitValid    = 0
	exitInvalid  = 1
	exitUnknown  = 2
	exitBadInput = 254
	exitHarness  = 255
)

// exitError carries an exit code up to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// verdictError ends a command with the exit code of a verdict, without a
// message (the verdict was printed).
func verdictCode(v checkers.Verdict) int {
	switch v {
	case checkers.Valid:
		return exitValid
	case checkers.Invalid:
		return exitInvalid
	default:
		return exitUnknown
	}
}

// resultsExit ends a run or a check with its verdict's exit code; a run
// left not tested because a requested fault never landed (unknown, see
// [harness.Results.NotTestedLine]) says so in one line.
func resultsExit(r *harness.Results) error {
	if line := r.NotTestedLine(); line != "" && r.Valid == checkers.Unknown && !r.Config.FaultsOptional {
		return &exitError{code: exitUnknown, err: errors.New(line)}
	}
	return &exitError{code: verdictCode(r.Valid)}
}

// execute runs the CLI and returns the process exit code. Errors are
// printed as one line, never a stack trace.
func execute(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	if err := findCommand(root, args); err != nil {
		fmt.Fprintf(stderr, "splitbrain: %s (see --help)\n", oneLine(err))
		return exitBadInput
	}
	err := root.ExecuteContext(context.Background())
	if err == nil {
		return exitValid
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintf(stderr, "splitbrain: %s\n", oneLine(ee.err))
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "splitbrain: %s\n", oneLine(err))
	if harness.IsBadInput(err) || isUsageError(err) {
		return exitBadInput
	}
	return exitHarness
}

// findCommand refuses an unknown command before anything runs: cobra
// itself would print help and exit 0 for `help bogus` and for an unknown
// subcommand of a command group. The shell-completion requests
// (`__complete …`, made by the scripts `completion` writes) go straight to
// cobra.
func findCommand(root *cobra.Command, args []string) error {
	if len(args) > 0 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd) {
		return nil
	}
	if len(args) > 0 && args[0] == "help" {
		args = args[1:]
	}
	_, _, err := root.Find(args)
	return err
}

func oneLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	return s
}

// usageError marks errors from parsing the command line.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() + " (see --help)" }
func (e *usageError) Unwrap() error { return e.err }

func isUsageError(err error) bool {
	var ue *usageError
	return errors.As(err, &ue)
}

type globalFlags struct {
	logLevel string
	// control is the console channel of client containers (docker.Options.Control).
	control string
}

func (g *globalFlags) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, &usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})), nil
}

// runLogger is the logger of a command that shows a progress line on a
// terminal (run): there, unless --log-level was given, only warnings and
// errors share the terminal with the line; the rest goes to the run's
// harness.log alone.
func (g *globalFlags) runLogger(cmd *cobra.Command, w io.Writer) (*slog.Logger, error) {
	if report.IsTerminal(w) && !cmd.Flags().Changed("log-level") {
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})), nil
	}
	return g.logger(w)
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "splitbrain",
		Short:         "Fault-injection harness for distributed lock backends",
		Long:          "splitbrain brings up lock backends in containers, drives clients that take a lock and write a\nprotected counter, injects pauses and other faults, and checks the history with Porcupine.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().StringVar(&g.control, "control", "auto", "how the harness talks to client containers: socket (a Unix socket bind-mounted from the host, the engine out of the path), attach (the containers' stdio through the engine), auto (socket with a local engine, attach inside a container)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	cmds := []*cobra.Command{
		newRunCmd(g),
		newCheckCmd(g),
		newImagesCmd(g),
		newCleanCmd(g),
		newAgentCmd(g),
		newStoreCmd(g),
		newProbeCmd(g),
		newScenariosCmd(g),
		newMatrixCmd(g),
		newValidateCmd(g),
		newMergeCmd(g),
		newClockCmd(g),
		newPowerfsCmd(g),
		newServeCmd(g),
		newBenchLoopCmd(g),
		newClientCheckCmd(g),
		newAdapterCmd(g),
		newReferenceCmd(g),
	}
	root.AddCommand(cmds...)
	root.AddCommand(newProgramCmds(g, cmds)...)
	// help and completion exist before Execute, so that Find (and the
	// generated reference) sees them as cobra's Execute would.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every command group (a command with
// subcommands and nothing to run itself, like `images`) print its help when
// called alone and refuse anything else with a usage error, instead of
// cobra's help and exit 0 for `images bogus`.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if c.HasParent() && c.HasSubCommands() && !c.Runnable() {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			var known []string
			for _, s := range cmd.Commands() {
				if s.IsAvailableCommand() {
					known = append(known, s.Name())
				}
			}
			return &usageError{fmt.Errorf("unknown command %q for %q (known: %s)", args[0], cmd.CommandPath(), strings.Join(known, ", "))}
		}
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
}

// exactArgs is cobra.ExactArgs with a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return &usageError{err}
		}
		return nil
	}
}
