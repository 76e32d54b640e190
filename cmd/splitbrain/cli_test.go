package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/targets"
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
	if err := os.WriteFile(corrupt, []byte("{\"t\":1,\"type\":\"invoke\",\"id\":1,\"f\":\"cs\",\"key\":\"k0\"}\nnot json\n{}\n"), 0o644); err != nil {
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
		{"unknown target", []string{"run", "--target", "consul", "--results", res}, "unknown target"},
		{"unknown workload", []string{"run", "--workload", "bank", "--results", res}, "unknown workload"},
		{"unknown nemesis", []string{"run", "--nemesis", "meteor", "--results", res}, "unknown nemesis"},
		{"negative clients", []string{"run", "--concurrency", "-1", "--results", res}, "--concurrency"},
		{"results under a file", []string{"run", "--results", filepath.Join(file, "x")}, "is a file"},
		{"bad recipe option", []string{"run", "--recipe-opt", "novalue", "--results", res}, "key=value"},
		{"unknown store", []string{"run", "--store", "mysql", "--results", res}, "unknown store \"mysql\" (known: builtin, postgres)"},
		{"unknown store option", []string{"run", "--store", "postgres", "--store-opt", "mode=x", "--results", res}, "unknown --store-opt mode for store postgres (known: check)"},
		{"bad store option value", []string{"run", "--store", "postgres", "--store-opt", "check=row", "--results", res}, "want one of token, version"},
		{"builtin store takes no options", []string{"run", "--store-opt", "check=version", "--results", res}, "store builtin takes none"},
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

// TestCheckCorpus replays every corpus case through `splitbrain check`:
// its exit code, and for bad input one line naming the line and the field.
func TestCheckCorpus(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "..", "checkers", "testdata", "*", "expected.json"))
	if err != nil || len(paths) < 30 {
		t.Fatalf("corpus: %d cases, %v", len(paths), err)
	}
	for _, p := range paths {
		var want struct {
			Valid  any    `json:"valid"`
			Exit   int    `json:"exit"`
			Reason string `json:"reason"`
			Kind   string `json:"kind"`
			Line   int    `json:"line"`
			Field  string `json:"field"`
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		t.Run(filepath.Base(filepath.Dir(p)), func(t *testing.T) {
			code, out, stderr := run(t, "check", "--no-report", filepath.Dir(p))
			if code != want.Exit {
				t.Fatalf("exit %d, want %d\n%s%s", code, want.Exit, out, stderr)
			}
			switch {
			case want.Exit == exitBadInput:
				if strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, want.Reason) ||
					(want.Line > 0 && !strings.Contains(stderr, fmt.Sprintf("line %d, field %q", want.Line, want.Field)) && !strings.Contains(stderr, fmt.Sprintf("line %d:", want.Line))) {
					t.Fatalf("stderr %q: want one line naming line %d field %q (%q)", stderr, want.Line, want.Field, want.Reason)
				}
			case want.Exit != exitValid:
				if !strings.Contains(out, want.Reason) {
					t.Fatalf("output lacks the reason %q:\n%s", want.Reason, out)
				}
				if want.Kind != "" && !strings.Contains(out, "first anomaly") {
					t.Fatalf("output lacks the first anomaly:\n%s", out)
				}
			}
		})
	}
}

