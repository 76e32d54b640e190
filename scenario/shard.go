package scenario

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/harness"
)

// Shard names part I of N of a set's cells (matrix --shard I/N). The zero
// Shard is the whole set.
type Shard struct{ I, N int }

// ParseShard reads "I/N" (1 ≤ I ≤ N); "" is the whole set. A bad value is
// an InputError naming the form.
func ParseShard(s string) (Shard, error) {
	if s == "" {
		return Shard{}, nil
	}
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	switch {
	case !ok || err1 != nil || err2 != nil:
		return Shard{}, harness.BadInput("--shard %q: want I/N, e.g. 2/3 (this runner runs part 2 of 3)", s)
	case n < 1 || i < 1 || i > n:
		return Shard{}, harness.BadInput("--shard %s: want 1 ≤ I ≤ N, e.g. 1/%d … %d/%d", s, max(n, 1), max(n, 1), max(n, 1))
	}
	return Shard{I: i, N: n}, nil
}

// Whole reports whether s is the whole set (no sharding).
func (s Shard) Whole() bool { return s.N <= 1 }

func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.I, s.N) }

// CellKey identifies a cell of a set: a scenario on a target with a client
// and a seed. Every run of a cell (its repeats) goes to the same shard, so
// that the cell is judged on all of them.
type CellKey struct {
	Scenario, Target, Client string
	Seed                     uint64
}

func (k CellKey) String() string {
	return fmt.Sprintf("%s/%s/seed-%d", k.Scenario, Row{RunIdentity: RunIdentity{Target: k.Target, Client: k.Client}}.Where(), k.Seed)
}

func (j job) key() CellKey { return CellKey{j.sc.Name, j.target, j.client, j.seed} }

// RowKey is the cell of a row.
func (r Row) key() CellKey { return CellKey{r.Scenario, r.Target, r.Client, r.Seed} }

// DefaultOverhead is a run's expected time outside its test phase (bring-up,
// final reads, check, clean-up) when no earlier run says better: about 11 s
// on this project's 2-core machine for the nightly set's runs of 20 s, one
// at a time (docs/performance.md, "The full nightly set on a quiet
// machine": 31.9 s a run on average).
const DefaultOverhead = 12 * time.Second

// Costs are what the split expects runs to take.
type Costs struct {
	// Overhead is a run's time outside its test phase, per target (a
	// target not named takes DefaultOverhead).
	Overhead map[string]time.Duration
	// Cells are cells' measured times outside the test phase (one run's
	// mean), by CellKey.String().
	Cells map[string]time.Duration
	// Source says where the figures come from.
	Source string
}

// DefaultCosts are the costs without earlier results: each run its time
// limit plus DefaultOverhead.
func DefaultCosts() Costs {
	return Costs{Source: fmt.Sprintf("time limit + %v a run (the default: no earlier results given)", DefaultOverhead)}
}

// CostsFrom reads the durations of earlier runs from matrix.json files:
// each cell's mean time outside the test phase (bring-up, final reads,
// check, clean-up: its run's duration less its set's time limit), and each
// target's (for cells they did not run). A run then costs its set's time
// limit plus that. Every runner of a sharded set
// must read the same files (commit them, or pass the same artefact), or
// the split differs: merge then refuses the shards.
func CostsFrom(paths []string) (Costs, error) {
	c := Costs{Overhead: map[string]time.Duration{}, Cells: map[string]time.Duration{}}
	type acc struct {
		sum time.Duration
		n   int
	}
	cells, over := map[string]*acc{}, map[string]*acc{}
	add := func(m map[string]*acc, k string, d time.Duration) {
		a := m[k]
		if a == nil {
			a = &acc{}
			m[k] = a
		}
		a.sum += d
		a.n++
	}
	for _, p := range paths {
		m, err := ReadMatrix(p)
		if err != nil {
			return c, harness.BadInput("--shard-costs: %v", err)
		}
		if m.Set == nil {
			return c, harness.BadInput("--shard-costs: %s has no set (not a matrix.json)", p)
		}
		for _, r := range m.Rows {
			if r.Duration <= 0 || r.Error != "" {
				continue
			}
			// Time outside the test phase: the same cell in a set with
			// another time limit costs that limit plus the same.
			o := max(0, r.Duration-m.Set.TimeLimit)
			add(cells, r.key().String(), o)
			add(over, r.Target, o)
		}
	}
	for k, a := range cells {
		c.Cells[k] = a.sum / time.Duration(a.n)
	}
	for k, a := range over {
		c.Overhead[k] = a.sum / time.Duration(a.n)
	}
	c.Source = fmt.Sprintf("measured in %s (%d cells, %d targets; others: time limit + %v a run)", strings.Join(paths, ", "), len(c.Cells), len(c.Overhead), DefaultOverhead)
	return c, nil
}

