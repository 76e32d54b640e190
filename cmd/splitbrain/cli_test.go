package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = execute(args, &o, &e)
	return code, o.String(), e.String()
}

// TestBadInput: every mistake gets one line naming the fix and exit 254,
// never a stack trace.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	corrupt := filepath.Join(dir, "corrupt.jsonl")
	if err := os.WriteFile(corrupt, []byte("{\"t\":1,\"type\":\"invoke\",\"id\":1,\"f\":\"cs\"}\nnot json\n{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := filepath.Join(dir, "results")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown command", []string{"frobnicate"}, "unknown command"},
		{"unknown flag", []string{"run", "--frobnicate"}, "unknown flag"},
		{"malformed duration", []string{"run", "--time-limit", "soon"}, "invalid argument"},
		{"unknown target", []string{"run", "--target", "zookeeper", "--results", res}, "unknown target"},
		{"unknown workload", []string{"run", "--workload", "bank", "--results", res}, "unknown workload"},
		{"unknown nemesis", []string{"run", "--nemesis", "meteor", "--results", res}, "unknown nemesis"},
		{"negative clients", []string{"run", "--concurrency", "-1", "--results", res}, "--concurrency"},
		{"results under a file", []string{"run", "--results", filepath.Join(file, "x")}, "results directory"},
		{"bad recipe option", []string{"run", "--recipe-opt", "novalue", "--results", res}, "key=value"},
		{"impossible partition", []string{"run", "--target", "redis", "--nemesis", "partition", "--partitions", "majority", "--results", res}, "needs at least 3 lock nodes"},
		{"malformed weights", []string{"run", "--pause-targets", "holder=x", "--results", res}, "--pause-targets"},
		{"unknown target group", []string{"run", "--kill-targets", "store=1", "--results", res}, "--kill-targets: unknown target group"},
		{"unknown clock mode", []string{"run", "--clock-modes", "wobble", "--results", res}, "--clock-modes"},
		{"bad control channel", []string{"run", "--control", "pigeon", "--results", res}, "--control"},
		{"bad log level", []string{"run", "--log-level", "loud", "--results", res}, "--log-level"},
		{"check without args", []string{"check"}, "accepts 1 arg"},
		{"check missing history", []string{"check", filepath.Join(dir, "nope")}, "no history"},
		{"check corrupt history", []string{"check", corrupt}, "line 2"},
		{"images unknown role", []string{"images", "build", "--roles", "mainframe"}, "unknown role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := run(t, tt.args...)
			if code != exitBadInput {
				t.Fatalf("exit %d, want %d; stderr %q", code, exitBadInput, stderr)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Fatalf("stderr %q lacks %q", stderr, tt.want)
			}
			if n := strings.Count(strings.TrimSpace(stderr), "\n"); n != 0 || strings.Contains(stderr, "goroutine") {
				t.Fatalf("want one line, got %q", stderr)
			}
		})
	}
}

func TestCheckCorpus(t *testing.T) {
	tests := []struct {
		dir  string
		code int
	}{
		{"sequential-valid", exitValid},
		{"lost-update-invalid", exitInvalid},
		{"final-read-missing-unknown", exitUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			code, out, stderr := run(t, "check", filepath.Join("..", "..", "checkers", "testdata", tt.dir))
			if code != tt.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tt.code, out, stderr)
			}
		})
	}
}

func TestCheckTornTail(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "checkers", "testdata", "lost-update-invalid", "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "history.jsonl")
	if err := os.WriteFile(path, append(src, []byte(`{"t":9999,"type":"invo`)...), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := run(t, "check", "--json", path)
	if code != exitInvalid || !strings.Contains(stderr, "torn last line") {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
	var rep struct {
		Valid   any `json:"valid"`
		History struct {
			TornTail bool `json:"torn_tail"`
		} `json:"history"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Valid != false || !rep.History.TornTail {
		t.Fatalf("report %s: %v", out, err)
	}
}

func TestUnreachableDaemon(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no.sock"))
	code, _, stderr := run(t, "run", "--results", t.TempDir(), "--time-limit", "1s")
	if code != exitHarness || !strings.Contains(stderr, "docker daemon unreachable") || !strings.Contains(stderr, "DOCKER_HOST") {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
	if strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("want one line, got %q", stderr)
	}
}
