package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime/images"
)

// TestMatrix: the smoke set passes on real containers and writes JUnit;
// a deliberately wrong expectation makes the matrix fail with one clear
// line.
func TestMatrix(t *testing.T) {
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