// run is the expected duration of one run of cell k of set.
func (c Costs) run(set *Set, k CellKey) time.Duration {
	if d, ok := c.Cells[k.String()]; ok {
		return set.TimeLimit + d
	}
	if d, ok := c.Overhead[k.Target]; ok {
		return set.TimeLimit + d
	}
	return set.TimeLimit + DefaultOverhead
}

// ReadMatrix reads a matrix.json.
func ReadMatrix(path string) (*Matrix, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read matrix: %w", err)
	}
	var m Matrix
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("read matrix %s: %w", path, err)
	}
	return &m, nil
}

// PlannedCell is a cell of a split: which set it belongs to, its runs,
// their expected duration and the shard (1-based) that runs it.
type PlannedCell struct {
	Set   string
	Key   CellKey
	Runs  int
	Cost  time.Duration
	Shard int
}

// Split is the assignment of the cells of one or more sets (validate runs
// a set per backend and client) to N shards.
type Split struct {
	N     int
	Cells []PlannedCell
	// Load is each shard's expected duration (index 0 is shard 1).
	Load []time.Duration
	// Hash fingerprints the sets (entries, seeds, time limits, repeats),
	// Plan the assignment.
	Hash, Plan string
	Costs      string
}

// SplitSets assigns the cells of sets to n shards, balanced by their
// expected durations: the longest cell first, each to the shard with the
// least expected time so far (the lower-numbered one on a tie; cells of
// equal cost in the sets' order). The result depends only on the sets,
// repeat (matrix --repeat), n and costs, so every runner computes the same
// split. No shard ends up expecting more than the least loaded one plus
// the longest cell.
func SplitSets(sets []*Set, repeat, n int, costs Costs) *Split {
	sp := &Split{N: n, Load: make([]time.Duration, n), Costs: costs.Source}
	idx := map[string]int{}
	rn := &Runner{Repeat: repeat}
	for _, set := range sets {
		for _, j := range rn.jobs(set) {
			id := set.Name + "\x00" + j.key().String()
			i, ok := idx[id]
			if !ok {
				i = len(sp.Cells)
				idx[id] = i
				sp.Cells = append(sp.Cells, PlannedCell{Set: set.Name, Key: j.key()})
			}
			sp.Cells[i].Runs++
			sp.Cells[i].Cost += costs.run(set, j.key())
		}
	}
	order := make([]int, len(sp.Cells))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(sp.Cells[b].Cost, sp.Cells[a].Cost) })
	for _, i := range order {
		least := 0
		for s := range sp.Load {
			if sp.Load[s] < sp.Load[least] {
				least = s
			}
		}
		sp.Cells[i].Shard = least + 1
		sp.Load[least] += sp.Cells[i].Cost
	}
	b, _ := json.Marshal(struct {
		Sets   []*Set
		Repeat int
	}{sets, repeat})
	sum := sha256.Sum256(b)
	sp.Hash = hex.EncodeToString(sum[:8])
	h := sha256.New()
	for _, c := range sp.Cells {
		fmt.Fprintf(h, "%s\x00%s\x00%d\n", c.Set, c.Key, c.Shard)
	}
	sp.Plan = hex.EncodeToString(h.Sum(nil)[:8])
	return sp
}

// Keep reports whether shard i runs cell k of the set called set.
func (sp *Split) Keep(i int, set string, k CellKey) bool {
	for _, c := range sp.Cells {
		if c.Set == set && c.Key == k {
			return c.Shard == i
		}
	}
	return false
}

// Of lists the cells shard i runs, in the sets' order.
func (sp *Split) Of(i int) []PlannedCell {
	var out []PlannedCell
	for _, c := range sp.Cells {
		if c.Shard == i {
			out = append(out, c)
		}
	}
	return out
}

// Write prints the split as shard i sees it (before any work): every
// shard's expected time, then the cells shard i runs.
func (sp *Split) Write(w io.Writer, i int) {
	mine := sp.Of(i)
	fmt.Fprintf(w, "shard %d/%d: %d of %d cells, expected %v (split %s of sets %s; every shard: %s; costs: %s)\n",
		i, sp.N, len(mine), len(sp.Cells), sp.Load[i-1].Round(time.Second), sp.Plan, sp.Hash, sp.loads(), sp.Costs)
	for _, c := range mine {
		fmt.Fprintf(w, "  %-12s %-48s %d run(s), ~%v\n", c.Set, c.Key, c.Runs, c.Cost.Round(time.Second))
	}
}

