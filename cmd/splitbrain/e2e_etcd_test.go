package main

import (
	"testing"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime/images"
)

// TestEtcdVerdicts: on a real 3-node etcd cluster, holders paused past
// their session's lease lose updates without fencing; with fencing the data
// survive pauses, partitions and kills.
func TestEtcdVerdicts(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, images.RoleClient, "etcd")

	t.Run("unfenced under pauses is invalid", func(t *testing.T) {
		// 30 s, not 20: the same first faults and a few more, so that one
		// pause landing outside a section on a loaded runner (seen in CI
		// beside other Docker work: 3 faults, no lost update) still leaves
		// others to give a live lock away.
		code, res, _ := e2eRun(t, "run", "--target", "etcd", "--workload", "unfenced-counter", "--nemesis", "pause",
			"--time-limit", "30s", "--concurrency", "4", "--keys", "1", "--work", "1s", "--pause-targets", "holder=1", "--seed", "4")
		if code != exitInvalid || res["valid"] != false {
			t.Fatalf("exit %d, valid %v", code, res["valid"])
		}
		if lost := checker(res, "summary")["lost_updates"].(float64); lost < 1 {
			t.Fatalf("invalid without lost updates: %v", lost)
		}
		if v, _ := res["versions"].(map[string]any)["etcd"].(string); v == "" || v[:4] != "3.6." {
			t.Fatalf("etcd version %q not recorded as 3.6.x", v)
		}
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
	t.Run("fenced under pause, partition and kill is valid", func(t *testing.T) {
		code, res, _ := e2eRun(t, "run", "--target", "etcd", "--workload", "fenced-counter", "--nemesis", "pause,partition,kill",
			"--time-limit", "25s", "--concurrency", "4", "--keys", "2", "--nemesis-interval", "2s", "--seed", "11",
			// Each kind on its own schedule: all three land within the
			// first seconds however long a loaded machine takes to
			// inject and heal each (one after the other, a 25 s run at
			// load 20 once landed only two).
			"--fault-overlap")
		if code != exitValid || res["valid"] != true {
			t.Fatalf("exit %d, valid %v", code, res["valid"])
		}
		kinds := map[string]bool{}
		for _, f := range res["faults"].([]any) {
			kinds[f.(map[string]any)["f"].(string)] = true
		}
		if !kinds["pause"] || !kinds["partition"] || !kinds["kill"] {
			t.Fatalf("faults of only %v kinds injected, want pause, partition and kill", kinds)
		}
		if errs, ok := res["errors"]; ok {
			t.Fatalf("harness errors: %v", errs)
		}
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
}
