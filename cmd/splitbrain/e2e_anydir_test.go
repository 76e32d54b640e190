package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime/images"
)

// TestAnyDirectory: the built binary, copied to an empty directory outside
// the repository, works with no source tree: help, bad input, and a short
// real run on Redis (its own static executable is the agent and the node
// program in the images) that ends valid with its results under that
// directory.
func TestAnyDirectory(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, images.RoleClient, "redis")
	dir := t.TempDir()
	bin := filepath.Join(dir, "splitbrain")
	// Built as `make demo` builds it (and as the images' copy is built), so
	// the images made from the tree serve it too.
	build := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if _, ok := images.FindSource(dir); ok {
		t.Fatalf("%s is inside the source tree", dir)
	}
	sb := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		t.Logf("splitbrain %s: exit %d\n%s%s", strings.Join(args, " "), code, o.String(), e.String())
		return code, o.String(), e.String()
	}
	if code, out, _ := sb("help", "run"); code != 0 || !strings.Contains(out, "--time-limit") {
		t.Fatalf("help run: exit %d", code)
	}
	if code, _, stderr := sb("validate", "--target", "consul"); code != exitBadInput || !strings.Contains(stderr, `unknown target "consul"`) {
		t.Fatalf("bad input: exit %d", code)
	}
	code, _, stderr := sb("run", "--target", "redis", "--workload", "fenced-counter", "--nemesis", "none",
		"--time-limit", "3s", "--concurrency", "2", "--keys", "1", "--results", "r", "--log-level", "warn")
	if code != exitValid || strings.Contains(stderr, "source tree") {
		t.Fatalf("a run from %s: exit %d", dir, code)
	}
	b, err := os.ReadFile(filepath.Join(dir, "r", "latest", "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res map[string]any
	if err := json.Unmarshal(b, &res); err != nil || res["valid"] != true {
		t.Fatalf("results.json: valid %v, %v", res["valid"], err)
	}
	assertNoLeftovers(t, cli, res["run_id"].(string))
}
