package main

import (
	"strings"
	"testing"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime/images"
)

// libraryRun is a short run of one lock client under holder pauses: about
// 10 s of test phase, one key, four clients.
func libraryRun(target, client, workload string, extra ...string) []string {
	return append([]string{"run", "--target", target, "--client", client, "--workload", workload,
		"--nemesis", "pause", "--pause-targets", "holder=1", "--time-limit", "10s",
		"--concurrency", "4", "--keys", "1", "--work", "1s", "--nemesis-interval", "1500ms", "--seed", "5"}, extra...)
}

// TestLibraryVerdicts runs each library splitbrain ships for real, once
// per verdict: unfenced, a holder paused past its lease writes late
// (invalid) whatever the library; fenced, where the library gives a
// token, the store stops the late writes (valid); and a library without
// tokens is refused the fenced workload in one line.
func TestLibraryVerdicts(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, images.RoleClient, "redis", "etcd", "redis-sentinel", "mariadb",
		"client-redis-py", "client-etcd-v3.7", "client-redis-py-sentinel", "client-mariadb-pymysql")
	for _, tc := range []struct{ target, client, library string }{
		{"redis", "redsync", "github.com/go-redsync/redsync/v4"},
		{"redlock", "redsync", "github.com/go-redsync/redsync/v4"},
		{"redis", "redislock", "github.com/bsm/redislock"},
		{"redis", "redis-py", "redis-py"},
		{"etcd", "etcd-v3.7", "go.etcd.io/etcd/client/v3/concurrency"},
		{"redis-sentinel", "redsync-sentinel", "github.com/go-redsync/redsync/v4"},
		{"redis-sentinel", "redis-py-sentinel", "redis-py"},
		{"mariadb", "mariadb-pymysql", "PyMySQL"},
	} {
		t.Run(tc.target+"/"+tc.client+"/unfenced", func(t *testing.T) {
			code, res, _ := e2eRun(t, libraryRun(tc.target, tc.client, "unfenced-counter")...)
			if code != exitInvalid || res["valid"] != false {
				t.Fatalf("exit %d, valid %v: want invalid (a paused holder wrote late)", code, res["valid"])
			}
			if lost := checker(res, "summary")["lost_updates"].(float64); lost < 1 {
				t.Fatalf("invalid without lost updates: %v", lost)
			}
			c, _ := res["client"].(map[string]any)
			if c["recipe"] != tc.client || c["library"] != tc.library || c["version"] == "" {
				t.Fatalf("results.json client %v, want %s %s with a version", c, tc.client, tc.library)
			}
		})
	}
	t.Run("etcd/etcd-v3.7/fenced", func(t *testing.T) {
		code, res, _ := e2eRun(t, libraryRun("etcd", "etcd-v3.7", "fenced-counter")...)
		if code != exitValid || res["valid"] != true {
			t.Fatalf("exit %d, valid %v: want valid (late writes refused by the store)", code, res["valid"])
		}
		if r := checker(res, "summary")["rejections"].(float64); r < 1 {
			t.Fatalf("valid without a fencing rejection: was a holder paused? (%v)", r)
		}
	})
	t.Run("redis/redsync/fenced is refused", func(t *testing.T) {
		code, _, stderr := run(t, libraryRun("redis", "redsync", "fenced-counter", "--results", t.TempDir())...)
		if code != exitBadInput || !containsAll(stderr, "gives none", "--store postgres") {
			t.Fatalf("exit %d, %q: want a one-line refusal pointing at the store's version check", code, stderr)
		}
	})
}

// TestYourOwnClient is docs/your-client.md for real: the example adapter
// (Python, its files copied into a client image built with python3-redis)
// under pauses of holders (invalid: a late write), kills of holders (valid:
// a killed holder never writes; its lock expires) and clock jumps of
// clients (valid: Redis expires the lock by its own clock, so the
// adapter's skewed clock changes nothing).
func TestYourOwnClient(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, images.RoleClient, "redis")
	own := []string{"run", "--target", "redis", "--client", "python3 my_lock.py", "--client-files", "../../docs/examples/my-client",
		"--client-packages", "python3-redis", "--workload", "unfenced-counter", "--time-limit", "10s",
		"--concurrency", "4", "--keys", "1", "--work", "300ms", "--nemesis-interval", "1500ms", "--seed", "7"}
	for _, tc := range []struct {
		name  string
		args  []string
		valid bool
	}{
		{"pause", []string{"--nemesis", "pause", "--pause-targets", "holder=1", "--work", "1s"}, false},
		{"kill", []string{"--nemesis", "kill", "--kill-targets", "holder=1", "--fault-min", "300ms", "--fault-max", "600ms"}, true},
		// 20 s: a clock fault goes through docker exec and ptrace, and in
		// CI beside other Docker tests none landed within 10 s once.
		{"clock", []string{"--nemesis", "clock", "--clock-targets", "client=1", "--clock-modes", "bump", "--time-limit", "20s"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, res, _ := e2eRun(t, append(own, tc.args...)...)
			if res["valid"] != tc.valid {
				t.Fatalf("exit %d, valid %v, want %v", code, res["valid"], tc.valid)
			}
			if f, _ := res["faults"].([]any); len(f) == 0 {
				t.Fatal("no fault was injected")
			}
			c, _ := res["client"].(map[string]any)
			if c["recipe"] != "external" || c["library"] != "redis-py" || c["command"] != "python3 my_lock.py" {
				t.Fatalf("results.json client %v", c)
			}
		})
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
