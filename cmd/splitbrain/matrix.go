package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/report"
	"github.com/splitbrain/splitbrain/scenario"
	"github.com/splitbrain/splitbrain/targets"
)

func newScenariosCmd(_ *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "scenarios",
		Short: "List the scenario catalogue: each anti-pattern and the correct pattern, with the outcome expected",
		Long: "List the scenario catalogue: each scenario with the anti-pattern it reproduces (docs/lock-safety.md), the\n" +
			"targets and clients it runs on, the outcome expected and what it shows; then the lock clients. Lines fit\n" +
			"the terminal (100 columns when the output is not one; COLUMNS overrides).",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			width := outputWidth(w)
			for _, s := range scenario.Catalogue() {
				ap := ""
				switch {
				case s.AntiPattern > 0:
					ap = fmt.Sprintf(" (anti-pattern %d)", s.AntiPattern)
				case s.AntiPattern == scenario.KnownBug:
					ap = " (known bug)"
				}
				fmt.Fprintf(w, "%s%s\n", s.Name, ap)
				writeWrapped(w, "  shows:    ", s.Title, width)
				writeWrapped(w, "  expected: ", describe(s.Expect), width)
				writeWrapped(w, "  runs on:  ", scenarioCells(s), width)
			}
			fmt.Fprintln(w)
			writeWrapped(w, "", "Lock clients (--client NAME; or the command line of your own adapter, docs/your-client.md):", width)
			for _, r := range targets.Recipes() {
				info := r.Info()
				lib, ver := info.Library, info.Version
				if lib == "" {
					lib, ver = "splitbrain's own recipe", ""
				}
				fmt.Fprintf(w, "%s (%s)\n", r.Kind, strings.Join(r.Backends, ", "))
				writeWrapped(w, "  ", fmt.Sprintf("%s %s, %s; token: %s, checked release: %s, renews: %s", lib, ver, info.Language,
					yesNo(info.Fencing), yesNo(info.CheckedRelease), yesNo(info.Renews)), width)
			}
			return nil
		},
	}
}

// outputWidth is the width lines written to w keep within: the
// terminal's, COLUMNS when set, else 100.
func outputWidth(w io.Writer) int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 20 {
		return n
	}
	if n := report.TerminalWidth(w); n > 20 {
		return n
	}
	return 100
}

// writeWrapped writes text after prefix, its words wrapped to width, the
// lines after the first indented as far as the prefix.
func writeWrapped(w io.Writer, prefix, text string, width int) {
	indent := strings.Repeat(" ", utf8.RuneCountInString(prefix))
	line := prefix
	for _, word := range strings.Fields(text) {
		n := utf8.RuneCountInString(line)
		if n > len(indent) && n+1+utf8.RuneCountInString(word) > width {
			fmt.Fprintln(w, line)
			line, n = indent, len(indent)
		}
		if n > len(indent) {
			line += " "
		}
		line += word
	}
	fmt.Fprintln(w, line)
}

// describe says an expectation in a few words.
func describe(e scenario.Expect) string {
	var parts []string
	if e.Valid != nil {
		parts = append(parts, "valid="+e.Valid.String())
	}
	add := func(ok bool, s string) {
		if ok {
			parts = append(parts, s)
		}
	}
	add(e.MinLostUpdates > 0, "lost updates")
	add(e.MinOverlaps > 0, "two holders at once")
	add(e.MinEarlyOverlaps > 0, "live lock given away")
	add(e.NoEarlyOverlaps, "no live lock given away")
	add(e.MinLateRejected > 0, "late write refused")
	add(e.StallToEnd && e.MinStall == 0, "stall to the end")
	add(e.StallToEnd && e.MinStall > 0, fmt.Sprintf("stall to the end, ≥ %v", e.MinStall))
	add(e.MinStall > 0 && !e.StallToEnd, fmt.Sprintf("stall ≥ %v", e.MinStall))
	add(e.Recovers, "recovers")
	add(e.MinBusy > 0, "busy counted")
	add(e.MinUnavailable > 0, "unavailable counted")
	add(e.Lock != nil, "lock="+verdictOf(e.Lock))
	add(e.Data != nil, "data="+verdictOf(e.Data))
	add(e.MaxStall > 0 && !e.StartUp, fmt.Sprintf("stall ≤ %v per key", e.MaxStall))
	add(e.MaxStall > 0 && e.StartUp, fmt.Sprintf("stall ≤ %v per key (plus a killed node's start-up where a backend declares one)", e.MaxStall))
	add(e.MaxUnavailable != nil && *e.MaxUnavailable == 0, "never unavailable")
	add(e.Classified, "failures classified")
	out := strings.Join(parts, ", ")
	if e.Or != nil {
		out += "; or " + describe(*e.Or)
	}
	return out
}