// TestCheckWritesReport: check writes report.html beside the history it
// checked, from the re-check.
func TestCheckWritesReport(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "checkers", "testdata", "fence-token-reset-invalid", "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "my-client.jsonl")
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := run(t, "check", path)
	if code != exitInvalid || !strings.Contains(out, "k0: token 1 granted after token 8") || !strings.Contains(out, "report: ") {
		t.Fatalf("exit %d\n%s%s", code, out, stderr)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "token 1 granted after token 8") {
		t.Fatalf("report.html does not say the lock broke its promise")
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

// TestCheckTooBigForMemory: a history whose check would not fit the memory
// budget ends with one line and exit 255, never a runtime trace; within the
// budget the same history is checked.
func TestCheckTooBigForMemory(t *testing.T) {
	path := filepath.Join("..", "..", "checkers", "testdata", "lost-update-invalid", "history.jsonl")
	code, out, stderr := run(t, "check", "--no-report", "--memory-mib", "1", path)
	if code != exitHarness || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, "more than the 1 MiB at hand") || out != "" {
		t.Fatalf("exit %d stdout %q stderr %q", code, out, stderr)
	}
	if code, _, stderr := run(t, "check", "--no-report", "--memory-mib", "1024", path); code != exitInvalid {
		t.Fatalf("within the budget: exit %d stderr %q", code, stderr)
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

// TestRegisteredCommands: each shipped backend's probe and node programs
// are commands, generated from its declaration; --target and --recipe-opt
// help list what is registered.
func TestRegisteredCommands(t *testing.T) {
	root := newRootCmd(&bytes.Buffer{}, &bytes.Buffer{})
	for _, b := range targets.Backends() {
		if b.Probe != nil {
			if c, _, err := root.Find([]string{"probe", b.Name}); err != nil || c.Name() != b.Name {
				t.Errorf("probe %s: %v", b.Name, err)
			}
		}
		for _, p := range b.Programs {
			if c, _, err := root.Find([]string{p.Name}); err != nil || c.Name() != p.Name || !c.Hidden {
				t.Errorf("program %s of %s: %v", p.Name, b.Name, err)
			}
		}
	}
	code, out, _ := run(t, "run", "--help")
	for _, name := range targets.Names() {
		if code != 0 || !strings.Contains(out, name) {
			t.Errorf("run --help does not name %s", name)
		}
	}
	if !strings.Contains(out, "expiry=ttl|client|none") {
		t.Errorf("run --help does not list the recipe options:\n%s", out)
	}
	// A misspelt anti-pattern switch is refused, not silently ignored.
	code, _, stderr := run(t, "run", "--target", "redis", "--recipe-opt", "expiri=none", "--results", t.TempDir())
	if code != exitBadInput || !strings.Contains(stderr, "known: persistence, expiry, release") {
		t.Errorf("misspelt option: exit %d, %q", code, stderr)
	}
}

// TestValidateRefusesBeforeImages: validate's and matrix's bad input —
// an unknown or unsupported option, a bad time limit, an unknown key in a
// set — is one line and exit 254, found before any image or engine work:
// the Docker daemon is unreachable here, and the command runs outside the
// repository.
func TestValidateRefusesBeforeImages(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no.sock"))
	dir := t.TempDir()
	t.Chdir(dir)
	set := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	typo := set("typo.yaml", "name: x\ntime_limit: 5s\nscenarios:\n  - name: correct-pattern\n    target: [redis]\n")
	top := set("top.yaml", "name: x\ntime_limit: 5s\nseed: [1]\nscenarios:\n  - name: correct-pattern\n")
	short := set("short.yaml", "name: x\ntime_limit: 5s\nscenarios:\n  - {name: correct-pattern, targets: [redis], recipe_options: {persistence: never}}\n")
	res := filepath.Join(dir, "results")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown recipe option", []string{"validate", "--target", "redis", "--recipe-opt", "nosuch=1"}, "unknown option nosuch for target redis (known: persistence, expiry, release)"},
		{"bad option value", []string{"validate", "--target", "redis", "--recipe-opt", "persistence=never"}, "want one of none, aof-always, aof-everysec"},
		{"option the backend lacks", []string{"validate", "--target", "etcd", "--recipe-opt", "persistence=aof-always"}, "unknown option persistence for target etcd (known: unsafe-no-fsync, endpoints)"},
		{"option the client lacks", []string{"validate", "--target", "redis", "--client", "redsync", "--recipe-opt", "expiry=none"}, "unknown option expiry for target redis (known: persistence)"},
		{"malformed option", []string{"validate", "--recipe-opt", "novalue"}, "key=value"},
		{"negative time limit", []string{"validate", "--target", "lockd", "--time-limit", "-1s"}, "--time-limit must be positive"},
		{"zero time limit", []string{"validate", "--target", "redis", "--time-limit", "0s"}, "--time-limit must be positive"},
		{"unknown key in an entry", []string{"matrix", "--set", typo}, `unknown key "target" at line 5 (known: name, targets, valid`},
		{"unknown key in a set", []string{"matrix", "--set", top}, `unknown key "seed" at line 3 (known: name, time_limit, seeds, repetitions, scenarios, early_end)`},
		{"bad option in a set", []string{"matrix", "--set", short}, "want one of none, aof-always, aof-everysec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := run(t, append(tt.args, "--results", res)...)
			if code != exitBadInput || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, want %d; stderr %q lacks %q", code, exitBadInput, stderr, tt.want)
			}
			if n := strings.Count(strings.TrimSpace(stderr), "\n"); n != 0 {
				t.Fatalf("want one line, got %q", stderr)
			}
		})
	}
	if _, err := os.Stat(res); err == nil {
		t.Errorf("bad input left a results directory")
	}
}

