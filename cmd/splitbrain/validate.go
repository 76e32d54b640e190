package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/report"
	"github.com/splitbrain/splitbrain/scenario"
	"github.com/splitbrain/splitbrain/targets"
)

// validateFlags are validate's own flags.
type validateFlags struct {
	tgts, clients  []string
	clientFiles    string
	clientPackages []string
	opts           []string
	candidates     string
	timeLimit      time.Duration
	page           string
	dryRun         bool
	verbose        bool
}

func newValidateCmd(g *globalFlags) *cobra.Command {
	var (
		vf validateFlags
		mf matrixFlags
	)
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Compare lock services, clients and configurations side by side: the lock-safety checklist answered from real runs",
		Long: "validate answers the lock-safety checklist for each candidate a team may adopt — a backend, the lock\n" +
			"client that takes its locks (a shipped one or your own adapter) and their configuration — from runs of the\n" +
			"scenarios behind it under faults. It prints the plan first (runs, scenarios per candidate, the wall time\n" +
			"expected from earlier runs in the results directory); --dry-run stops there. Then the grid: a row per\n" +
			"checklist item, a column per candidate, PASS, FAIL or n/t (not tested: none of its runs put its fault on\n" +
			"the system, never PASS), and a line per candidate in plain words: what it keeps correct, what breaks it,\n" +
			"the fix when one is known, and the directory of links to the runs behind each answer. It writes the page\n" +
			"(RESULTS/validate/TIME/checklist.html), adopt.json beside it and, with --junit, JUnit XML. --verbose also\n" +
			"prints every run and each item's evidence. Candidates: --candidates FILE (YAML, docs/adoption.md),\n" +
			"--candidates default (every shipped backend with each client that serves it, and each backend's durable\n" +
			"configuration), or the short form --target/--client/--recipe-opt. docs/validate.md says what each item judges.",
		Example: "  splitbrain validate --candidates default --dry-run\n" +
			"  splitbrain validate --candidates default --parallel 3\n" +
			"  splitbrain validate --candidates my-candidates.yaml --parallel 3\n" +
			"  splitbrain validate --target etcd\n  splitbrain validate --target redis --client redis-py\n" +
			"  splitbrain validate --target redis,etcd --client redis,redsync,etcd,etcd-v3.7\n" +
			"  splitbrain validate --target redis --recipe-opt persistence=aof-always\n" +
			"  splitbrain validate --target redis --client 'python3 my_lock.py' --client-files ./my-client --client-packages python3-redis",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runValidate(cmd, g, &vf, &mf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&vf.candidates, "candidates", "", "the candidates to compare: a YAML file (a list of target, client, recipe_options, store, store_options, name: docs/adoption.md), or default (every shipped backend with each client that serves it, and each backend's durable configuration); in place of --target/--client/--recipe-opt")
	f.StringSliceVar(&vf.tgts, "target", []string{validateDefault()}, "backends: "+strings.Join(targets.Names(), ", ")+"; the default is the first with 3 or more nodes and a leader, as the checklist asks")
	f.StringSliceVar(&vf.clients, "client", nil, "lock clients to validate on each target they serve (default: each target's own)"+clientsHelp()+"\n  or the command line of your own adapter (docs/client-protocol.md), e.g. 'python3 my_lock.py'")
	f.StringVar(&vf.clientFiles, "client-files", "", "with --client CMD: a directory whose files go into the client image (/opt/splitbrain/client)")
	f.StringSliceVar(&vf.clientPackages, "client-packages", nil, "with --client CMD: Debian packages the client image gets (e.g. python3-redis)")
	f.DurationVar(&vf.timeLimit, "time-limit", 20*time.Second, "each run's test phase")
	f.StringVar(&vf.page, "page", "", "write the checklist page here (default: RESULTS/validate/TIME/checklist.html)")
	f.StringArrayVar(&vf.opts, "recipe-opt", nil, "the configuration under test, key=value (repeatable; unknown ones refused); each target's:"+recipeOptionsHelp())
	f.BoolVar(&vf.dryRun, "dry-run", false, "print the plan (runs, scenarios per candidate, expected wall time) and exit 0, with no image or container work")
	f.BoolVar(&vf.verbose, "verbose", false, "also print every run's row and each candidate's checklist with the evidence and runs of each item")
	mf.bind(cmd)
	return cmd
}