func verdictOf(v *checkers.Verdict) string {
	if v == nil {
		return ""
	}
	return v.String()
}

type matrixFlags struct {
	results  string
	junit    string
	timeout  time.Duration
	repeat   int
	rates    string
	parallel int
	// reuse hands the lock-service nodes of a run on to the next run of
	// the same node configuration (--reuse-nodes).
	reuse bool
	// shard and shardCosts are --shard I/N and --shard-costs; plan is
	// the split they make (nil: the whole set).
	shard      string
	shardCosts []string
	plan       *scenario.ShardPlan
}

func (m *matrixFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&m.results, "results", "results", "directory for the runs and matrix.json")
	cmd.Flags().StringVar(&m.junit, "junit", "", "also write the outcomes as JUnit XML to this file")
	cmd.Flags().StringVar(&m.shard, "shard", "", "run only part I of N of the cells (e.g. 2/3), split by their expected durations the same way on every runner; each part writes its own results directory, and splitbrain merge puts them together (docs/ci.md)")
	cmd.Flags().StringSliceVar(&m.shardCosts, "shard-costs", nil, "matrix.json files of earlier runs whose measured durations balance the --shard split (every runner must give the same files; default: time limit + 12s a run)")
	cmd.Flags().BoolVar(&m.reuse, "reuse-nodes", false, "let a run take over the lock-service nodes (and network) of an earlier run with the same node configuration instead of starting its own, its locks under a key prefix of its own; a run hands its nodes on only when its faults healed without trace (no kill, clock, power-loss or packet fault of the service) and they pass a health check; results.json node_reuse says which (docs/performance.md)")
	cmd.Flags().IntVar(&m.parallel, "parallel", 1, "runs side by side on the engine, each on its own network and address range (the verdicts are those of one at a time; the nightly set on 2 cores: 3 take 41% of the serial wall time, 2 take 55%)")
}

// check refuses flag values that make no sense.
func (m *matrixFlags) check() error {
	if m.parallel < 1 || m.parallel > maxParallel {
		return &usageError{fmt.Errorf("--parallel %d: want 1..%d (runs side by side share one engine; on 2 cores 3 is the most that pays)", m.parallel, maxParallel)}
	}
	if _, err := scenario.ParseShard(m.shard); err != nil {
		return err
	}
	if len(m.shardCosts) > 0 && m.shard == "" {
		return &usageError{errors.New("--shard-costs balances a --shard split: give --shard I/N too, or drop --shard-costs")}
	}
	return nil
}

func (m *matrixFlags) bindRepeat(cmd *cobra.Command) {
	cmd.Flags().IntVar(&m.repeat, "repeat", 0, "run every cell (scenario × target × seed) this many times, same seed; a cell passes when its expectation holds in enough runs (a set's \"at_least k of repeat N\", scaled; all of them without one)")
	cmd.Flags().StringVar(&m.rates, "rates", "", "write each cell's pass rate over its runs as a Markdown table to this file (e.g. docs/nightly-rates.md)")
}

// runMatrix runs set through the harness on Docker and writes its outputs.
func runMatrix(cmd *cobra.Command, g *globalFlags, set *scenario.Set, mf *matrixFlags) (*scenario.Matrix, error) {
	ms, err := runSets(cmd, g, []*scenario.Set{set}, mf, nil)
	if err != nil {
		return nil, err
	}
	m := ms[0]
	if err := m.WriteTable(cmd.OutOrStdout()); err != nil {
		return m, err
	}
	return m, m.WriteFiles(cmd.OutOrStdout(), scenario.MatrixFiles{Results: mf.results, JUnit: mf.junit, Rates: mf.rates})
}

