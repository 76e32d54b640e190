package scenario

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Estimates are the durations of earlier runs, read from the matrix.json
// files a results directory holds, by which a comparison's wall time is
// estimated before any run starts. Each run's duration is brought back to
// its time alone on the machine (Sidebyside) before it is kept.
type Estimates struct {
	// whole are cells' mean durations alone, by CellKey.String() and the
	// time limit they ran with; over, cells' and targets' mean times
	// outside the test phase (for another time limit).
	whole      map[string]time.Duration
	overCell   map[string]time.Duration
	overTarget map[string]time.Duration
	// Files and Runs count what the figures come from; Dir is where.
	Files, Runs int
	Dir         string
}

// maxEstimateFiles bounds how many matrix.json files (the newest) an
// estimate reads.
const maxEstimateFiles = 64

// Sidebyside is how much longer a run takes when parallel runs share the
// machine than alone: measured with the nightly set on this project's
// 2-core machine (docs/performance.md), 2 side by side took 55% of the
// serial wall time (each run 1.1 times as long) and 3 took 41% (1.23
// times); more than 3 do not pay (the wall time stays at 41%).
func Sidebyside(parallel int) float64 {
	switch {
	case parallel <= 1:
		return 1
	case parallel == 2:
		return 1.1
	}
	return 0.41 * float64(parallel)
}

// EstimatesFrom reads the run durations of the newest matrix.json files
// under dir (RESULTS/matrix/*/matrix.json, as matrix and validate write
// them). A file it cannot read is passed over: the figures are an
// estimate, and a missing one takes the stated default.
func EstimatesFrom(dir string) Estimates {
	e := Estimates{Dir: dir, whole: map[string]time.Duration{}, overCell: map[string]time.Duration{}, overTarget: map[string]time.Duration{}}
	paths, _ := filepath.Glob(filepath.Join(dir, "matrix", "*", "matrix.json"))
	type file struct {
		path string
		mod  time.Time
	}
	var files []file
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			files = append(files, file{p, fi.ModTime()})
		}
	}
	slices.SortFunc(files, func(a, b file) int { return b.mod.Compare(a.mod) })
	type acc struct {
		sum time.Duration
		n   int
	}
	whole, overCell, overTarget := map[string]*acc{}, map[string]*acc{}, map[string]*acc{}
	add := func(m map[string]*acc, k string, d time.Duration) {
		a := m[k]
		if a == nil {
			a = &acc{}
			m[k] = a
		}
		a.sum += d
		a.n++
	}
	for _, f := range files[:min(len(files), maxEstimateFiles)] {
		m, err := ReadMatrix(f.path)
		if err != nil || m.Set == nil {
			continue
		}
		e.Files++
		for _, r := range m.Rows {
			if r.Duration <= 0 || r.Error != "" {
				continue
			}
			e.Runs++
			alone := time.Duration(float64(r.Duration) / Sidebyside(m.Parallel))
			add(whole, wholeKey(r.key(), m.Set.TimeLimit), alone)
			o := max(0, alone-m.Set.TimeLimit)
			add(overCell, r.key().String(), o)
			add(overTarget, r.Target, o)
		}
	}
	for dst, src := range map[*map[string]time.Duration]map[string]*acc{&e.whole: whole, &e.overCell: overCell, &e.overTarget: overTarget} {
		for k, a := range src {
			(*dst)[k] = a.sum / time.Duration(a.n)
		}
	}
	return e
}

func wholeKey(k CellKey, limit time.Duration) string { return k.String() + "@" + limit.String() }

// Run is the expected duration of one run, alone on the machine, of cell
// k of set, and whether a measurement says so (else: the set's time limit
// and DefaultOverhead). A cell measured with the same time limit takes its
// mean; one measured with another, that limit and its time outside the test
// phase; a cell never measured, its target's time outside the test phase.
func (e Estimates) Run(set *Set, k CellKey) (time.Duration, bool) {
	if d, ok := e.whole[wholeKey(k, set.TimeLimit)]; ok {
		return d, true
	}
	if d, ok := e.overCell[k.String()]; ok {
		return set.TimeLimit + d, true
	}
	if d, ok := e.overTarget[k.Target]; ok {
		return set.TimeLimit + d, true
	}
	return set.TimeLimit + DefaultOverhead, false
}

// PlannedCandidate is one candidate's part of a comparison's plan.
type PlannedCandidate struct {
	Candidate Candidate
	Set       *Set
	// Scenarios are the scenarios its runs play, in order; Runs how many
	// runs; Time their expected total time, alone.
	Scenarios []string
	Runs      int
	Time      time.Duration
}

// ComparisonPlan is what validate will do, said before it does any of it:
// the runs of every candidate and the expected wall time.
type ComparisonPlan struct {
	Candidates []PlannedCandidate
	Runs       int
	Parallel   int
	// Wall is the expected wall time with Parallel runs side by side;
	// Measured counts the runs whose expected time a measurement gave.
	Wall     time.Duration
	Measured int
	// Source says where the expected times come from.
	Source string
	// costs are each run's expected time alone, in the sets' order.
	costs []time.Duration
}

