package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
)

// buildCLI compiles splitbrain once per test binary.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "splitbrain")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// startRun starts a long run and waits until its history holds operations.
func startRun(t *testing.T, bin string) (*exec.Cmd, string, *strings.Builder) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(bin, "run", "--target", "redis", "--workload", "fenced-counter", "--nemesis", "pause",
		"--time-limit", "5m", "--concurrency", "3", "--results", dir, "--log-level", "warn", "--nemesis-interval", "1s")
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		events, _, err := history.ReadFile(filepath.Join(dir, "latest", "history.jsonl"))
		if err == nil && len(events) > 40 {
			// Wait for a fault to be in force, so that heal has work.
			for _, e := range events {
				if e.Type == history.Nemesis && e.Phase == history.PhaseStart {
					return cmd, dir, out
				}
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("run never got going:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runLabels returns the run's ID and how much of it is left: containers,
// and console directories on the host.
func runLabels(t *testing.T, cli *client.Client, dir string) (runID string, left int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "latest", "harness.log"))
	if err != nil {
		t.Fatal(err)
	}
	// harness.log lines carry run=<id>
	for _, f := range strings.Fields(string(b)) {
		if v, ok := strings.CutPrefix(f, "run="); ok {
			runID = v
			break
		}
	}
	if runID == "" {
		t.Fatal("no run id in harness.log")
	}
	cs, err := cli.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", runtime.LabelRun+"="+runID))})
	if err != nil {
		t.Fatal(err)
	}
	// The clients' console sockets' directory goes with the containers.
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "splitbrain-console-"+runID+"-*"))
	return runID, len(cs) + len(dirs)
}

func waitExit(t *testing.T, cmd *exec.Cmd, within time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(within):
		cmd.Process.Kill()
		t.Fatalf("did not exit within %v", within)
		return -1
	}
}

// TestSignals: SIGINT/SIGTERM heal, check and clean; a second interrupt
// cleans at once; SIGKILL leaves a history that check accepts and
// leftovers that clean removes.
func TestSignals(t *testing.T) {
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, images.RoleClient, "redis")
	bin := buildCLI(t)

	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run("one "+sig.String(), func(t *testing.T) {
			cmd, dir, out := startRun(t, bin)
			cmd.Process.Signal(sig)
			code := waitExit(t, cmd, time.Minute)
			if code != exitValid && code != exitInvalid && code != exitUnknown {
				t.Fatalf("exit %d after %v:\n%s", code, sig, out)
			}
			var res map[string]any
			b, err := os.ReadFile(filepath.Join(dir, "latest", "results.json"))
			if err != nil || json.Unmarshal(b, &res) != nil {
				t.Fatalf("no results.json: %v", err)
			}
			if res["valid"] != true {
				t.Fatalf("interrupted fenced run not valid: %v\n%s", res["valid"], out)
			}
			if _, left := runLabels(t, cli, dir); left != 0 {
				t.Fatalf("%d containers left after %v", left, sig)
			}
		})
	}

	t.Run("two interrupts", func(t *testing.T) {
		cmd, dir, out := startRun(t, bin)
		// Two different signals back to back (two SIGINTs could merge
		// into one pending signal): the second comes before the test
		// phase has ended, so the run is cut short.
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Process.Signal(syscall.SIGTERM)
		code := waitExit(t, cmd, time.Minute)
		if code == exitValid || code == exitInvalid {
			t.Fatalf("exit %d: a run cut short claims a verdict\n%s", code, out)
		}
		if _, left := runLabels(t, cli, dir); left != 0 {
			t.Fatalf("%d containers left after two interrupts", left)
		}
		if _, err := os.Stat(filepath.Join(dir, "latest", "results.json")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("SIGKILL", func(t *testing.T) {
		cmd, dir, _ := startRun(t, bin)
		cmd.Process.Kill()
		cmd.Wait()
		runID, left := runLabels(t, cli, dir)
		if left == 0 {
			t.Fatal("a killed harness cleaned up: the test proves nothing")
		}
		// The history is checkable as it is.
		var o, e strings.Builder
		code := execute([]string{"check", filepath.Join(dir, "latest")}, &o, &e)
		if code != exitValid && code != exitUnknown {
			t.Fatalf("check of a killed run's history: exit %d\n%s%s", code, o.String(), e.String())
		}
		o.Reset()
		if code := execute([]string{"clean", "--run", runID}, &o, &e); code != exitValid {
			t.Fatalf("clean exit %d: %s", code, e.String())
		}
		if _, left := runLabels(t, cli, dir); left != 0 {
			t.Fatalf("%d containers left after clean", left)
		}
	})
}
