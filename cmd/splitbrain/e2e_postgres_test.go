package main

import (
	"strings"
	"testing"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime/images"
)

// pgRun is a short run on the postgres target under pauses of the holder.
func pgRun(workload string, extra ...string) []string {
	return append([]string{"run", "--target", "postgres", "--workload", workload,
		"--nemesis", "pause", "--pause-targets", "holder=1", "--time-limit", "12s",
		"--concurrency", "4", "--keys", "1", "--work", "1s", "--nemesis-interval", "1500ms", "--seed", "5"}, extra...)
}

// TestPostgresVerdicts: on a real PostgreSQL 15, an advisory lock whose
// session ends while its holder is paused (idle_session_timeout = the
// lease TTL) loses updates without fencing, in each lock mode; the token
// from the sequence keeps the data through pauses and through a kill and
// restart of PostgreSQL (its locks vanish, its sequence does not: the
// fence-order checker judges it).
func TestPostgresVerdicts(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, images.RoleClient, "postgres")

	for _, mode := range []string{"session", "xact"} {
		t.Run(mode+"/unfenced under pauses is invalid", func(t *testing.T) {
			code, res, _ := e2eRun(t, pgRun("unfenced-counter", "--recipe-opt", "lock="+mode)...)
			if code != exitInvalid || res["valid"] != false {
				t.Fatalf("exit %d, valid %v: want invalid (a paused holder's session ended, it wrote late)", code, res["valid"])
			}
			if lost := checker(res, "summary")["lost_updates"].(float64); lost < 1 {
				t.Fatalf("invalid without lost updates: %v", lost)
			}
			if v, _ := res["versions"].(map[string]any)["postgres"].(string); !strings.HasPrefix(v, "15.") {
				t.Fatalf("postgres version %q not recorded as 15.x", v)
			}
			assertNoLeftovers(t, cli, res["run_id"].(string))
		})
	}
	t.Run("try/fenced under pauses is valid", func(t *testing.T) {
		code, res, _ := e2eRun(t, pgRun("fenced-counter", "--recipe-opt", "lock=try")...)
		if code != exitValid || res["valid"] != true {
			t.Fatalf("exit %d, valid %v: want valid (late writes refused by the store)", code, res["valid"])
		}
		if r := checker(res, "summary")["rejections"].(float64); r < 1 {
			t.Fatalf("valid without a fencing rejection: was a holder paused? (%v)", r)
		}
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
	t.Run("session/fenced across kills of PostgreSQL is valid", func(t *testing.T) {
		code, res, _ := e2eRun(t, "run", "--target", "postgres", "--workload", "fenced-counter", "--nemesis", "kill",
			"--kill-targets", "node=1", "--fault-min", "1s", "--fault-max", "1s", "--nemesis-interval", "8s",
			"--time-limit", "20s", "--concurrency", "3", "--keys", "1", "--work", "300ms", "--seed", "11")
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
			t.Fatal("PostgreSQL never killed")
		}
		// The fence-order checker judges every grant's token against
		// those before it, across the restarts: the sequence survived.
		fo, _ := res["checkers"].(map[string]any)["fence_order"].(map[string]any)
		d, _ := fo["details"].(map[string]any)
		if fo["valid"] != true || d["grants"].(float64) < 10 {
			t.Fatalf("fence order %v", fo)
		}
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
}

// TestPostgresStore: the counter as a row of PostgreSQL. Behind each lock
// backend's token the conditional UPDATE keeps the data through holder
// pauses; redsync, which gives no token, is kept correct by the version
// check, and without it (plain UPDATEs) loses updates.
func TestPostgresStore(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleClient, "postgres", "redis", "etcd", "lockd")
	for _, target := range []string{"redis", "etcd", "lockd", "postgres"} {
		t.Run(target+"/fenced behind the conditional write is valid", func(t *testing.T) {
			code, res, _ := e2eRun(t, pgStoreRun(target, "", "fenced-counter")...)
			if code != exitValid || res["valid"] != true {
				t.Fatalf("exit %d, valid %v: want valid (late writes refused by the row's token)", code, res["valid"])
			}
			if r := checker(res, "summary")["rejections"].(float64); r < 1 {
				t.Fatalf("valid without a refused write: was a holder paused? (%v)", r)
			}
			if v, _ := res["versions"].(map[string]any)["store_postgres"].(string); !strings.HasPrefix(v, "15.") {
				t.Fatalf("store version %q not recorded as 15.x", v)
			}
			assertNoLeftovers(t, cli, res["run_id"].(string))
		})
	}
	t.Run("redis/redsync/unfenced with plain writes is invalid", func(t *testing.T) {
		code, res, _ := e2eRun(t, pgStoreRun("redis", "redsync", "unfenced-counter")...)
		if code != exitInvalid || res["valid"] != false {
			t.Fatalf("exit %d, valid %v: want invalid (plain UPDATEs let the late write in)", code, res["valid"])
		}
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
	t.Run("redis/redsync/unfenced behind the version check is valid", func(t *testing.T) {
		code, res, _ := e2eRun(t, pgStoreRun("redis", "redsync", "unfenced-counter", "--store-opt", "check=version")...)
		if code != exitValid || res["valid"] != true {
			t.Fatalf("exit %d, valid %v: want valid (stale versions refused)", code, res["valid"])
		}
		if r := checker(res, "summary")["rejections"].(float64); r < 1 {
			t.Fatalf("valid without a refused write: was a holder paused? (%v)", r)
		}
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
}

// pgStoreRun is a short run of target (with client, when set) behind
// --store postgres under pauses of the holder. A pause lands before its
// holder's write (the pause nemesis checks that once the freeze is in
// force) and outlasts the 2 s lease by more than another holder's 1 s
// of work, so the paused write comes after the next holder's: refused
// when fenced, a lost update when not.
func pgStoreRun(target, client, workload string, extra ...string) []string {
	args := []string{"run", "--target", target, "--store", "postgres", "--workload", workload,
		"--nemesis", "pause", "--pause-targets", "holder=1", "--time-limit", "10s",
		"--concurrency", "4", "--keys", "1", "--work", "1s", "--nemesis-interval", "1500ms", "--seed", "5",
		"--fault-min", "4s", "--fault-max", "5s"}
	if client != "" {
		args = append(args, "--client", client)
	}
	return append(args, extra...)
}
