package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/scenario"
)

// TestMatrix: the smoke set passes on real containers and writes JUnit;
// a deliberately wrong expectation makes the matrix fail with one clear
// line.
func TestMatrix(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, images.RoleClient, "redis")
	dir := t.TempDir()

	t.Run("smoke passes", func(t *testing.T) {
		junit := filepath.Join(dir, "junit.xml")
		code, out, stderr := run(t, "matrix", "--set", "smoke", "--results", filepath.Join(dir, "r1"), "--junit", junit, "--log-level", "warn")
		t.Logf("%s%s", out, stderr)
		if code != exitValid {
			t.Fatalf("exit %d", code)
		}
		b, err := os.ReadFile(junit)
		if err != nil || !strings.Contains(string(b), `failures="0"`) || !strings.Contains(string(b), "bypass-writer/redis/seed-1") {
			t.Fatalf("junit: %s %v", b, err)
		}
		if m, _ := filepath.Glob(filepath.Join(dir, "r1", "matrix", "smoke-*", "matrix.json")); len(m) != 1 {
			t.Fatalf("matrix.json: %v", m)
		}
	})

	t.Run("wrong expectation fails", func(t *testing.T) {
		set := filepath.Join(dir, "wrong.yaml")
		if err := os.WriteFile(set, []byte("name: wrong\ntime_limit: 8s\nscenarios:\n  - name: correct-pattern\n    targets: [redis]\n    valid: \"false\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, stderr := run(t, "matrix", "--set", set, "--results", filepath.Join(dir, "r2"), "--log-level", "warn")
		t.Logf("%s%s", out, stderr)
		last := strings.TrimSpace(stderr[strings.LastIndex(strings.TrimSpace(stderr), "\n")+1:])
		if code != exitInvalid || !strings.Contains(last, "correct-pattern on redis") || !strings.Contains(last, "expected invalid") {
			t.Fatalf("exit %d, last line %q", code, last)
		}
	})
}

// TestMatrixParallel: two cells side by side on real containers, each on
// its own network, give the verdicts they give one at a time (the smoke
// set's), overlap in time, and leave nothing behind.
func TestMatrixParallel(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, images.RoleClient, "redis")
	dir := t.TempDir()
	set := filepath.Join(dir, "two.yaml")
	if err := os.WriteFile(set, []byte("name: two\ntime_limit: 8s\nscenarios:\n  - {name: bypass-writer, targets: [redis]}\n  - {name: correct-pattern, targets: [redis]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := run(t, "matrix", "--set", set, "--parallel", "2", "--results", dir, "--log-level", "warn")
	t.Logf("%s%s", out, stderr)
	if code != exitValid {
		t.Fatalf("exit %d", code)
	}
	paths, _ := filepath.Glob(filepath.Join(dir, "matrix", "two-*", "matrix.json"))
	if len(paths) != 1 {
		t.Fatalf("matrix.json: %v", paths)
	}
	b, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	var m scenario.Matrix
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Rows) != 2 || m.Rows[0].Verdict != checkers.Invalid || m.Rows[1].Verdict != checkers.Valid || m.Parallel != 2 {
		t.Fatalf("rows %+v, parallel %d", m.Rows, m.Parallel)
	}
	if sum := m.Rows[0].Duration + m.Rows[1].Duration; m.Duration >= sum {
		t.Errorf("matrix took %v, its runs %v together: they did not overlap", m.Duration, sum)
	}
	for _, r := range m.Rows {
		var res struct {
			RunID string `json:"run_id"`
		}
		if b, err := os.ReadFile(filepath.Join(r.Dir, "results.json")); err != nil || json.Unmarshal(b, &res) != nil || res.RunID == "" {
			t.Fatalf("results.json of %s: %v", r.Dir, err)
		}
		f := filters.NewArgs(filters.Arg("label", runtime.LabelRun+"="+res.RunID))
		cs, _ := cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: f})
		ns, _ := cli.NetworkList(context.Background(), network.ListOptions{Filters: f})
		if len(cs)+len(ns) != 0 {
			t.Errorf("run %s left %d containers and %d networks", res.RunID, len(cs), len(ns))
		}
	}
}