// runValidate is validate: candidates, plan, runs, answers.
func runValidate(cmd *cobra.Command, g *globalFlags, vf *validateFlags, mf *matrixFlags) error {
	if err := mf.check(); err != nil {
		return err
	}
	started := time.Now()
	stdout := cmd.OutOrStdout()
	if _, err := g.logger(cmd.ErrOrStderr()); err != nil {
		return err
	}
	cands, planName, err := vf.candidateList(cmd)
	if err != nil {
		return err
	}
	sets := make([]*scenario.Set, len(cands))
	for i, c := range cands {
		if sets[i], err = c.Set(vf.timeLimit); err != nil {
			return err
		}
		// Every run's options, checked before any image work.
		if err := sets[i].Check(nil); err != nil {
			return err
		}
	}
	if err := checkOutputs(mf.results, map[string]string{"--junit": mf.junit, "--page": vf.page}); err != nil {
		return err
	}
	if mf.plan, err = scenario.PlanShards("validate "+planName, mf.shard, sets, 0, mf.shardCosts); err != nil {
		return err
	}
	width := outputWidth(stdout)
	plan := scenario.PlanComparison(cands, sets, mf.parallel, scenario.EstimatesFrom(mf.results))
	plan.Write(stdout, width)
	mf.plan.Write(stdout)
	if vf.dryRun {
		fmt.Fprintln(stdout, "validate --dry-run: nothing run")
		return nil
	}

	if !cmd.Flags().Changed("log-level") {
		// The runs' own progress (phases, faults) would bury the comparison's
		// line: warnings and errors only, unless asked.
		g.logLevel = "warn"
	}
	progress := report.NewCompareProgress(cmd.ErrOrStderr(), plan.Runs, plan.Remaining)
	ctx, stopProgress := context.WithCancel(cmd.Context())
	drawn := make(chan struct{})
	go func() {
		defer close(drawn)
		progress.Run(ctx)
	}()
	ms, err := runSets(cmd, g, sets, mf, func(_ *scenario.Set, row scenario.Row, _, total int) {
		progress.SetTotal(total)
		progress.Done(!row.Pass())
	})
	stopProgress()
	<-drawn
	if err != nil {
		return err
	}

	junit := mf.junit
	mf.junit = "" // the checklist's, not each matrix's
	matrixOut := io.Discard
	if vf.verbose {
		matrixOut = stdout
	}
	var (
		cols     []scenario.Column
		runs     int
		failed   bool
		mismatch error
	)
	for i, m := range ms {
		if vf.verbose {
			fmt.Fprintln(stdout)
			if err := m.WriteTable(stdout); err != nil {
				return err
			}
		}
		if err := writeMatrix(matrixOut, m, mf); err != nil {
			return err
		}
		runs += len(m.Rows)
		col, err := scenario.ColumnOf(cands[i], m)
		if err != nil {
			return &harness.InputError{Err: err}
		}
		if vf.verbose {
			fmt.Fprintln(stdout)
			scenario.WriteChecklist(stdout, longName(col), col.Items)
		}
		cols = append(cols, col)
		if err := mismatchError(m); err != nil && mismatch == nil {
			mismatch = err
		}
		failed = failed || col.Fails()
	}

	out := filepath.Join(mf.results, "validate", started.UTC().Format("20060102T150405Z"))
	links, err := scenario.RunLinks(filepath.Join(out, "runs"), cols)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	scenario.WriteGrid(stdout, cols, width)
	writeWrapped(stdout, "", "PASS: held under the item's fault; FAIL: broken (below); n/t: no run put the item's fault on the system. "+
		"The runs behind each answer: each candidate's runs directory, one directory per item.", width)
	fmt.Fprintln(stdout)
	adopt := &scenario.Adoption{Command: "splitbrain " + strings.Join(os.Args[1:], " "), Commit: scenario.Commit(), Started: started.UTC(),
		Parallel: mf.parallel, Runs: runs}
	for i, col := range cols {
		writeWrapped(stdout, "", col.Summary(), width)
		writeWrapped(stdout, "  runs: ", links[i], width)
		adopt.Candidates = append(adopt.Candidates, scenario.AdoptedFrom(col, links[i]))
	}
	page := vf.page
	if page == "" {
		page = filepath.Join(out, "checklist.html")
	}
	if err := scenario.WriteComparisonFile(page, cols); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nchecklist page: %s\n", page)
	adopt.Wall = time.Since(started)
	if err := adopt.WriteJSON(filepath.Join(out, "adopt.json")); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "adopt.json: %s\n", filepath.Join(out, "adopt.json"))
	if junit != "" {
		if err := scenario.WriteChecklistJUnit(junit, cols); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "junit: %s\n", junit)
	}
	fmt.Fprintf(stdout, "\nvalidate: %d candidates, %d runs in %v wall time, %d at a time (estimated %v)\n",
		len(cols), runs, time.Since(started).Round(time.Second), mf.parallel, plan.Wall.Round(time.Second))
	if failed {
		return &exitError{code: exitInvalid, err: errors.New("validate: part of the checklist fails (see the grid)")}
	}
	return mismatch
}

