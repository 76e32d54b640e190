package main

import (
	"testing"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets/zookeeper"
)

// zkVerdicts runs the two verdict runs of one ZooKeeper client (extra
// flags choose it): holders paused past their session timeout lose
// updates without fencing; with the czxid as fencing token the data
// survive pauses, partitions and kills, and every token rose with its
// grants.
func zkVerdicts(t *testing.T, extra ...string) {
	t.Helper()
	t.Run("unfenced under pauses is invalid", func(t *testing.T) {
		args := append([]string{"run", "--target", "zookeeper", "--workload", "unfenced-counter", "--nemesis", "pause",
			"--time-limit", "15s", "--concurrency", "4", "--keys", "1", "--work", "1s", "--pause-targets", "holder=1", "--nemesis-interval", "2s", "--seed", "4"}, extra...)
		code, res, _ := e2eRun(t, args...)
		if code != exitInvalid || res["valid"] != false {
			t.Fatalf("exit %d, valid %v", code, res["valid"])
		}
		if lost := checker(res, "summary")["lost_updates"].(float64); lost < 1 {
			t.Fatalf("invalid without lost updates: %v", lost)
		}
		if v, _ := res["versions"].(map[string]any)["zookeeper"].(string); v != "3.8.0" {
			t.Fatalf("zookeeper version %q not recorded as 3.8.0", v)
		}
		if c, _ := res["client"].(map[string]any); c == nil || c["library"] == nil || c["version"] == nil || c["version"] == "" {
			t.Fatalf("client not recorded: %v", res["client"])
		}
	})
	t.Run("fenced under pause, partition and kill is valid", func(t *testing.T) {
		args := append([]string{"run", "--target", "zookeeper", "--workload", "fenced-counter", "--nemesis", "pause,partition,kill",
			"--time-limit", "25s", "--concurrency", "4", "--keys", "2", "--nemesis-interval", "1500ms", "--seed", "1",
			"--fault-overlap"}, extra...) // every kind lands, whatever the load (see TestEtcdVerdicts)
		code, res, _ := e2eRun(t, args...)
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
		if fo := checker(res, "fence_order"); fo["grants"].(float64) < 20 || fo["violations"].(float64) != 0 {
			t.Fatalf("fence order: %v", fo)
		}
		if ok := checker(res, "summary")["ok"].(float64); ok < 20 {
			t.Fatalf("only %v critical sections succeeded", ok)
		}
	})
}

// TestZooKeeperGoVerdicts: go-zookeeper/zk's Lock, in process.
func TestZooKeeperGoVerdicts(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, images.RoleClient, zookeeper.Role)
	zkVerdicts(t)
}

// TestZooKeeperCuratorVerdicts: Apache Curator's InterProcessMutex, a Java
// adapter through the client protocol.
func TestZooKeeperCuratorVerdicts(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, "client-"+zookeeper.CuratorKind, zookeeper.Role)
	zkVerdicts(t, "--client", zookeeper.CuratorKind)
}

// TestZooKeeperKazooVerdicts: Kazoo's Lock, a Python adapter through the
// client protocol.
func TestZooKeeperKazooVerdicts(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, "client-"+zookeeper.KazooKind, zookeeper.Role)
	zkVerdicts(t, "--client", zookeeper.KazooKind)
}