// TestOnceImages: a matrix ensures each role's image once; runs that need
// only roles already made do not call the builder again.
func TestOnceImages(t *testing.T) {
	var calls [][]string
	ensure := onceImages(func(_ context.Context, roles []string) (map[string]string, error) {
		calls = append(calls, roles)
		out := map[string]string{}
		for _, r := range roles {
			out[r] = "img-" + r
		}
		return out, nil
	})
	for _, tc := range []struct {
		roles []string
		calls int
	}{
		{[]string{"store", "client", "redis"}, 1},
		{[]string{"store", "client", "redis"}, 1},
		{[]string{"store", "client", "etcd"}, 2},
		{[]string{"client", "etcd"}, 2},
	} {
		got, err := ensure(context.Background(), tc.roles)
		if err != nil || len(got) != len(tc.roles) || len(calls) != tc.calls {
			t.Fatalf("%v: %v %v after %d calls, want %d", tc.roles, got, err, len(calls), tc.calls)
		}
		for _, r := range tc.roles {
			if got[r] != "img-"+r {
				t.Errorf("%s: %q", r, got[r])
			}
		}
	}
}

// TestHelpAndCompletion: the help and completion commands that --help
// lists work, the completion scripts answer the shell's requests, and an
// unknown command — at the top, under help, or under a command group — is
// one line and exit 254.
func TestHelpAndCompletion(t *testing.T) {
	ok := []struct {
		name string
		args []string
		want string
	}{
		{"help", []string{"help"}, "Available Commands:"},
		{"help run", []string{"help", "run"}, "--time-limit"},
		{"help images build", []string{"help", "images", "build"}, "--roles"},
		{"completion bash", []string{"completion", "bash"}, "__start_splitbrain"},
		{"completion zsh", []string{"completion", "zsh"}, "#compdef splitbrain"},
		{"completion fish", []string{"completion", "fish"}, "complete -c splitbrain"},
		{"completion powershell", []string{"completion", "powershell"}, "Register-ArgumentCompleter"},
		{"images alone", []string{"images"}, "Available Commands:"},
		// What the bash script asks when the user types `splitbrain run --tar<TAB>`.
		{"complete a flag", []string{cobra.ShellCompRequestCmd, "run", "--tar"}, "--target"},
		{"complete a command", []string{cobra.ShellCompRequestCmd, "val"}, "validate"},
	}
	for _, tt := range ok {
		t.Run(tt.name, func(t *testing.T) {
			code, out, stderr := run(t, tt.args...)
			if code != exitValid || !strings.Contains(out, tt.want) {
				t.Fatalf("exit %d, stdout lacks %q\nstdout: %.500s\nstderr: %s", code, tt.want, out, stderr)
			}
		})
	}
	bad := []struct {
		name string
		args []string
		want string
	}{
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate" for "splitbrain"`},
		{"help of an unknown command", []string{"help", "frobnicate"}, `unknown command "frobnicate" for "splitbrain"`},
		{"unknown images subcommand", []string{"images", "bogus"}, `unknown command "bogus" for "splitbrain images" (known: build)`},
		{"unknown shell", []string{"completion", "tcsh"}, `unknown command "tcsh" for "splitbrain completion" (known: bash, fish, powershell, zsh)`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			code, out, stderr := run(t, tt.args...)
			if code != exitBadInput || !strings.Contains(stderr, tt.want) || out != "" {
				t.Fatalf("exit %d, want %d; stdout %q; stderr %q lacks %q", code, exitBadInput, out, stderr, tt.want)
			}
			if n := strings.Count(strings.TrimSpace(stderr), "\n"); n != 0 {
				t.Fatalf("want one line, got %q", stderr)
			}
		})
	}
}

// TestScenariosFitTheWidth: `scenarios` keeps its lines within the width
// (COLUMNS here), breaking only between words, and still names each
// scenario's anti-pattern and each client.
func TestScenariosFitTheWidth(t *testing.T) {
	t.Setenv("COLUMNS", "80")
	code, out, stderr := run(t, "scenarios")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"no-expiry-deadlock (anti-pattern 1)\n", "redlock-clock-jump (known bug)\n", "  runs on:  ", "redsync (redis, redlock)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if n := len([]rune(line)); n > 80 && len(strings.Fields(line)) > 1 {
			t.Errorf("%d columns, over 80 and breakable: %q", n, line)
		}
	}
}
