package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/etcd"
)

// The two adapters of issue 30, kept here as fixtures: each passes for a
// lock client a user could write, and each breaks mutual exclusion under
// holder pauses. Their verdict must be the lock's, with both holders named.
const (
	// uncheckedRelease is a Python adapter whose release is a plain DEL:
	// a holder paused past its TTL wakes and deletes the next holder's lock.
	uncheckedRelease = "testdata/mutex/redis-unchecked-release"
	// earlyLease is a Go adapter that takes its etcd lease when an acquire
	// begins, so a grant after a long wait carries what is left of the TTL.
	earlyLease = "./testdata/mutex/etcd-early-lease"
)

// earlyLeaseDir builds the etcd-early-lease fixture static (it runs in a
// client image with no Go) from this module into a directory that holds it
// alone, for --client-files. The build is reproducible (-trimpath), so its
// client image is built once and reused.
func earlyLeaseDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join(goruntime.GOROOT(), "bin", "go"), "build", "-trimpath", "-o", filepath.Join(dir, "etcd-early-lease"), earlyLease)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", earlyLease, err, out)
	}
	t.Logf("built %s in %s", earlyLease, time.Since(start).Round(time.Millisecond))
	return dir
}

// mutexRun is a short run of a fixture adapter under holder pauses: one
// key, four clients contending for it.
func mutexRun(target, client, files, workload string, extra ...string) []string {
	return append([]string{"run", "--target", target, "--client", client, "--client-files", files,
		"--workload", workload, "--nemesis", "pause", "--pause-targets", "holder=1",
		"--concurrency", "4", "--keys", "1", "--work", "1s", "--nemesis-interval", "1500ms"}, extra...)
}

// TestMutexFixtures: each fixture adapter, run for real under holder
// pauses, comes out lock invalid for mutual exclusion, and both
// results.json and the run's last lines name the two holders, their grants
// and the key. The etcd one runs the fenced workload: its data stay valid
// (the store refuses the late writes by token), so only the lock's own
// verdict can show its bug.
func TestMutexFixtures(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, images.RoleClient, "redis", "etcd")
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
		data any // the data's verdict in results.json
	}{
		{"redis unchecked release, unfenced", func(*testing.T) []string {
			return mutexRun("redis", "python3 unchecked_lock.py", uncheckedRelease, "unfenced-counter",
				"--client-packages", "python3-redis", "--time-limit", "20s", "--seed", "2")
		}, nil},
		{"etcd lease taken at the start of the wait, fenced", func(t *testing.T) []string {
			// Its bug shows when a holder whose wait was long is paused
			// (its lease, counted from the wait's start, runs out first)
			// or held up: pauses of 2.5-3 s (past any lease), about six in
			// 25 s; seed 2 gave 2 such grants in 20 s with 3 pauses.
			return mutexRun("etcd", "./etcd-early-lease", earlyLeaseDir(t), "fenced-counter",
				"--time-limit", "25s", "--fault-min", "2500ms", "--fault-max", "3s", "--seed", "2")
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append(tc.args(t), "--results", dir, "--log-level", "warn")
			code, stdout, stderr := run(t, args...)
			t.Logf("splitbrain %s\nexit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
			res := readResults(t, filepath.Join(dir, "latest"))
			if code != exitInvalid || res["valid"] != false || res["lock"] != false {
				t.Fatalf("exit %d, valid %v, lock %v: want the lock invalid", code, res["valid"], res["lock"])
			}
			if tc.data != nil && res["data"] != tc.data {
				t.Errorf("data %v, want %v", res["data"], tc.data)
			}
			m := checker(res, "mutex")
			early, _ := m["early_overlaps"].(float64)
			examples, _ := m["early_examples"].([]any)
			if early < 1 || len(examples) == 0 {
				t.Fatalf("mutex details %v: want a second grant while the first lock was alive", m)
			}
			ex := examples[0].(map[string]any)
			first, second := ex["first"].(map[string]any), ex["second"].(map[string]any)
			key := ex["key"].(string)
			c1, c2 := first["client"].(string), second["client"].(string)
			if c1 == c2 || c1 == "" || c2 == "" || key == "" {
				t.Fatalf("the pair is %q and %q on %q: want two holders of one key", c1, c2, key)
			}
			// results.json's reason: both holders, their grants, the key.
			reason := sectionReason(res, "mutex")
			at := func(h map[string]any) string { return fmt.Sprintf("%.3f s", h["start"].(float64)/1e9) }
			want := fmt.Sprintf("the lock broke mutual exclusion: %s was granted %s at %s while %s, granted it at %s, still held it",
				c2, key, at(second), c1, at(first))
			if !strings.HasPrefix(reason, want) {
				t.Errorf("mutex reason %q, want it to begin %q", reason, want)
			}
			if rs, _ := res["reasons"].([]any); len(rs) == 0 || rs[0] != reason {
				t.Errorf("results.json reasons %v: want the mutex reason first", rs)
			}
			// The printed lines: the same pair, in the report's times.
			line := ""
			for l := range strings.SplitSeq(stdout, "\n") {
				if strings.Contains(l, "the lock broke mutual exclusion: ") {
					line = l
					break
				}
			}
			if !containsAll(line, c2+" was granted "+key+" at ", "while "+c1+", granted it at ", "still held it") {
				t.Errorf("no printed line names the pair %s, %s on %s:\n%s", c1, c2, key, stdout)
			}
			assertNoLeftovers(t, cli, res["run_id"].(string))
		})
	}
}

// TestClientCheckEarlyLease: client-check fails the etcd fixture whose lease
// is taken when its wait begins (the long-wait step), against a real etcd
// cluster whose leases expire by waiting out their TTL.
func TestClientCheckEarlyLease(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	rt, imgs := testenv.Runtime(t, "m", etcd.Role)
	bin := filepath.Join(earlyLeaseDir(t), "etcd-early-lease")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := etcd.Target{}.Start(ctx, rt, targets.Options{Images: imgs, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	eps := cl.Endpoints()
	testenv.Reach(t, eps[0])
	// The early lease is caught when etcd has revoked it by the time the
	// other instance asks; a loaded etcd revokes late, so the check gets
	// three tries, and no try may fail another step.
	var longWait string
	for try := 1; try <= 3 && !containsAll(longWait, "FAIL", "count the lease from the grant"); try++ {
		code, stdout, stderr := run(t, "client-check", "--backend", "etcd", "--endpoints", strings.Join(eps, ","), "--log-level", "warn", "--", bin)
		t.Logf("try %d: exit %d\n%s%s", try, code, stdout, stderr)
		for l := range strings.SplitSeq(stdout, "\n") {
			if strings.Contains(l, "long-wait") {
				longWait = l
			}
			if strings.Contains(l, "FAIL") && !strings.Contains(l, "long-wait") {
				t.Errorf("a step other than long-wait failed: %s", l)
			}
		}
		if failed := containsAll(longWait, "FAIL"); failed != (code == exitInvalid) {
			t.Fatalf("client-check exit %d with long-wait %q", code, longWait)
		}
	}
	if !containsAll(longWait, "FAIL", "count the lease from the grant") {
		t.Fatalf("long-wait step %q: want it failed, pointing at the lease's start", longWait)
	}
}

// readResults parses dir's results.json.
func readResults(t *testing.T, dir string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatalf("no results.json: %v", err)
	}
	var res map[string]any
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// sectionReason is checker name's reason in results.json.
func sectionReason(res map[string]any, name string) string {
	c, _ := res["checkers"].(map[string]any)
	s, _ := c[name].(map[string]any)
	r, _ := s["reason"].(string)
	return r
}