// candidateList is the candidates the flags name, and what a shard's
// split is stamped with.
func (vf *validateFlags) candidateList(cmd *cobra.Command) ([]scenario.Candidate, string, error) {
	if vf.candidates != "" {
		for _, f := range []string{"target", "client", "recipe-opt", "client-files", "client-packages"} {
			if cmd.Flags().Changed(f) {
				return nil, "", &usageError{fmt.Errorf("--candidates names every candidate: drop --%s, or put it in the candidates file", f)}
			}
		}
		var (
			cs  []scenario.Candidate
			err error
		)
		if vf.candidates == "default" {
			cs = scenario.DefaultCandidates()
		} else if cs, err = scenario.LoadCandidates(vf.candidates); err != nil {
			return nil, "", err
		}
		var names []string
		for _, c := range cs {
			names = append(names, c.Label())
		}
		return cs, strings.Join(names, ","), nil
	}
	ro, err := parseKV(vf.opts)
	if err != nil {
		return nil, "", &usageError{err}
	}
	var cs []scenario.Candidate
	for _, t := range vf.tgts {
		b, err := targets.Lookup(t)
		if err != nil {
			return nil, "", &harness.InputError{Err: err}
		}
		cls := []string{""}
		if len(vf.clients) > 0 {
			cls = nil
			for _, c := range vf.clients {
				r, err := targets.LookupRecipe(c)
				switch {
				case err != nil && !strings.ContainsAny(c, " /."):
					return nil, "", &harness.InputError{Err: err}
				case err != nil || r.Serves(t):
					// A command line: the user's adapter, for every target.
					cls = append(cls, c)
				}
			}
		}
		for _, c := range cls {
			cand := scenario.Candidate{Target: t, Client: c, RecipeOptions: maps.Clone(ro), ClientFiles: vf.clientFiles, ClientPackages: vf.clientPackages}
			if !cand.External() {
				cand.ClientFiles, cand.ClientPackages = "", nil
				r, err := recipeOf(b, c)
				if err != nil {
					return nil, "", &harness.InputError{Err: err}
				}
				if err := b.CheckOptionsWith(r, ro); err != nil {
					return nil, "", harness.BadInput("--recipe-opt: %v", err)
				}
			}
			cs = append(cs, cand)
		}
	}
	if len(cs) == 0 {
		var serve []string
		for _, t := range vf.tgts {
			b, _ := targets.Lookup(t)
			serve = append(serve, t+": "+strings.Join(harness.ClientNames(b), ", "))
		}
		return nil, "", &harness.InputError{Err: fmt.Errorf("no --client %s serves --target %s (clients of each target: %s)", strings.Join(vf.clients, ","), strings.Join(vf.tgts, ","), strings.Join(serve, "; "))}
	}
	if (vf.clientFiles != "" || len(vf.clientPackages) > 0) && !slices.ContainsFunc(cs, scenario.Candidate.External) {
		return nil, "", harness.BadInput("--client-files and --client-packages go with --client CMD, the command line of your own adapter")
	}
	if err := scenario.CheckCandidates(cs); err != nil {
		return nil, "", err
	}
	return cs, candidates(vf.tgts, vf.clients, ro), nil
}

// longName names a candidate in the long checklist (--verbose): its
// backend, client, configuration and library.
func longName(col scenario.Column) string {
	c := col.Candidate
	b, err := targets.Lookup(col.Target)
	if err != nil {
		return col.Title()
	}
	name := col.Title() + ": " + b.Name
	if col.Client != "" {
		name += " with client " + col.Client
	}
	name += " in configuration " + configuration(b, c.RecipeOptions)
	if c.Store != "" {
		name += ", store " + c.Store
		if len(c.StoreOptions) > 0 {
			name += " (" + strings.Join(kvList(c.StoreOptions), ", ") + ")"
		}
	}
	if col.Library != "" {
		name += " (" + col.Library + " " + col.Version + ")"
	}
	return name
}

func kvList(m map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return out
}

// candidates names what the short form of validate compares: its
// targets, clients and configuration.
func candidates(tgts, clients []string, opts map[string]string) string {
	s := strings.Join(tgts, ",")
	if len(clients) > 0 {
		s += " with " + strings.Join(clients, ",")
	}
	for _, kv := range kvList(opts) {
		s += " " + kv
	}
	return s
}

// configuration says the configuration under test: the options given,
// and each of the backend's own options left at its default.
func configuration(b targets.Backend, opts map[string]string) string {
	parts := kvList(opts)
	for _, o := range b.Options {
		if _, ok := opts[o.Name]; !ok && o.DefaultValue() != "" {
			parts = append(parts, o.Name+"="+o.DefaultValue()+" (default)")
		}
	}
	if len(parts) == 0 {
		return "default"
	}
	return strings.Join(parts, ", ")
}

// recipeOf is the recipe a validation of b with client runs.
func recipeOf(b targets.Backend, client string) (targets.Recipe, error) {
	if client == "" {
		return b.RunRecipe()
	}
	return targets.LookupRecipe(client)
}

// validateDefault is the backend validate checks when none is named: the
// first registered one with several lock nodes and a leader (the
// checklist's consensus-backed service), else the run's default.
func validateDefault() string {
	for _, b := range targets.Backends() {
		if b.Size >= 3 && b.Leads {
			return b.Name
		}
	}
	return targets.Default()
}