func (sp *Split) loads() string {
	var parts []string
	for s, l := range sp.Load {
		parts = append(parts, fmt.Sprintf("%d: %v", s+1, l.Round(time.Second)))
	}
	return strings.Join(parts, ", ")
}

// ShardStamp says which part of what a results directory holds: written in
// each shard's matrix.json ("shard") so that merge can put the parts
// together, and refuse parts of different runs.
type ShardStamp struct {
	I int `json:"i"`
	N int `json:"n"`
	// Plan is what was split: "matrix SET" or "validate CANDIDATES".
	Plan string `json:"plan"`
	// Sets are the names of the split's sets in their order (validate: a
	// set per backend and client).
	Sets []string `json:"sets"`
	// Hash fingerprints the sets, Split the assignment of cells to shards.
	Hash   string   `json:"hash"`
	Split  string   `json:"split"`
	Commit string   `json:"commit"`
	Seeds  []uint64 `json:"seeds"`
	// Cells are the cells this shard ran (CellKey.String), of every set.
	Cells []string `json:"cells"`
	// ResultsDir is the results directory the shard wrote into, as given
	// (its rows' directories start with it).
	ResultsDir string `json:"results_dir"`
	Costs      string `json:"costs"`
}

// Stamp is the stamp of shard i of sp, planned for what plan says.
func (sp *Split) Stamp(i int, plan string, sets []*Set, commit, resultsDir string) *ShardStamp {
	st := &ShardStamp{I: i, N: sp.N, Plan: plan, Hash: sp.Hash, Split: sp.Plan, Commit: commit, ResultsDir: resultsDir, Costs: sp.Costs}
	for _, s := range sets {
		st.Sets = append(st.Sets, s.Name)
		for _, sd := range s.Seeds {
			if !slices.Contains(st.Seeds, sd) {
				st.Seeds = append(st.Seeds, sd)
			}
		}
	}
	for _, c := range sp.Of(i) {
		st.Cells = append(st.Cells, c.Set+":"+c.Key.String())
	}
	return st
}

// Commit is the commit the harness was built from: $SPLITBRAIN_COMMIT,
// else the CI system's ($GITHUB_SHA, $CI_COMMIT_SHA), else the binary's
// version-control stamp (with "+dirty" for a modified tree), else
// "unknown".
func Commit() string {
	for _, v := range []string{"SPLITBRAIN_COMMIT", "GITHUB_SHA", "CI_COMMIT_SHA"} {
		if s := os.Getenv(v); s != "" {
			return s
		}
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" && dirty {
			return rev + "+dirty"
		}
		if rev != "" {
			return rev
		}
	}
	return "unknown"
}

// ShardPlan is one runner's part of a sharded matrix or validation: the
// split of every set's cells and the shard this runner runs.
type ShardPlan struct {
	Shard Shard
	Split *Split
	// Plan says what was split ("matrix nightly", "validate etcd,redis").
	Plan   string
	Sets   []*Set
	Commit string
}

// PlanShards parses shard ("I/N"; "" is no sharding: a nil plan) and
// splits the cells of sets, run repeat times each (matrix --repeat; zero:
// each entry's own), by the costs read from costFiles (earlier matrix.json
// files; none: DefaultCosts). Bad input is an InputError.
func PlanShards(plan, shard string, sets []*Set, repeat int, costFiles []string) (*ShardPlan, error) {
	sh, err := ParseShard(shard)
	if err != nil || sh.N == 0 {
		return nil, err
	}
	costs := DefaultCosts()
	if len(costFiles) > 0 {
		if costs, err = CostsFrom(costFiles); err != nil {
			return nil, err
		}
	}
	return &ShardPlan{Shard: sh, Split: SplitSets(sets, repeat, sh.N, costs), Plan: plan, Sets: sets, Commit: Commit()}, nil
}

// Apply makes rn run only this shard's cells of its sets and stamp its
// matrices.
func (p *ShardPlan) Apply(rn *Runner) {
	if p == nil {
		return
	}
	rn.Keep = func(set string, k CellKey) bool { return p.Split.Keep(p.Shard.I, set, k) }
	rn.Shard = p.Split.Stamp(p.Shard.I, p.Plan, p.Sets, p.Commit, rn.ResultsDir)
}

// Write prints the split as this runner sees it, before any work.
func (p *ShardPlan) Write(w io.Writer) {
	if p != nil {
		p.Split.Write(w, p.Shard.I)
	}
}
