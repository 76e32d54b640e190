package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/report"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/docker"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/store"
)

func newRunCmd(g *globalFlags) *cobra.Command {
	cfg := harness.DefaultConfig()
	var recipeOpts, storeOpts []string
	var sf sshFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run one test: bring up a backend, drive clients under faults, check the history",
		Example: "  splitbrain run --target " + cfg.Target + " --workload unfenced-counter --nemesis pause --time-limit 30s\n" +
			"  splitbrain run --target " + cfg.Target + " --workload fenced-counter --nemesis pause --seed 42",
		Long: "Run one test: bring up a backend, drive clients under faults, check the history.\n\nFaults (--nemesis):\n" + faultDocs(),
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.runLogger(cmd, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if cfg.RecipeOptions, err = parseKV(recipeOpts); err != nil {
				return &usageError{err}
			}
			if cfg.StoreOptions, err = parseKV(storeOpts); err != nil {
				return &usageError{err}
			}
			return runTest(cmd.Context(), cfg, &sf, g, log, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Target, "target", cfg.Target, "lock backend: "+strings.Join(targets.Names(), ", "))
	f.StringVar(&cfg.Workload, "workload", cfg.Workload, "workload: unfenced-counter, fenced-counter")
	f.StringVar(&cfg.Nemesis, "nemesis", cfg.Nemesis, "comma-separated faults: "+strings.Join(nemesis.Names(), ", ")+", none")
	f.DurationVar(&cfg.TimeLimit, "time-limit", cfg.TimeLimit, "length of the test phase")
	f.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "number of client agents (one container each)")
	f.IntVar(&cfg.Keys, "keys", cfg.Keys, "number of independent counters (locks)")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", cfg.LeaseTTL, "lock lease time to live")
	f.DurationVar(&cfg.Work, "work", cfg.Work, "time a holder works between its read and its write")
	f.DurationVar(&cfg.NemesisInterval, "nemesis-interval", cfg.NemesisInterval, "mean quiet time between faults")
	f.DurationVar(&cfg.FaultMin, "fault-min", 0, "shortest fault (default: lease TTL + 1s)")
	f.DurationVar(&cfg.FaultMax, "fault-max", 0, "longest fault (default: 2 x lease TTL + 1s)")
	f.BoolVar(&cfg.FaultOverlap, "fault-overlap", false, "give each fault kind its own schedule (--nemesis-interval between one kind's faults), so that faults of different kinds are in force at once and heal in varied orders (by default one fault at a time)")
	cfg.Faults.Flags(f)
	f.BoolVar(&cfg.FaultsOptional, "faults-optional", false, "judge the run even when a requested fault never landed (by default such a run is not tested: exit 2)")
	f.DurationVar(&cfg.AcquireTimeout, "acquire-timeout", cfg.AcquireTimeout, "how long a client waits for a lock")
	f.DurationVar(&cfg.StoreTimeout, "store-timeout", cfg.StoreTimeout, "timeout of each counter-store request")
	f.DurationVar(&cfg.OpTimeout, "op-timeout", cfg.OpTimeout, "how long the harness waits for one operation")
	f.DurationVar(&cfg.CheckTimeout, "check-timeout", cfg.CheckTimeout, "bound on the linearizability check (past it: unknown)")
	f.Uint64Var(&cfg.Seed, "seed", 0, "seed for the fault schedule and client choices (0: random, recorded)")
	f.StringVar(&cfg.ResultsDir, "results", cfg.ResultsDir, "directory for run results")
	f.BoolVar(&cfg.Keep, "keep", false, "leave containers and the network after the run")
	f.StringArrayVar(&recipeOpts, "recipe-opt", nil, "lock recipe option key=value (repeatable); each target's:"+recipeOptionsHelp())
	f.StringVar(&cfg.Bypass, "bypass-clients", "", "clients (c1,c2) that write without lock or token: a bypass writer")
	f.BoolVar(&cfg.Serial, "serial", false, "send a client's next operation only when its previous one is done (by default it is sent ahead when no fault targets lock holders and the agent reads the harness's clock)")
	f.StringVar(&cfg.Client, "client", "", "lock client: a library that serves the target"+clientsHelp()+"\n  or the command line of your own adapter (docs/client-protocol.md), e.g. 'python3 my_lock.py'")
	f.StringVar(&cfg.ClientFiles, "client-files", "", "directory whose files go into the client image, in the adapter's working directory (with --client CMD)")
	f.StringSliceVar(&cfg.ClientPackages, "client-packages", nil, "Debian packages the client image gets for your adapter (with --client CMD)")
	f.StringVar(&cfg.Store, "store", store.Builtin, "counter store: "+storesHelp())
	f.StringArrayVar(&storeOpts, "store-opt", nil, "counter store option key=value (repeatable); each store's:"+storeOptionsHelp())
	sf.register(cmd)
	return cmd
}

