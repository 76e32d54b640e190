package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/scenario"
	"github.com/splitbrain/splitbrain/targets"
)

// phaseNames are a run's phases in order (harness.Results.Phases).
var phaseNames = []string{"setup", "test", "final", "teardown", "check"}

// runPhases reads the matrix.json files a validate (or matrix) run wrote
// under a results directory and says where the runs' time went, phase by
// phase; given a second directory (the same candidates run another way:
// one at a time, say) it compares their checklist answers item by item.
func runPhases(args []string) error {
	fl := flag.NewFlagSet("phases", flag.ContinueOnError)
	jsonOut := fl.String("json", "", "also write the figures as JSON here")
	fl.Usage = func() {
		fmt.Fprintln(fl.Output(), "usage: go run ./bench phases [--json FILE] RESULTS [OTHER-RESULTS]\n"+
			"  where a validate run's time went (setup, test, final, teardown, check), from results.json phases_ns;\n"+
			"  with OTHER-RESULTS, whether its checklist answers equal RESULTS' (e.g. --parallel 3 against one at a time)")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() < 1 || fl.NArg() > 2 {
		fl.Usage()
		return flag.ErrHelp
	}
	a, err := loadValidate(fl.Arg(0))
	if err != nil {
		return err
	}
	out := map[string]any{"machine": machine(), "phases": a.summary()}
	a.write(os.Stdout, fl.Arg(0))
	if fl.NArg() == 2 {
		b, err := loadValidate(fl.Arg(1))
		if err != nil {
			return err
		}
		fmt.Println()
		b.write(os.Stdout, fl.Arg(1))
		diffs := compareAnswers(a, b)
		fmt.Printf("\nchecklist answers, %s against %s: %d columns, %d items differ\n", fl.Arg(0), fl.Arg(1), len(a.answers), len(diffs))
		for _, d := range diffs {
			fmt.Println("  " + d)
		}
		out["other"], out["differences"] = b.summary(), diffs
	}
	if *jsonOut != "" {
		data, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(*jsonOut, append(data, '\n'), 0o644)
	}
	return nil
}

// validateRun is what one results directory holds: every run's phases and
// every column's checklist answers.
type validateRun struct {
	runs []runTimes
	// answers by column (set name), item question: the answer.
	answers map[string]map[string]string
	// wall is from the first matrix's start to the last one's end.
	wall time.Duration
}

type runTimes struct {
	scenario, column string
	phases           map[string]time.Duration
	total            time.Duration
	early            bool
	// reuse is results.json's node_reuse (validate --reuse-nodes).
	reuse *harness.NodeReuse
}

func loadValidate(dir string) (*validateRun, error) {
	v := &validateRun{answers: map[string]map[string]string{}}
	var first, last time.Time
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "matrix.json" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var m scenario.Matrix
		if err := json.Unmarshal(data, &m); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if first.IsZero() || m.Started.Before(first) {
			first = m.Started
		}
		if end := m.Started.Add(m.Duration); end.After(last) {
			last = end
		}
		col := m.Set.Name
		for _, r := range m.Rows {
			rt := runTimes{scenario: r.Scenario, column: col, phases: map[string]time.Duration{}, total: r.Duration}
			if r.Dir != "" {
				if b, err := os.ReadFile(filepath.Join(r.Dir, "results.json")); err == nil {
					var res harness.Results
					if json.Unmarshal(b, &res) == nil {
						rt.phases, rt.early, rt.reuse = res.Phases, res.EndedEarly, res.NodeReuse
					}
				}
			}
			v.runs = append(v.runs, rt)
		}
		if len(m.Rows) > 0 {
			b, err := targets.Lookup(m.Rows[0].Target)
			if err != nil {
				return err
			}
			ans := map[string]string{}
			for _, it := range scenario.Checklist(b, &m) {
				ans[it.Question] = string(it.Answer)
			}
			v.answers[col] = ans
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(v.runs) == 0 {
		return nil, fmt.Errorf("no matrix.json with runs under %s (run splitbrain validate --results %s)", dir, dir)
	}
	v.wall = last.Sub(first)
	return v, nil
}

type phaseSummary struct {
	Runs       int                      `json:"runs"`
	EndedEarly int                      `json:"ended_early"`
	Sum        map[string]time.Duration `json:"sum_ns"`
	Mean       map[string]time.Duration `json:"mean_ns"`
	// Run is the runs' own durations summed (Sum's phases and the gaps).
	Run  time.Duration `json:"run_sum_ns"`
	Wall time.Duration `json:"wall_ns"`
	// TestByScenario is the mean test phase per scenario.
	TestByScenario map[string]time.Duration `json:"test_by_scenario_ns"`
	// Reuse sums node reuse (validate --reuse-nodes), when runs had it.
	Reuse *reuseSummary `json:"node_reuse,omitempty"`
}

// reuseSummary is what node reuse did: how many runs took nodes over and
// handed theirs on, their mean setup and teardown against the others', and
// why the others did not hand theirs on.
type reuseSummary struct {
	Runs, TookOver, HandedOn int
	// Setup of the runs that took nodes over and of those that started
	// their own; Teardown of those that handed theirs on and the others.
	SetupTookOver, SetupOwn         time.Duration
	TeardownHandedOn, TeardownOther time.Duration
	// Why counts the reasons for not handing nodes on.
	Why map[string]int
}

func (v *validateRun) reuse() *reuseSummary {
	s := &reuseSummary{Why: map[string]int{}}
	var setupIn, setupOwn, downOn, downOther time.Duration
	for _, r := range v.runs {
		if r.reuse == nil {
			continue
		}
		s.Runs++
		if r.reuse.From != "" {
			s.TookOver++
			setupIn += r.phases["setup"]
		} else {
			setupOwn += r.phases["setup"]
		}
		if r.reuse.HandedOn {
			s.HandedOn++
			downOn += r.phases["teardown"]
		} else {
			downOther += r.phases["teardown"]
			s.Why[r.reuse.Why]++
		}
	}
	if s.Runs == 0 {
		return nil
	}
	mean := func(d time.Duration, n int) time.Duration { return d / time.Duration(max(1, n)) }
	s.SetupTookOver, s.SetupOwn = mean(setupIn, s.TookOver), mean(setupOwn, s.Runs-s.TookOver)
	s.TeardownHandedOn, s.TeardownOther = mean(downOn, s.HandedOn), mean(downOther, s.Runs-s.HandedOn)
	return s
}

func (v *validateRun) summary() phaseSummary {
	s := phaseSummary{Runs: len(v.runs), Sum: map[string]time.Duration{}, Mean: map[string]time.Duration{}, TestByScenario: map[string]time.Duration{}, Wall: v.wall}
	n := map[string]int{}
	for _, r := range v.runs {
		for _, p := range phaseNames {
			s.Sum[p] += r.phases[p]
		}
		s.Run += r.total
		if r.early {
			s.EndedEarly++
		}
		s.TestByScenario[r.scenario] += r.phases["test"]
		n[r.scenario]++
	}
	for _, p := range phaseNames {
		s.Mean[p] = s.Sum[p] / time.Duration(max(1, s.Runs))
	}
	for sc, d := range s.TestByScenario {
		s.TestByScenario[sc] = d / time.Duration(n[sc])
	}
	s.Reuse = v.reuse()
	return s
}

func (v *validateRun) write(w *os.File, dir string) {
	s := v.summary()
	fmt.Fprintf(w, "%s: %d runs in %d columns, wall %v; %d test phases ended early\n", dir, s.Runs, len(v.answers), s.Wall.Round(time.Second), s.EndedEarly)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tsum\tmean a run\tshare\t")
	var other time.Duration = s.Run
	for _, p := range phaseNames {
		other -= s.Sum[p]
		fmt.Fprintf(tw, "%s\t%v\t%v\t%.0f%%\t\n", p, s.Sum[p].Round(time.Second), s.Mean[p].Round(100*time.Millisecond), 100*s.Sum[p].Seconds()/max(1, s.Run.Seconds()))
	}
	fmt.Fprintf(tw, "between phases\t%v\t%v\t%.0f%%\t\n", other.Round(time.Second), (other / time.Duration(max(1, s.Runs))).Round(100*time.Millisecond), 100*other.Seconds()/max(1, s.Run.Seconds()))
	fmt.Fprintf(tw, "runs, summed\t%v\t%v\t100%%\t\n", s.Run.Round(time.Second), (s.Run / time.Duration(max(1, s.Runs))).Round(100*time.Millisecond))
	tw.Flush()
	scs := slices.Sorted(func(yield func(string) bool) {
		for k := range s.TestByScenario {
			if !yield(k) {
				return
			}
		}
	})
	var parts []string
	for _, sc := range scs {
		parts = append(parts, fmt.Sprintf("%s %v", sc, s.TestByScenario[sc].Round(100*time.Millisecond)))
	}
	fmt.Fprintf(w, "mean test phase by scenario: %s\n", strings.Join(parts, ", "))
	if r := s.Reuse; r != nil {
		sec := func(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
		fmt.Fprintf(w, "node reuse: %d of %d runs took over an earlier run's lock-service nodes (mean setup %s; %s for the %d that started their own); "+
			"%d handed theirs on (mean teardown %s; %s for the other %d)\n",
			r.TookOver, r.Runs, sec(r.SetupTookOver), sec(r.SetupOwn), r.Runs-r.TookOver, r.HandedOn, sec(r.TeardownHandedOn), sec(r.TeardownOther), r.Runs-r.HandedOn)
		for _, why := range slices.Sorted(maps.Keys(r.Why)) {
			fmt.Fprintf(w, "  not handed on, %d: %s\n", r.Why[why], why)
		}
	}
}

// compareAnswers lists every column and item whose answers differ between
// a and b (a column missing from one side too).
func compareAnswers(a, b *validateRun) []string {
	var out []string
	cols := map[string]bool{}
	for c := range a.answers {
		cols[c] = true
	}
	for c := range b.answers {
		cols[c] = true
	}
	names := make([]string, 0, len(cols))
	for c := range cols {
		names = append(names, c)
	}
	sort.Strings(names)
	for _, c := range names {
		x, okx := a.answers[c]
		y, oky := b.answers[c]
		if !okx || !oky {
			out = append(out, fmt.Sprintf("%s: only in one of them", c))
			continue
		}
		for _, q := range slices.Sorted(func(yield func(string) bool) {
			for k := range x {
				if !yield(k) {
					return
				}
			}
		}) {
			if x[q] != y[q] {
				out = append(out, fmt.Sprintf("%s: %s %s against %s", c, q, x[q], y[q]))
			}
		}
	}
	return out
}
