package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/scenario"
)

func newMergeCmd(_ *globalFlags) *cobra.Command {
	o := scenario.MergeOptions{Results: "results"}
	cmd := &cobra.Command{
		Use:   "merge DIR...",
		Short: "Merge the results directories of a sharded matrix or validate (--shard I/N) into one answer",
		Long: "merge reads the results directory each shard wrote (matrix or validate with --shard I/N) and writes one\n" +
			"matrix.json per set, in the set's order, as if one machine had run it, with the shards' runs copied beside it\n" +
			"(serve --results shows it), and the JUnit file, rates table and checklist page asked for. Shards of another\n" +
			"set, commit, seeds or split are refused; a shard missing or given twice leaves its cells \"not run\", a failure.\n" +
			"Exit 0: every cell met its expectation; 1: a cell did not or did not run, or a checklist item fails.",
		Example: "  splitbrain merge shard-1 shard-2 shard-3 --results merged --junit merged/junit.xml\n" +
			"  splitbrain merge results-* --page merged/checklist.html   # shards of validate --shard",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &usageError{fmt.Errorf("name the shards' results directories: merge DIR")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, dirs []string) error {
			mg, err := scenario.Merge(dirs, o)
			if err != nil {
				return err
			}
			if err := mg.WriteSummary(cmd.OutOrStdout()); err != nil {
				return err
			}
			switch {
			case len(mg.Problems) > 0:
				return &exitError{code: exitInvalid, err: fmt.Errorf("merge: %s", mg.Problems[0])}
			case mg.ChecklistFails():
				return &exitError{code: exitInvalid, err: fmt.Errorf("merge: part of the checklist fails (see above)")}
			}
			for _, m := range mg.Matrices {
				if err := mismatchError(m.Mismatch()); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Results, "results", o.Results, "directory for the merged matrix.json and the shards' runs")
	f.StringVar(&o.JUnit, "junit", "", "also write the merged outcomes as JUnit XML to this file (validate's shards: the checklist)")
	f.StringVar(&o.Rates, "rates", "", "write each cell's pass rate over its runs as a Markdown table to this file")
	f.StringVar(&o.Page, "page", "", "write the checklist page here (validate's shards)")
	return cmd
}