// storesHelp lists the registered counter stores.
func storesHelp() string {
	var b strings.Builder
	for _, k := range store.Kinds() {
		fmt.Fprintf(&b, "\n  %s: %s", k.Name, k.Title)
	}
	return b.String()
}

// storeOptionsHelp lists each registered store's --store-opt settings.
func storeOptionsHelp() string {
	var b strings.Builder
	for _, k := range store.Kinds() {
		if len(k.Options) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n  %s:", k.Name)
		for _, o := range k.Options {
			fmt.Fprintf(&b, " %s", o.Usage())
		}
	}
	return b.String()
}

// recipeOptionsHelp lists each registered backend's --recipe-opt
// settings, from their declarations.
func recipeOptionsHelp() string {
	var b strings.Builder
	for _, t := range targets.Backends() {
		opts, err := t.AllOptions()
		if err != nil || len(opts) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n  %s:", t.Name)
		for _, o := range opts {
			fmt.Fprintf(&b, " %s", o.Usage())
		}
	}
	return b.String()
}

// clientsHelp lists each backend's clients, from the registry.
func clientsHelp() string {
	var b strings.Builder
	for _, t := range targets.Backends() {
		fmt.Fprintf(&b, "\n  %s: %s", t.Name, strings.Join(harness.ClientNames(t), ", "))
	}
	return b.String()
}

// faultDocs lists the registered faults, one a line.
func faultDocs() string {
	var b strings.Builder
	width := 0
	for _, k := range nemesis.Kinds() {
		width = max(width, len(k.Name))
	}
	for _, k := range nemesis.Kinds() {
		fmt.Fprintf(&b, "  %-*s %s\n", width, k.Name, k.Doc)
	}
	return b.String()
}

func parseKV(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("option %q: want key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

// interrupts returns a soft context, cancelled by the first SIGINT or
// SIGTERM (finish properly), and a hard one, cancelled by the second (clean
// up now).
func interrupts(parent context.Context, log *slog.Logger) (soft, hard context.Context, stop func()) {
	soft, cancelSoft := context.WithCancel(parent)
	hard, cancelHard := context.WithCancel(context.WithoutCancel(parent))
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case s := <-sigs:
			log.Warn("interrupted: ending the test, healing faults, checking (interrupt again to clean up now)", "signal", s.String())
			cancelSoft()
		case <-hard.Done():
			return
		}
		select {
		case s := <-sigs:
			log.Warn("interrupted again: cleaning up now", "signal", s.String())
			cancelHard()
		case <-hard.Done():
		}
	}()
	return soft, hard, func() { signal.Stop(sigs); cancelSoft(); cancelHard() }
}

// dockerConnect connects to the Docker engine (a test replaces it to
// prove a command does no Docker work).
var dockerConnect = docker.Connect

