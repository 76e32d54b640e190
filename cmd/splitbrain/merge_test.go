package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/scenario"
)

// TestShardRefusedBeforeDocker: a bad --shard (and --shard-costs without
// it) is one line and exit 254 from matrix and validate, found before any
// engine work (the daemon is unreachable here), and leaves no results.
func TestShardRefusedBeforeDocker(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no.sock"))
	dir := t.TempDir()
	t.Chdir(dir)
	res := filepath.Join(dir, "results")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"matrix", "--set", "smoke", "--shard", "0/3"}, "--shard 0/3: want 1 ≤ I ≤ N"},
		{[]string{"matrix", "--set", "smoke", "--shard", "4/3"}, "--shard 4/3: want 1 ≤ I ≤ N"},
		{[]string{"matrix", "--set", "smoke", "--shard", "two"}, `--shard "two": want I/N`},
		{[]string{"validate", "--target", "redis", "--shard", "1/0"}, "--shard 1/0"},
		{[]string{"validate", "--target", "redis", "--shard", "3"}, `--shard "3": want I/N`},
		{[]string{"matrix", "--set", "smoke", "--shard-costs", "m.json"}, "--shard-costs balances a --shard split"},
		{[]string{"matrix", "--set", "smoke", "--shard", "1/2", "--shard-costs", "none.json"}, "--shard-costs: read matrix"},
		{[]string{"merge"}, "name the shards' results directories"},
		{[]string{"merge", filepath.Join(dir, "nope")}, "is not a directory"},
		{[]string{"merge", dir}, "no shard's matrix.json under"},
		{[]string{"merge", "--page", "p.html", "a"}, "is not a directory"},
	} {
		code, _, stderr := run(t, append(tc.args, "--results", res)...)
		if code != exitBadInput || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and one line with %q", tc.args, code, stderr, exitBadInput, tc.want)
		}
	}
	if _, err := os.Stat(res); err == nil {
		t.Errorf("bad input left a results directory")
	}
}

// TestMergeCommand merges two shards written as runners write them: the
// whole set passes (exit 0) with a JUnit file, rates table and merged
// directory; one shard alone is a failure (exit 1) naming the missing
// shard; shards of two commits are refused (exit 254) naming the commits.
func TestMergeCommand(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	set, err := scenario.LoadSet("smoke")
	if err != nil {
		t.Fatal(err)
	}
	write := func(i int, commit string) string {
		t.Setenv("SPLITBRAIN_COMMIT", commit)
		plan, err := scenario.PlanShards("matrix smoke", "1/2", []*scenario.Set{set}, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		plan.Shard.I = i
		res := filepath.Join(dir, commit, "shard", string(rune('0'+i)))
		rn := &scenario.Runner{ResultsDir: res}
		plan.Apply(rn)
		m := &scenario.Matrix{Set: set, Started: time.Now().UTC(), Shard: rn.Shard}
		for _, c := range plan.Split.Of(i) {
			m.Rows = append(m.Rows, scenario.Row{RunIdentity: scenario.RunIdentity{Scenario: c.Key.Scenario, Target: c.Key.Target, Seed: c.Key.Seed}, Verdicts: scenario.Verdicts{Verdict: checkers.Valid}})
			m.Cells = append(m.Cells, scenario.Cell{Scenario: c.Key.Scenario, Target: c.Key.Target, Seed: c.Key.Seed, Runs: 1, Passed: 1, Need: 1})
		}
		if err := m.WriteJSON(filepath.Join(res, "matrix", "smoke", "matrix.json")); err != nil {
			t.Fatal(err)
		}
		return res
	}
	one, two, other := write(1, "aaa"), write(2, "aaa"), write(2, "bbb")
	out := filepath.Join(dir, "merged")
	code, stdout, stderr := run(t, "merge", one, two, "--results", out, "--junit", filepath.Join(out, "junit.xml"), "--rates", filepath.Join(out, "rates.md"))
	if code != 0 || !strings.Contains(stdout, "merged 2 shards") {
		t.Fatalf("merge of both shards: exit %d, %s %s", code, stdout, stderr)
	}
	for _, f := range []string{"junit.xml", "rates.md"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if code, _, stderr = run(t, "merge", one, "--results", filepath.Join(dir, "m2")); code != exitInvalid || !strings.Contains(stderr, "shard 2/2 missing") {
		t.Errorf("one shard of two: exit %d, %q", code, stderr)
	}
	if code, _, stderr = run(t, "merge", one, other, "--results", filepath.Join(dir, "m3")); code != exitBadInput || !strings.Contains(stderr, "commit: aaa in") || !strings.Contains(stderr, "bbb in") {
		t.Errorf("shards of two commits: exit %d, %q", code, stderr)
	}
}