// PlanComparison plans the runs of candidates (sets[i] is the validation
// set of cs[i]) with parallel runs side by side, their times from e: the
// runs are dealt, the longest first, each to the lane that frees first,
// every run taking Sidebyside(parallel) times its time alone.
func PlanComparison(cs []Candidate, sets []*Set, parallel int, e Estimates) *ComparisonPlan {
	p := &ComparisonPlan{Parallel: max(1, parallel)}
	rn := &Runner{}
	for i, set := range sets {
		pc := PlannedCandidate{Candidate: cs[i], Set: set}
		for _, j := range rn.jobs(set) {
			d, measured := e.Run(set, j.key())
			if measured {
				p.Measured++
			}
			if !slices.Contains(pc.Scenarios, j.sc.Name) {
				pc.Scenarios = append(pc.Scenarios, j.sc.Name)
			}
			pc.Runs++
			pc.Time += d
			p.costs = append(p.costs, d)
		}
		p.Runs += pc.Runs
		p.Candidates = append(p.Candidates, pc)
	}
	p.Wall = lanes(p.costs, p.Parallel)
	def := ""
	if p.Measured < p.Runs {
		def = fmt.Sprintf("; the %d others: the time limit + %v each, the default", p.Runs-p.Measured, DefaultOverhead)
	}
	switch {
	case e.Runs == 0:
		p.Source = fmt.Sprintf("no earlier runs in %s: each run its time limit + %v, the default", e.Dir, DefaultOverhead)
	default:
		p.Source = fmt.Sprintf("%d of %d runs timed from %d earlier runs in %s (%d matrix.json)%s", p.Measured, p.Runs, e.Runs, e.Dir, e.Files, def)
	}
	return p
}

// lanes is the wall time of runs of costs dealt to n lanes, the longest
// first, each to the lane that frees first, each run Sidebyside(n) times
// as long.
func lanes(costs []time.Duration, n int) time.Duration {
	sorted := slices.Clone(costs)
	slices.SortFunc(sorted, func(a, b time.Duration) int { return cmp.Compare(b, a) })
	load := make([]time.Duration, max(1, min(n, len(sorted))))
	f := Sidebyside(len(load))
	for _, d := range sorted {
		least := 0
		for i := range load {
			if load[i] < load[least] {
				least = i
			}
		}
		load[least] += time.Duration(float64(d) * f)
	}
	return slices.Max(load)
}

// Remaining is the expected wall time left once done of the plan's runs
// have finished after elapsed: the plan's estimate scaled by how the runs
// so far went against theirs (before any has finished, the estimate less
// the time gone).
func (p *ComparisonPlan) Remaining(done int, elapsed time.Duration) time.Duration {
	if done <= 0 || p.Runs == 0 {
		return max(0, p.Wall-elapsed)
	}
	var doneCost, all time.Duration
	for i, d := range p.costs {
		if i < done {
			doneCost += d
		}
		all += d
	}
	if doneCost <= 0 || done >= p.Runs {
		return 0
	}
	// The runs finish about in the plan's order; what is left takes what
	// the done part took, in proportion.
	return time.Duration(float64(elapsed) * float64(all-doneCost) / float64(doneCost))
}

// Write prints the plan: runs, lanes, the estimated wall time and where
// the figures come from, then a line per candidate with its scenarios,
// wrapped to width.
func (p *ComparisonPlan) Write(w io.Writer, width int) {
	fmt.Fprintf(w, "validate plan: %d candidates, %d runs, %d at a time; estimated wall time %v\n",
		len(p.Candidates), p.Runs, p.Parallel, p.Wall.Round(time.Second))
	fmt.Fprintf(w, "  (%s)\n", p.Source)
	namew := 0
	for _, c := range p.Candidates {
		namew = max(namew, len([]rune(c.Candidate.Label())))
	}
	namew = min(namew, 40)
	for _, c := range p.Candidates {
		runs := "runs"
		if c.Runs == 1 {
			runs = "run "
		}
		head := fmt.Sprintf("  %-*s %2d %s ~%-6v ", namew, c.Candidate.Label(), c.Runs, runs, c.Time.Round(time.Second))
		wrap(w, head, strings.Join(c.Scenarios, " "), width)
	}
}

// wrap writes text after prefix, its words wrapped to width, the lines
// after the first indented as far as the prefix.
func wrap(w io.Writer, prefix, text string, width int) {
	indent := strings.Repeat(" ", len([]rune(prefix)))
	line := prefix
	for _, word := range strings.Fields(text) {
		n := len([]rune(line))
		if n > len(indent) && n+1+len([]rune(word)) > width {
			fmt.Fprintln(w, strings.TrimRight(line, " "))
			line, n = indent, len(indent)
		}
		if n > len(indent) && !strings.HasSuffix(line, " ") {
			line += " "
		}
		line += word
	}
	fmt.Fprintln(w, strings.TrimRight(line, " "))
}