// dockerDeps wires the harness to the Docker engine.
func (g *globalFlags) dockerDeps(ctx context.Context, log *slog.Logger, progress io.Writer) (harness.Deps, func(), error) {
	if err := docker.CheckControl(g.control); err != nil {
		return harness.Deps{}, nil, &usageError{fmt.Errorf("--control: %w", err)}
	}
	cli, err := dockerConnect(ctx)
	if err != nil {
		return harness.Deps{}, nil, err
	}
	b := images.NewBuilder(cli, log)
	b.Progress = progress
	deps := harness.Deps{
		Images: b.Ensure,
		NewRuntime: func(ctx context.Context, runID string, keep bool, log *slog.Logger) (runtime.Runtime, error) {
			return docker.New(ctx, cli, docker.Options{RunID: runID, Keep: keep, Log: log, Control: g.control})
		},
		Log: log,
	}
	return deps, func() { cli.Close() }, nil
}

func runTest(ctx context.Context, cfg harness.Config, sf *sshFlags, g *globalFlags, log *slog.Logger, stdout, stderr io.Writer) error {
	// Checked once, before anything connects: bad input exits 254 first.
	if err := docker.CheckControl(g.control); err != nil {
		return &usageError{fmt.Errorf("--control: %w", err)}
	}
	if sf.enabled() {
		if _, err := sf.options(); err != nil {
			return err
		}
	}
	plan, err := harness.Prepare(cfg, nil)
	if err != nil {
		return err
	}
	soft, hard, stop := interrupts(ctx, log)
	defer stop()
	var (
		deps      harness.Deps
		closeDeps func()
	)
	if sf.enabled() {
		deps, closeDeps, err = sf.deps(cfg, log, stderr)
	} else {
		deps, closeDeps, err = g.dockerDeps(hard, log, stderr)
	}
	if err != nil {
		return err
	}
	defer closeDeps()
	deps.Hard = hard
	end := withReports(&deps, stderr)
	out, err := plan.Run(soft, deps)
	if out != nil {
		printOutcome(stdout, out, end(), cfg.ResultsDir)
	}
	if err != nil {
		return err
	}
	return resultsExit(out.Results)
}

// withReports makes runs write report.html and, on a terminal, show a
// progress line on stderr. The function it returns gives the finished
// run's explanation (nil when its report could not be made), which its
// report and its last lines share.
func withReports(deps *harness.Deps, stderr io.Writer) func() *report.Explained {
	var x *report.Explained
	deps.Report = func(dir string) error {
		var err error
		if x, err = report.ExplainDir(dir); err != nil {
			return err
		}
		return x.WriteRun(dir)
	}
	if report.IsTerminal(stderr) {
		deps.Watch = func(ctx context.Context, cfg harness.Config, hw *history.Writer) func() {
			return report.Follow(ctx, stderr, cfg.TimeLimit, hw)
		}
	}
	return func() *report.Explained { return x }
}

// printOutcome ends a run: what `splitbrain check` prints of its
// directory (the verdict, the lock's and the data's lines, the first
// anomaly in plain words), then where its report is and how to browse it,
// its seed, and what went wrong in the harness.
func printOutcome(w io.Writer, out *harness.Outcome, x *report.Explained, resultsDir string) {
	r := out.Results
	if x == nil || x.WriteVerdict(w) != nil {
		// No report could be made: the verdict alone, from results.json.
		fmt.Fprintf(w, "verdict: %s\n", r.Valid)
		for _, why := range r.Reasons {
			fmt.Fprintf(w, "  because %s\n", why)
		}
	}
	fmt.Fprintf(w, "report: %s\n", filepath.Join(out.Dir, report.ReportFile))
	fmt.Fprintf(w, "browse: splitbrain serve --results %s (then http://127.0.0.1:8080/)\n", resultsDir)
	fmt.Fprintf(w, "seed: %d (the same faults again: --seed %d); faults: %d\n", r.Seed, r.Seed, len(r.Faults))
	for _, e := range r.Errors {
		fmt.Fprintf(w, "harness error: %s\n", oneLine(fmt.Errorf("%s", e)))
	}
}
