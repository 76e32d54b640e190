package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

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
	f.StringSliceVar(&vf.tgts, "target", []string{scenario.DefaultValidateTarget()}, "backends: "+strings.Join(targets.Names(), ", ")+"; the default is the first with 3 or more nodes and a leader, as the checklist asks")
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
	sets, err := scenario.SetsOf(cands, vf.timeLimit)
	if err != nil {
		return err
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

	cmp, err := scenario.Compare(stdout, cands, ms, scenario.ComparisonOutputs{
		Results: mf.results, Page: vf.page, JUnit: mf.junit, Verbose: vf.verbose, Width: width,
		Command: "splitbrain " + strings.Join(os.Args[1:], " "), Started: started, Parallel: mf.parallel, Estimated: plan.Wall,
	})
	if err != nil {
		return err
	}
	if cmp.Fails() {
		return &exitError{code: exitInvalid, err: errors.New("validate: part of the checklist fails (see the grid)")}
	}
	return mismatchError(cmp.Mismatch())
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
		return scenario.NamedCandidates(vf.candidates)
	}
	ro, err := parseKV(vf.opts)
	if err != nil {
		return nil, "", &usageError{err}
	}
	return scenario.ShortForm{Targets: vf.tgts, Clients: vf.clients, RecipeOptions: ro,
		ClientFiles: vf.clientFiles, ClientPackages: vf.clientPackages}.Candidates()
}
