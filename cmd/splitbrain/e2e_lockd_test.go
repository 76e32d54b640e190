package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets/lockd/server"
)

// TestLockdVerdicts runs lockd, the Raft lease service, for real: a holder
// paused past its 2 s lease loses its lock to the next client; without
// fencing its late write loses updates, with fencing the store refuses it.
// A correct lock service is not enough: the data stays safe only because
// of the token.
func TestLockdVerdicts(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, images.RoleClient, "lockd")
	// Pauses last TTL+1s .. 2×TTL+1s (3 s .. 5 s): always past the lease.
	// A pause aimed at a holder lands some 30 ms after the nemesis picked
	// it (a Docker API call); with 100 ms of work about one in three
	// holders has written by then and the pause proves nothing, so holders
	// work 300 ms and faults come every 2 s on average (2 or 3 in 15 s).
	common := []string{"run", "--target", "lockd", "--nemesis", "pause", "--time-limit", "15s",
		"--concurrency", "4", "--keys", "1", "--lease-ttl", "2s", "--work", "1s", "--nemesis-interval", "2s",
		"--pause-targets", "holder=1", "--seed", "3"}

	checkRun := func(t *testing.T, res map[string]any, dir string) {
		t.Helper()
		if v, _ := res["versions"].(map[string]any); v["lockd"] != server.Version {
			t.Fatalf("versions %v", res["versions"])
		}
		for _, f := range []string{"history.jsonl", "logs/n1.log", "logs/n2.log", "logs/n3.log", "logs/store.log", "logs/c1.log"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Fatal(err)
			}
		}
		if faults, _ := res["faults"].([]any); len(faults) < 1 {
			t.Fatal("no fault injected: the run proved nothing")
		}
	}

	t.Run("unfenced is invalid", func(t *testing.T) {
		code, res, dir := e2eRun(t, append(common, "--workload", "unfenced-counter")...)
		if code != exitInvalid || res["valid"] != false {
			t.Fatalf("exit %d, valid %v", code, res["valid"])
		}
		if lost := checker(res, "summary")["lost_updates"].(float64); lost < 1 {
			t.Fatalf("invalid without lost updates: %v", lost)
		}
		checkRun(t, res, dir)
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
	t.Run("fenced is valid", func(t *testing.T) {
		code, res, dir := e2eRun(t, append(common, "--workload", "fenced-counter")...)
		if code != exitValid || res["valid"] != true {
			t.Fatalf("exit %d, valid %v", code, res["valid"])
		}
		if rej := checker(res, "summary")["rejections"].(float64); rej < 1 {
			t.Fatalf("no late write was stopped (rejections %v): the run proved nothing", rej)
		}
		// The paused holder's watchdog noticed its lease was gone.
		if m, _ := res["metrics"].(map[string]any); m["renew_failures"].(float64) < 1 {
			t.Fatalf("metrics %v: a holder paused past its lease renewed without failing", m)
		}
		checkRun(t, res, dir)
		if code, _, _ := run(t, "check", dir); code != exitValid {
			t.Fatalf("offline check exit %d", code)
		}
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
}
