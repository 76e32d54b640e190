package main

import (
	"strings"
	"testing"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime/images"
)

// splitBrainRun is a short run on redis-sentinel whose primary is cut off
// with one client for 10 s while the other Sentinels fail over (the
// scenarios failover-*).
func splitBrainRun(workload string, extra ...string) []string {
	return append([]string{"run", "--target", "redis-sentinel", "--workload", workload,
		"--nemesis", "partition", "--partitions", "leader-with-client", "--fault-min", "10s", "--fault-max", "10s",
		"--nemesis-interval", "1s", "--time-limit", "20s", "--concurrency", "4", "--keys", "1",
		"--work", "200ms", "--acquire-timeout", "2s", "--seed", "1"}, extra...)
}

// TestRedisSentinelVerdicts: on a real primary, two replicas and three
// Sentinels, the primary cut off with a client while the others fail over
// grants the lock twice: unfenced, updates are lost; fenced, the lock's
// fence order breaks (the promoted replica's counter is behind) and the
// store refuses the tokens that went back, so the data stays valid; with
// WAIT 1 after each grant the cut-off primary grants nothing.
func TestRedisSentinelVerdicts(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, images.RoleClient, "redis-sentinel")
	t.Run("unfenced split brain loses updates", func(t *testing.T) {
		code, res, _ := e2eRun(t, splitBrainRun("unfenced-counter")...)
		if code != exitInvalid || res["valid"] != false {
			t.Fatalf("exit %d, valid %v: want invalid (two primaries granted the lock)", code, res["valid"])
		}
		if lost := checker(res, "summary")["lost_updates"].(float64); lost < 1 {
			t.Fatalf("invalid without lost updates: %v", lost)
		}
		if v, _ := res["versions"].(map[string]any)["redis"].(string); !strings.HasPrefix(v, "7.") {
			t.Fatalf("redis version %q not recorded as 7.x", v)
		}
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
	t.Run("fenced split brain: lock invalid, data valid", func(t *testing.T) {
		_, res, _ := e2eRun(t, splitBrainRun("fenced-counter")...)
		if res["lock"] != false || res["data"] != true {
			t.Fatalf("lock %v, data %v: want the fence order broken and the data kept by the store", res["lock"], res["data"])
		}
		if r := checker(res, "summary")["rejections"].(float64); r < 1 {
			t.Fatalf("no token refused by the store (%v)", r)
		}
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
	t.Run("wait=1: the cut-off primary grants nothing", func(t *testing.T) {
		code, res, _ := e2eRun(t, splitBrainRun("unfenced-counter", "--recipe-opt", "wait=1")...)
		if code != exitValid || res["valid"] != true {
			t.Fatalf("exit %d, valid %v: want valid", code, res["valid"])
		}
		if o := checker(res, "mutex")["overlaps"].(float64); o != 0 {
			t.Fatalf("%v overlapping holds with WAIT 1", o)
		}
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
}

// mariaRun is a short run on mariadb.
func mariaRun(workload, nemesis string, extra ...string) []string {
	return append([]string{"run", "--target", "mariadb", "--workload", workload, "--nemesis", nemesis,
		"--time-limit", "12s", "--concurrency", "4", "--keys", "1", "--work", "1s", "--nemesis-interval", "1500ms", "--seed", "5"}, extra...)
}

// TestMariaDBVerdicts: on a real MariaDB, a named lock whose session ends
// while its holder is paused (wait_timeout = the lease TTL) loses updates
// without fencing; the token from the sequence keeps the data through
// pauses and partitions of the holder and through kills of the server,
// and never goes back across them (the fence-order checker).
func TestMariaDBVerdicts(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, images.RoleClient, "mariadb")
	t.Run("unfenced under pauses is invalid", func(t *testing.T) {
		code, res, _ := e2eRun(t, mariaRun("unfenced-counter", "pause", "--pause-targets", "holder=1")...)
		if code != exitInvalid || res["valid"] != false {
			t.Fatalf("exit %d, valid %v: want invalid (a paused holder's session ended, it wrote late)", code, res["valid"])
		}
		if lost := checker(res, "summary")["lost_updates"].(float64); lost < 1 {
			t.Fatalf("invalid without lost updates: %v", lost)
		}
		if v, _ := res["versions"].(map[string]any)["mariadb"].(string); !strings.HasPrefix(v, "10.11.") {
			t.Fatalf("mariadb version %q not recorded as 10.11.x", v)
		}
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
	t.Run("fenced under pauses and partitions is valid", func(t *testing.T) {
		// Both kinds on their own schedules, so both land whatever the
		// load; pauses outlast the 2 s session by more than the next
		// holder's 1 s of work, so the paused write comes after its.
		code, res, _ := e2eRun(t, mariaRun("fenced-counter", "pause,partition", "--pause-targets", "holder=1",
			"--partitions", "clients-from-locks", "--time-limit", "16s", "--fault-overlap", "--fault-min", "4s", "--fault-max", "5s")...)
		if code != exitValid || res["valid"] != true {
			t.Fatalf("exit %d, valid %v: want valid (late writes refused by the store)", code, res["valid"])
		}
		if r := checker(res, "summary")["rejections"].(float64); r < 1 {
			t.Fatalf("valid without a fencing rejection: was a holder paused? (%v)", r)
		}
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
	t.Run("fenced across kills of MariaDB: tokens rise", func(t *testing.T) {
		code, res, _ := e2eRun(t, "run", "--target", "mariadb", "--workload", "fenced-counter", "--nemesis", "kill",
			"--kill-targets", "node=1", "--fault-min", "1s", "--fault-max", "1s", "--nemesis-interval", "8s",
			"--time-limit", "24s", "--concurrency", "3", "--keys", "1", "--work", "300ms", "--seed", "11")
		if code != exitValid || res["valid"] != true {
			t.Fatalf("exit %d, valid %v", code, res["valid"])
		}
		kills := 0
		for _, f := range res["faults"].([]any) {
			if f.(map[string]any)["f"] == "kill" {
				kills++
			}
		}
		if kills == 0 {
			t.Fatal("MariaDB never killed")
		}
		fo, _ := res["checkers"].(map[string]any)["fence_order"].(map[string]any)
		d, _ := fo["details"].(map[string]any)
		if fo["valid"] != true || d["grants"].(float64) < 10 {
			t.Fatalf("fence order %v", fo)
		}
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
}
