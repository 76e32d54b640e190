package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/client"
)

// noDocker makes any Docker connection fail the test.
func noDocker(t *testing.T) {
	t.Helper()
	saved := dockerConnect
	dockerConnect = func(context.Context) (*client.Client, error) {
		t.Error("the command connected to Docker")
		return nil, context.Canceled
	}
	t.Cleanup(func() { dockerConnect = saved })
}

// TestValidateDryRun: --dry-run prints the plan of every candidate with
// its estimate and exits 0, with no Docker work, the default candidates,
// a file of them and the short form alike.
func TestValidateDryRun(t *testing.T) {
	noDocker(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "cands.yaml")
	if err := os.WriteFile(file, []byte("- {name: today, target: redis}\n- {name: durable, target: redis, recipe_options: {persistence: aof-always}}\n"+
		"- {name: mine, target: redis, client: python3 my_lock.py, client_files: ../../docs/examples/my-client, client_packages: [python3-redis]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The adapter's files relative to the file: a file beside the repo's docs.
	wd, _ := os.Getwd()
	rel, _ := filepath.Rel(dir, filepath.Join(wd, "..", "..", "docs", "examples", "my-client"))
	if err := os.WriteFile(file, []byte(strings.ReplaceAll(mustRead(t, file), "../../docs/examples/my-client", rel)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"default", []string{"--candidates", "default", "--parallel", "3"}, []string{"validate plan:", "3 at a time; estimated wall time", "redis persistence=aof-always", "zookeeper/kazoo", "the default"}},
		{"file", []string{"--candidates", file}, []string{"3 candidates", "today", "durable", "mine"}},
		{"short form", []string{"--target", "redis,etcd", "--client", "redis,redsync,etcd"}, []string{"3 candidates", "redis/redsync", "etcd "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := filepath.Join(t.TempDir(), "results")
			code, stdout, stderr := run(t, append([]string{"validate", "--dry-run", "--results", res}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			for _, w := range append(tc.want, "nothing run") {
				if !strings.Contains(stdout, w) {
					t.Errorf("no %q in\n%s", w, stdout)
				}
			}
			if _, err := os.Stat(res); err == nil {
				entries, _ := os.ReadDir(res)
				if len(entries) > 0 {
					t.Errorf("dry run wrote into %s: %v", res, entries)
				}
			}
		})
	}
}

// TestValidateCandidatesRefused: a bad candidates file, or --candidates
// with the short form's flags, is one line and exit 254, before Docker.
func TestValidateCandidatesRefused(t *testing.T) {
	noDocker(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("- target: redis\n  persistance: aof-always\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := filepath.Join(dir, "results")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--candidates", bad}, `unknown key "persistance" at line 2 (known: name, target, client,`},
		{[]string{"--candidates", filepath.Join(dir, "none.yaml")}, "no such file"},
		{[]string{"--candidates", "default", "--target", "redis"}, "--candidates names every candidate: drop --target"},
		{[]string{"--target", "redis", "--client", "nosuch"}, `unknown lock recipe "nosuch"`},
		{[]string{"--target", "redis", "--client-files", dir}, "--client-files and --client-packages go with --client CMD"},
	} {
		code, _, stderr := run(t, append([]string{"validate", "--results", res}, tc.args...)...)
		if code != exitBadInput || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v: exit %d, stderr %q; want %d and one line with %q", tc.args, code, stderr, exitBadInput, tc.want)
		}
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