// runSets runs sets through the harness on Docker as one pool of runs,
// mf.parallel at a time (each run's line on stderr; onRow, when set,
// hears of each finished run), and returns a matrix per set.
func runSets(cmd *cobra.Command, g *globalFlags, sets []*scenario.Set, mf *matrixFlags, onRow func(*scenario.Set, scenario.Row, int, int)) ([]*scenario.Matrix, error) {
	log, err := g.logger(cmd.ErrOrStderr())
	if err != nil {
		return nil, err
	}
	soft, hard, stop := interrupts(cmd.Context(), log)
	defer stop()
	deps, closeDeps, err := g.dockerDeps(hard, log, io.Discard)
	if err != nil {
		return nil, err
	}
	defer closeDeps()
	deps.Hard = hard
	deps.Report = report.Write
	deps.Images = onceImages(deps.Images)
	if mf.reuse {
		// Removed on every way out but SIGKILL (then: splitbrain clean).
		deps.Pool = harness.NewPool(log)
		deps.Pool.MaxIdle = max(2, mf.parallel)
		defer func() {
			if err := deps.Pool.Close(context.WithoutCancel(cmd.Context())); err != nil {
				log.Error("remove the nodes kept for reuse (splitbrain clean removes them)", "err", err)
			}
		}()
	}
	rn := &scenario.Runner{Deps: deps, ResultsDir: mf.results, Progress: cmd.ErrOrStderr(), Repeat: mf.repeat, Parallel: mf.parallel, OnRow: onRow}
	mf.plan.Apply(rn)
	return rn.RunSets(soft, sets), nil
}

// onceImages makes the images of a matrix once: each role's image is
// ensured by the first run that needs it, and later runs (side by side or
// not) take its tag without the builder's machine-wide lock, which another
// process's build may hold for minutes. The matrix runs the images of the
// tree as it was when each role was first needed.
func onceImages(ensure func(context.Context, []string) (map[string]string, error)) func(context.Context, []string) (map[string]string, error) {
	if ensure == nil {
		return nil
	}
	var (
		mu   sync.Mutex
		tags = map[string]string{}
	)
	return func(ctx context.Context, roles []string) (map[string]string, error) {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]string{}
		for _, r := range roles {
			t, ok := tags[r]
			if !ok {
				made, err := ensure(ctx, roles)
				if err != nil {
					return nil, err
				}
				maps.Copy(tags, made)
				return made, nil
			}
			out[r] = t
		}
		return out, nil
	}
}

// mismatchError ends a command whose matrix failed (err from
// [scenario.Matrix.Mismatch]) with exit 1 and its one line; nil stays nil.
func mismatchError(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: exitInvalid, err: err}
}

func newMatrixCmd(g *globalFlags) *cobra.Command {
	var (
		setName string
		mf      matrixFlags
	)
	cmd := &cobra.Command{
		Use:   "matrix",
		Short: "Run a set of scenarios with fixed seeds; fail when any outcome differs from its expectation",
		Example: "  splitbrain matrix --set nightly --junit results/junit.xml\n" +
			"  splitbrain matrix --set ./my-set.yaml\n" +
			"  splitbrain matrix --set nightly --parallel 3\n" +
			"  splitbrain matrix --set nightly --shard 2/3 --results results-2   # then: splitbrain merge results-*\n" +
			"  splitbrain matrix --set nightly --repeat 20 --rates docs/nightly-rates.md",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			set, err := scenario.LoadSet(setName)
			if err != nil {
				return err
			}
			if mf.repeat < 0 || (mf.repeat == 0 && cmd.Flags().Changed("repeat")) {
				return &usageError{fmt.Errorf("--repeat %d: want 1 or more", mf.repeat)}
			}
			if err := mf.check(); err != nil {
				return err
			}
			if mf.plan, err = scenario.PlanShards("matrix "+set.Name, mf.shard, []*scenario.Set{set}, mf.repeat, mf.shardCosts); err != nil {
				return err
			}
			// Every run's options, checked before any image work.
			if err := set.Check(nil); err != nil {
				return err
			}
			if err := checkOutputs(mf.results, map[string]string{"--junit": mf.junit, "--rates": mf.rates}); err != nil {
				return err
			}
			mf.plan.Write(cmd.OutOrStdout())
			m, err := runMatrix(cmd, g, set, &mf)
			if err != nil {
				return err
			}
			return mismatchError(m.Mismatch())
		},
	}
	cmd.Flags().StringVar(&setName, "set", "nightly", "a shipped set (nightly, smoke) or a YAML file")
	mf.bind(cmd)
	mf.bindRepeat(cmd)
	return cmd
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// scenarioCells says where a scenario applies: each target, with the
// libraries that serve it and fit the scenario ("redis(redsync,redis-py)").
func scenarioCells(s scenario.Scenario) string {
	var out []string
	for _, b := range targets.Backends() {
		clients := s.Clients(b)
		if len(clients) == 0 {
			continue
		}
		own := slices.Contains(clients, b.Recipe)
		others := slices.DeleteFunc(slices.Clone(clients), func(c string) bool { return c == b.Recipe })
		switch {
		case own && len(others) == 0:
			out = append(out, b.Name)
		case own:
			out = append(out, b.Name+"(+"+strings.Join(others, ",")+")")
		default:
			out = append(out, b.Name+"("+strings.Join(others, ",")+" only)")
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, " ")
}
