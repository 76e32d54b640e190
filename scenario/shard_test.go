package scenario

import (
	"context"
	"encoding/xml"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/harness/harnesstest"
	"github.com/splitbrain/splitbrain/targets/inmem"
)

func TestParseShard(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Shard
		bad  bool
	}{
		{"", Shard{}, false},
		{"1/1", Shard{1, 1}, false},
		{"2/3", Shard{2, 3}, false},
		{"3/3", Shard{3, 3}, false},
		{"0/3", Shard{}, true},
		{"4/3", Shard{}, true},
		{"1/0", Shard{}, true},
		{"-1/3", Shard{}, true},
		{"2", Shard{}, true},
		{"a/b", Shard{}, true},
		{"1/2/3", Shard{}, true},
	} {
		got, err := ParseShard(tc.in)
		if tc.bad {
			if err == nil || !harness.IsBadInput(err) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%q: error %v, want one line of bad input", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestSplitDeterministicBalanced splits the nightly set 1, 2, 3, 4 and 8
// ways: each split is the same when computed again from a set read afresh,
// every cell is in exactly one shard with all its runs, the shards' loads
// add up to the set's, and no shard expects more than the least loaded one
// plus the longest cell.
func TestSplitDeterministicBalanced(t *testing.T) {
	load := func() *Set {
		s, err := LoadSet("nightly")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	set := load()
	jobs := (&Runner{}).jobs(set)
	cells := map[CellKey]int{}
	for _, j := range jobs {
		cells[j.key()]++
	}
	for _, n := range []int{1, 2, 3, 4, 8} {
		a := SplitSets([]*Set{set}, 0, n, DefaultCosts())
		b := SplitSets([]*Set{load()}, 0, n, DefaultCosts())
		if a.Plan != b.Plan || a.Hash != b.Hash || !slices.Equal(a.Load, b.Load) {
			t.Errorf("%d shards: two splits of the same set differ: %s/%s vs %s/%s", n, a.Plan, a.Hash, b.Plan, b.Hash)
		}
		if len(a.Cells) != len(cells) {
			t.Fatalf("%d shards: %d cells planned, the set has %d", n, len(a.Cells), len(cells))
		}
		var total, longest time.Duration
		seen := map[CellKey]int{}
		for _, c := range a.Cells {
			seen[c.Key]++
			if c.Runs != cells[c.Key] {
				t.Errorf("%d shards: cell %s has %d runs planned, %d in the set", n, c.Key, c.Runs, cells[c.Key])
			}
			if want := time.Duration(c.Runs) * (set.TimeLimit + DefaultOverhead); c.Cost != want {
				t.Errorf("%d shards: cell %s costs %v, want %v", n, c.Key, c.Cost, want)
			}
			if c.Shard < 1 || c.Shard > n {
				t.Errorf("%d shards: cell %s in shard %d", n, c.Key, c.Shard)
			}
			total += c.Cost
			longest = max(longest, c.Cost)
		}
		for k, c := range seen {
			if c != 1 {
				t.Errorf("%d shards: cell %s planned %d times", n, k, c)
			}
		}
		var sum time.Duration
		for i, l := range a.Load {
			sum += l
			var got time.Duration
			for _, c := range a.Of(i + 1) {
				got += c.Cost
			}
			if got != l {
				t.Errorf("%d shards: shard %d's cells add up to %v, its load says %v", n, i+1, got, l)
			}
		}
		if sum != total {
			t.Errorf("%d shards: loads add up to %v, cells to %v", n, sum, total)
		}
		if hi, lo := slices.Max(a.Load), slices.Min(a.Load); hi > lo+longest {
			t.Errorf("%d shards: loads %v: the most loaded exceeds the least by more than the longest cell (%v)", n, a.Load, longest)
		}
		// Runners keep exactly their own cells.
		for _, j := range jobs {
			owners := 0
			for i := 1; i <= n; i++ {
				if a.Keep(i, set.Name, j.key()) {
					owners++
				}
			}
			if owners != 1 {
				t.Errorf("%d shards: job %s kept by %d shards", n, j.key(), owners)
			}
		}
	}
	// Another set, or other seeds, is another split.
	other := load()
	other.Seeds = []uint64{2}
	if a, b := SplitSets([]*Set{set}, 0, 3, DefaultCosts()), SplitSets([]*Set{other}, 0, 3, DefaultCosts()); a.Hash == b.Hash {
		t.Errorf("sets with other seeds share hash %s", a.Hash)
	}
}

// TestSplitByMeasuredCosts balances by an earlier run's durations: a cell
// measured long gets a shard to itself.
func TestSplitByMeasuredCosts(t *testing.T) {
	set := &Set{Name: "m", TimeLimit: 10 * time.Second, Seeds: []uint64{1}, Repetitions: 1, Entries: []Entry{
		{Scenario: "correct-pattern", Targets: []string{"redis", "etcd", "lockd"}},
		{Scenario: "bypass-writer", Targets: []string{"redis"}},
	}}
	earlier := &Matrix{Set: set, Rows: []Row{
		{RunIdentity: RunIdentity{Scenario: "correct-pattern", Target: "etcd", Seed: 1}, Duration: 100 * time.Second}, // 90 s outside the test
		{RunIdentity: RunIdentity{Scenario: "bypass-writer", Target: "lockd", Seed: 1}, Duration: 15 * time.Second},   // lockd's overhead: 5 s
	}}
	path := filepath.Join(t.TempDir(), "matrix.json")
	if err := earlier.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	costs, err := CostsFrom([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	set.TimeLimit = 20 * time.Second // the same cells with another time limit
	sp := SplitSets([]*Set{set}, 0, 2, costs)
	want := map[string]time.Duration{
		"correct-pattern/etcd/seed-1":  110 * time.Second,
		"correct-pattern/lockd/seed-1": 25 * time.Second,
		"correct-pattern/redis/seed-1": 20*time.Second + DefaultOverhead,
		"bypass-writer/redis/seed-1":   20*time.Second + DefaultOverhead,
	}
	for _, c := range sp.Cells {
		if c.Cost != want[c.Key.String()] {
			t.Errorf("%s: cost %v, want %v", c.Key, c.Cost, want[c.Key.String()])
		}
	}
	if of := sp.Of(1); len(of) != 1 || of[0].Key.Target != "etcd" {
		t.Errorf("shard 1 runs %v, want the long etcd cell alone", of)
	}
	if _, err := CostsFrom([]string{filepath.Join(t.TempDir(), "none.json")}); !harness.IsBadInput(err) {
		t.Errorf("a missing costs file: %v, want bad input", err)
	}
}

// fakeShard writes shard i of n of set as a runner would, without running
// anything: each of its cells gets rows that pass, with a run directory.
func fakeShard(t *testing.T, set *Set, sp *Split, i int, commit string) string {
	t.Helper()
	return fakeShards(t, "matrix "+set.Name, []*Set{set}, sp, i, commit)
}

// fakeShards is fakeShard for several sets (validate's: one per backend
// and client), a matrix.json each.
func fakeShards(t *testing.T, plan string, sets []*Set, sp *Split, i int, commit string) string {
	t.Helper()
	dir := t.TempDir()
	for _, set := range sets {
		rn := &Runner{ResultsDir: dir}
		(&ShardPlan{Shard: Shard{i, sp.N}, Split: sp, Plan: plan, Sets: sets, Commit: commit}).Apply(rn)
		m := &Matrix{Set: set, Started: time.Now().UTC(), Shard: rn.Shard, Duration: time.Minute}
		for _, j := range rn.jobs(set) {
			if !rn.Keep(set.Name, j.key()) {
				continue
			}
			run := filepath.Join(dir, j.target+"-x", time.Now().Format("150405.000000000"))
			if err := os.MkdirAll(run, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(run, "results.json"), []byte("{}"), 0o644); err != nil {
				t.Fatal(err)
			}
			m.add(Row{RunIdentity: RunIdentity{Scenario: j.sc.Name, Target: j.target, Seed: j.seed, Rep: j.rep}, Verdicts: Verdicts{Verdict: checkers.Valid, Lock: checkers.Valid, Data: checkers.Valid}, Duration: time.Second, Dir: run, RunConfig: RunConfig{UnderTest: j.sc.UnderTest()}}, j.e.need(j.n))
		}
		if err := m.WriteJSON(filepath.Join(dir, "matrix", set.Name, "matrix.json")); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestMergeValidate merges the shards of a validation of two backends (a
// set each, cells of both in every shard): one matrix per backend in the
// validation's order, a checklist column each, the checklist page and its
// JUnit file (a suite per backend, a case per item); a missing shard
// leaves its runs out of the checklists and fails the merge.
func TestMergeValidate(t *testing.T) {
	var sets []*Set
	for _, target := range []string{"redis", "etcd"} {
		s, err := ValidationSetWith(target, "", nil, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		sets = append(sets, s)
	}
	sp := SplitSets(sets, 0, 2, DefaultCosts())
	for i := 1; i <= 2; i++ {
		seen := map[string]bool{}
		for _, c := range sp.Of(i) {
			seen[c.Set] = true
		}
		if len(seen) != 2 {
			t.Fatalf("shard %d holds cells of %v only; the test wants both sets in each", i, seen)
		}
	}
	dirs := []string{fakeShards(t, "validate redis,etcd", sets, sp, 1, "c"), fakeShards(t, "validate redis,etcd", sets, sp, 2, "c")}
	out := t.TempDir()
	page, junit := filepath.Join(out, "page.html"), filepath.Join(out, "junit.xml")
	mg, err := Merge(dirs, MergeOptions{Results: out, Page: page, JUnit: junit})
	if err != nil {
		t.Fatal(err)
	}
	if len(mg.Problems) > 0 || len(mg.Matrices) != 2 || len(mg.Columns) != 2 {
		t.Fatalf("problems %q, %d matrices, %d columns", mg.Problems, len(mg.Matrices), len(mg.Columns))
	}
	for i, want := range []string{"redis", "etcd"} {
		if c := mg.Columns[i]; c.Target != want || len(c.Items) != len(questions) || len(c.Rows) != len(sets[i].Entries) {
			t.Errorf("column %d: %s, %d items, %d rows; want %s, %d items, %d rows", i, c.Target, len(c.Items), len(c.Rows), want, len(questions), len(sets[i].Entries))
		}
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var doc junitSuites
	if err := xml.Unmarshal(b, &doc); err != nil || len(doc.Suites) != 2 || len(doc.Suites[0].Cases) != len(questions) {
		t.Errorf("checklist JUnit: %v, %+v", err, doc)
	}
	if b, err := os.ReadFile(page); err != nil || !regexp.MustCompile(`<th title="redis">.*</th><th title="etcd">`).Match(b) {
		t.Errorf("checklist page: %v, %.300s", err, b)
	}
	// Without shard 2, its runs are out of the checklists.
	half, err := Merge(dirs[:1], MergeOptions{Results: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(half.Problems) != 1 || half.Failed() != len(sp.Of(2)) {
		t.Errorf("one shard of two: problems %q, %d failed cells, want %d", half.Problems, half.Failed(), len(sp.Of(2)))
	}
	for i, c := range half.Columns {
		for _, it := range c.Items {
			for _, r := range it.Runs {
				for _, pc := range sp.Of(2) {
					if pc.Set == sets[i].Name && pc.Key.Scenario == r.Scenario {
						t.Errorf("%s: item %q rests on %s, a run of the missing shard", c.Target, it.Question, r.Scenario)
					}
				}
			}
		}
	}
}

func smallSet() *Set {
	return &Set{Name: "small", TimeLimit: 10 * time.Second, Seeds: []uint64{1, 7}, Repetitions: 1, Entries: []Entry{
		{Scenario: "correct-pattern", Targets: []string{"redis", "etcd"}},
		{Scenario: "bypass-writer", Targets: []string{"redis"}, Repeat: 2},
	}}
}

// TestMergeRefusesMixedShards: shards of another set, seeds, commit or
// split are refused in one line naming the difference; nothing is written.
func TestMergeRefusesMixedShards(t *testing.T) {
	set := smallSet()
	sp := SplitSets([]*Set{set}, 0, 2, DefaultCosts())
	one := fakeShard(t, set, sp, 1, "abc")
	other := smallSet()
	other.Seeds = []uint64{1, 8}
	for _, tc := range []struct {
		name, two, want string
	}{
		{"commit", fakeShard(t, set, sp, 2, "def"), "commit: abc in"},
		{"seeds", fakeShard(t, other, SplitSets([]*Set{other}, 0, 2, DefaultCosts()), 2, "abc"), "differ in sets"},
		{"shards", fakeShard(t, set, SplitSets([]*Set{set}, 0, 3, DefaultCosts()), 2, "abc"), "number of shards: 2 in"},
	} {
		out := filepath.Join(t.TempDir(), "merged")
		_, err := Merge([]string{one, tc.two}, MergeOptions{Results: out})
		if !harness.IsBadInput(err) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line of bad input with %q", tc.name, err, tc.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: refused merge wrote %s", tc.name, out)
		}
	}
	if _, err := Merge([]string{t.TempDir()}, MergeOptions{Results: t.TempDir()}); !harness.IsBadInput(err) {
		t.Errorf("a directory without shards: %v, want bad input", err)
	}
}

// TestMergeMissingOrDuplicatedShard: the cells of a missing shard, and of
// a shard given twice, are runs that did not run (errors that fail their
// cells), in the set's order; the merged matrix has every cell.
func TestMergeMissingOrDuplicatedShard(t *testing.T) {
	set := smallSet()
	sp := SplitSets([]*Set{set}, 0, 3, DefaultCosts())
	dirs := []string{fakeShard(t, set, sp, 1, "c"), fakeShard(t, set, sp, 2, "c"), fakeShard(t, set, sp, 3, "c")}
	all := (&Runner{}).jobs(set)

	full, err := Merge(dirs, MergeOptions{Results: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(full.Problems) != 0 || full.Failed() != 0 || len(full.Matrices[0].Rows) != len(all) {
		t.Fatalf("all shards: problems %q, %d failed, %d rows of %d", full.Problems, full.Failed(), len(full.Matrices[0].Rows), len(all))
	}
	for i, r := range full.Matrices[0].Rows {
		if r.key() != all[i].key() || r.Rep != all[i].rep {
			t.Errorf("row %d is %s run %d, the set's order has %s run %d", i, r.key(), r.Rep, all[i].key(), all[i].rep)
		}
		if _, err := os.Stat(filepath.Join(r.Dir, "results.json")); err != nil {
			t.Errorf("row %d: run not copied beside the merged matrix: %v", i, err)
		}
	}

	for _, tc := range []struct {
		name   string
		dirs   []string
		absent int
		want   string
	}{
		{"missing", []string{dirs[0], dirs[2]}, 2, "shard 2/3 missing"},
		{"duplicated", []string{dirs[0], dirs[1], dirs[2], fakeShard(t, set, sp, 2, "c")}, 2, "shard 2/3 found twice"},
	} {
		mg, err := Merge(tc.dirs, MergeOptions{Results: t.TempDir(), JUnit: filepath.Join(t.TempDir(), "junit.xml")})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(mg.Problems) != 1 || !strings.Contains(mg.Problems[0], tc.want) {
			t.Errorf("%s: problems %q, want %q", tc.name, mg.Problems, tc.want)
		}
		m := mg.Matrices[0]
		if len(m.Rows) != len(all) || len(m.Cells) != len(full.Matrices[0].Cells) {
			t.Fatalf("%s: %d rows, %d cells; want %d, %d", tc.name, len(m.Rows), len(m.Cells), len(all), len(full.Matrices[0].Cells))
		}
		notRun := 0
		for _, c := range sp.Of(tc.absent) {
			notRun++
			for _, mc := range m.Cells {
				if mc.Scenario == c.Key.Scenario && mc.Target == c.Key.Target && mc.Seed == c.Key.Seed && mc.Pass() {
					t.Errorf("%s: cell %s of the absent shard passes", tc.name, c.Key)
				}
			}
		}
		if notRun == 0 || m.Failed() != notRun {
			t.Errorf("%s: %d cells failed, want the %d of shard %d", tc.name, m.Failed(), notRun, tc.absent)
		}
		for _, r := range m.Rows {
			if !r.Pass() && !strings.HasPrefix(r.Error, "not run: ") {
				t.Errorf("%s: failing row %s: %q", tc.name, r.key(), r.Error)
			}
		}
	}
}

// TestMergeEqualsUnsharded runs a set on the in-memory lock service once
// whole and once in two shards (each its own results directory, as two
// runners would), merges the shards and finds the same rows, cells and
// verdicts in the same order, a JUnit file of the same shape, and a merged
// directory serve can show (its matrix.json and the runs under it).
func TestMergeEqualsUnsharded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the harness for about 30s")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "three.yaml")
	if err := os.WriteFile(path, []byte(`name: three
time_limit: 4s
seeds: [1]
scenarios:
  - {name: correct-pattern, targets: [etcd]}
  - {name: bypass-writer, targets: [redis], valid: "true"}
  - {name: correct-pattern, targets: [redis]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := LoadSet(path)
	if err != nil {
		t.Fatal(err)
	}
	w := harnesstest.World{Target: inmem.Target{Alias: "redis"}}
	whole := (&Runner{Deps: w.Deps(t), ResultsDir: filepath.Join(dir, "whole")}).Run(context.Background(), set)
	if err := whole.WriteJUnit(filepath.Join(dir, "whole.xml")); err != nil {
		t.Fatal(err)
	}
	var shards []string
	for i := 1; i <= 2; i++ {
		plan, err := PlanShards("matrix three", "2/2", []*Set{set}, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		plan.Shard.I = i
		res := filepath.Join(dir, "shard", string(rune('0'+i)))
		rn := &Runner{Deps: w.Deps(t), ResultsDir: res}
		plan.Apply(rn)
		m := rn.Run(context.Background(), set)
		if len(m.Rows) == 0 || len(m.Rows) == len(whole.Rows) {
			t.Errorf("shard %d ran %d of %d runs", i, len(m.Rows), len(whole.Rows))
		}
		if err := m.WriteJSON(filepath.Join(res, "matrix", "three", "matrix.json")); err != nil {
			t.Fatal(err)
		}
		shards = append(shards, res)
	}
	out := filepath.Join(dir, "merged")
	mg, err := Merge(shards, MergeOptions{Results: out, JUnit: filepath.Join(dir, "merged.xml")})
	if err != nil {
		t.Fatal(err)
	}
	if len(mg.Problems) > 0 {
		t.Fatalf("problems: %q", mg.Problems)
	}
	m := mg.Matrices[0]
	if len(m.Rows) != len(whole.Rows) || len(m.Cells) != len(whole.Cells) {
		t.Fatalf("merged %d rows, %d cells; whole %d, %d", len(m.Rows), len(m.Cells), len(whole.Rows), len(whole.Cells))
	}
	for i, r := range m.Rows {
		wr := whole.Rows[i]
		if r.key() != wr.key() || r.Verdict != wr.Verdict || r.Pass() != wr.Pass() || r.Lock != wr.Lock || r.Data != wr.Data {
			t.Errorf("row %d: merged %s valid=%s pass=%v, whole %s valid=%s pass=%v", i, r.key(), r.Verdict, r.Pass(), wr.key(), wr.Verdict, wr.Pass())
		}
		if r.Dir == "" {
			continue // no run directory (etcd not started)
		}
		if !strings.HasPrefix(r.Dir, out) {
			t.Errorf("row %d: run %s not under the merged directory", i, r.Dir)
		}
		if _, err := os.Stat(filepath.Join(r.Dir, "results.json")); err != nil {
			t.Errorf("row %d: %v", i, err)
		}
	}
	for i, c := range m.Cells {
		wc := whole.Cells[i]
		if c.Scenario != wc.Scenario || c.Target != wc.Target || c.Seed != wc.Seed || c.Runs != wc.Runs || c.Need != wc.Need || c.Pass() != wc.Pass() {
			t.Errorf("cell %d: merged %+v, whole %+v", i, c, wc)
		}
	}
	// The harness cannot start etcd here (an error) and the bypass
	// writer said to be valid is not: both fail, whole or merged.
	if m.Failed() != 2 || whole.Failed() != 2 || m.Cells[0].Errors != 1 || m.Cells[2].Pass() != true {
		t.Errorf("failed cells: merged %d, whole %d; want 2 (etcd not started, the bypass writer said to be valid)", m.Failed(), whole.Failed())
	}
	shape := func(p string) []string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var doc junitSuites
		if err := xml.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range doc.Suites {
			out = append(out, s.Name)
			for _, c := range s.Cases {
				out = append(out, c.Name+" "+c.Classname+" failure="+boolString(c.Failure != nil)+" error="+boolString(c.Error != nil))
			}
		}
		return out
	}
	if a, b := shape(filepath.Join(dir, "merged.xml")), shape(filepath.Join(dir, "whole.xml")); !slices.Equal(a, b) {
		t.Errorf("JUnit:\nmerged %q\nwhole  %q", a, b)
	}
	if got, err := ReadMatrix(mg.Paths[0]); err != nil || len(got.Merged) != 2 || got.Shard != nil {
		t.Errorf("merged matrix.json: %v, parts %+v", err, got)
	}
	if _, err := filepath.Rel(out, mg.Paths[0]); err != nil || !strings.HasPrefix(mg.Paths[0], filepath.Join(out, "matrix")+string(filepath.Separator)) {
		t.Errorf("merged matrix at %s, want under %s/matrix (where serve looks)", mg.Paths[0], out)
	}
}

func boolString(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
