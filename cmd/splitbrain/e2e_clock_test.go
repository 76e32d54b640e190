package main

import (
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/internal/clockskew"
	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/nemesis/clock"
	"github.com/splitbrain/splitbrain/runtime/images"
)

// clockFaults parses the clock faults of a run's results.json, failing if
// there is none or one is not a clock fault.
func clockFaults(t *testing.T, res map[string]any) []clock.Record {
	t.Helper()
	faults, _ := res["faults"].([]any)
	if len(faults) == 0 {
		t.Fatal("no fault injected: the run proved nothing")
	}
	var out []clock.Record
	for _, f := range faults {
		m := f.(map[string]any)
		if m["f"] != "clock" {
			t.Fatalf("fault %v is not a clock fault", m)
		}
		d, _ := m["detail"].(string)
		rec, err := clock.ParseRecord(d)
		if err != nil {
			t.Fatal(err)
		}
		if tg, _ := m["targets"].([]any); len(tg) != 1 || tg[0] != rec.Target {
			t.Fatalf("fault targets %v, detail %q", m["targets"], d)
		}
		// The observation is a round trip to the process: on a loaded
		// machine it can be off by up to half of it, as the record says.
		if (rec.Observed - rec.Offsets[0]).Abs() > 300*time.Millisecond+rec.Uncertainty {
			t.Fatalf("fault %q: observed skew far from the offset set", d)
		}
		out = append(out, rec)
	}
	return out
}

func noErrors(t *testing.T, res map[string]any) {
	t.Helper()
	if errs, ok := res["errors"]; ok {
		t.Fatalf("harness errors: %v", errs)
	}
}

// TestClockRedisVerdicts: Redis expires keys by its own wall clock, so a
// forward jump of the Redis process's clock past the lease TTL (2 s; jumps
// of 2..6 s) expires the held lock at once and lets the next client in
// while the holder works: overlapping holders, and without fencing lost
// updates. With fencing the store refuses the robbed holder's late write.
// The lock's own verdict may say mutual exclusion broke: the fault broke it.
// Each jump expires whatever lock is held then; 1 s sections (the client
// ahead reads at once, the holder writes a second later) and 1 s between
// jumps make the robbed holder's late write follow from nearly every jump,
// not from how a loaded machine happens to time a 300 ms section.
func TestClockRedisVerdicts(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, images.RoleClient, "redis")
	common := []string{"run", "--target", "redis", "--nemesis", "clock", "--time-limit", "15s",
		"--concurrency", "4", "--keys", "1", "--work", "1s", "--nemesis-interval", "1s",
		"--clock-targets", "node=1", "--clock-modes", "bump", "--clock-direction", "forward", "--seed", "3"}
	checkFaults := func(t *testing.T, res map[string]any) {
		t.Helper()
		for _, r := range clockFaults(t, res) {
			if r.Mode != clock.ModeBump || r.Target != "n1" || r.Via != clockskew.ViaShim || r.Offsets[0] < 2*time.Second ||
				strings.Join(r.Clocks, ",") != "realtime" {
				t.Fatalf("fault %v: want a forward bump of n1's CLOCK_REALTIME past the TTL through the shim", r)
			}
		}
	}

	t.Run("unfenced is invalid", func(t *testing.T) {
		code, res, _ := e2eRun(t, append(common, "--workload", "unfenced-counter")...)
		if code != exitInvalid || res["valid"] != false {
			t.Fatalf("exit %d, valid %v", code, res["valid"])
		}
		if n := checker(res, "mutex")["overlaps"].(float64); n < 1 {
			t.Fatalf("no overlapping holders (%v) after Redis's clock jumped past the TTL", n)
		}
		if lost := checker(res, "summary")["lost_updates"].(float64); lost < 1 {
			t.Fatalf("invalid without lost updates: %v", lost)
		}
		checkFaults(t, res)
		noErrors(t, res)
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
	// The jump expires a held lock early, so the lock may come out invalid
	// for mutual exclusion (a second grant while the first lock was
	// certainly alive, had the clock kept time): that is the fault breaking
	// the lock's promise. Its tokens stay in order, and the store keeps the
	// data whatever the lock verdict.
	t.Run("fenced keeps the data", func(t *testing.T) {
		code, res, _ := e2eRun(t, append(common, "--workload", "fenced-counter")...)
		fencedKeptData(t, code, res)
		if n := checker(res, "mutex")["overlaps"].(float64); n < 1 {
			t.Fatalf("no overlapping holders (%v): the clock jumps proved nothing", n)
		}
		if rej := checker(res, "summary")["rejections"].(float64); rej < 1 {
			t.Fatalf("no late write was stopped (rejections %v)", rej)
		}
		checkFaults(t, res)
		noErrors(t, res)
		assertNoLeftovers(t, cli, res["run_id"].(string))
	})
}

// TestClockRedisClientExpiry: with expiry=client the lock's expiry is
// judged by each client's own wall clock. A waiting client whose clock is
// bumped forward past the TTL sees every live lock as expired and steals
// it: overlapping holders and, unfenced, lost updates. Without clock
// faults the same recipe is correct (checked by the harness's own tests
// of the recipe). Forced: jumps of 5-10 s (every live lock looks expired
// to the jumped client, whatever its age) and about five faults of 3-5 s
// in 20 s, so that a client jumped while it waits steals even on a loaded
// machine (2 jumps of 2-6 s in 15 s once gave no overlap under load).
func TestClockRedisClientExpiry(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	testenv.Images(t, cli, images.RoleStore, images.RoleClient, "redis")
	code, res, _ := e2eRun(t, "run", "--target", "redis", "--workload", "unfenced-counter", "--nemesis", "clock",
		"--recipe-opt", "expiry=client", "--time-limit", "20s", "--concurrency", "4", "--keys", "1", "--work", "300ms",
		"--nemesis-interval", "1s", "--clock-targets", "client=1", "--clock-modes", "bump", "--clock-direction", "forward",
		"--clock-min", "5s", "--clock-max", "10s", "--seed", "2")
	if code != exitInvalid || res["valid"] != false {
		t.Fatalf("exit %d, valid %v", code, res["valid"])
	}
	if n := checker(res, "mutex")["overlaps"].(float64); n < 1 {
		t.Fatalf("no overlapping holders (%v) with a client clock ahead", n)
	}
	if lost := checker(res, "summary")["lost_updates"].(float64); lost < 1 {
		t.Fatalf("no lost updates (%v)", lost)
	}
	for _, r := range clockFaults(t, res) {
		if r.Via != clockskew.ViaVDSO || !strings.HasPrefix(r.Target, "c") || r.Offsets[0] < 2*time.Second {
			t.Fatalf("fault %v: want a client's clock bumped forward by vDSO injection", r)
		}
	}
	noErrors(t, res)
	assertNoLeftovers(t, cli, res["run_id"].(string))
}

// TestClockRaftFencedValid: etcd and lockd under clock bumps and strobes of
// nodes and holders, CLOCK_MONOTONIC included (what their leases are timed
// with), keep the data correct with fencing. A forward jump of the
// leader's CLOCK_MONOTONIC expires its leases early, so the lock may come
// out invalid for mutual exclusion (a second grant while the first lease
// was certainly alive by the true clock: seen beside two busy loops, etcd
// granting c2 270 ms after c3); that is the fault breaking the lease's
// promise, and the tokens stay in order and the store keeps the data
// whatever the lock verdict.
func TestClockRaftFencedValid(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	cli := testenv.Docker(t)
	for _, target := range []string{"etcd", "lockd"} {
		t.Run(target, func(t *testing.T) {
			testenv.Images(t, cli, images.RoleStore, images.RoleClient, target)
			code, res, _ := e2eRun(t, "run", "--target", target, "--workload", "fenced-counter", "--nemesis", "clock",
				"--clock-targets", "node=1,holder=1", "--clock-monotonic", "--time-limit", "20s", "--concurrency", "4",
				"--keys", "1", "--work", "300ms", "--nemesis-interval", "2s", "--seed", "2")
			fencedKeptData(t, code, res)
			for _, r := range clockFaults(t, res) {
				if r.Via != clockskew.ViaVDSO || strings.Join(r.Clocks, ",") != "realtime,monotonic" {
					t.Fatalf("fault %v: want both clocks skewed by vDSO injection", r)
				}
			}
			opts, _ := res["options"].(map[string]any)
			faults, _ := opts["faults"].(map[string]any)
			if clk, _ := faults["clock"].(map[string]any); clk["monotonic"] != true {
				t.Fatalf("options %v lack faults.clock.monotonic", opts)
			}
			noErrors(t, res)
			assertNoLeftovers(t, cli, res["run_id"].(string))
		})
	}
}

// TestClockBadInput: clock options are checked before anything starts.
func TestClockBadInput(t *testing.T) {
	res := t.TempDir()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--clock-targets", "store=1"}, "--clock-targets"},
		{[]string{"--clock-modes", "wobble"}, "unknown clock mode"},
		{[]string{"--clock-direction", "sideways"}, "unknown clock direction"},
		{[]string{"--clock-min", "5s", "--clock-max", "1s"}, "offset range"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			code, _, stderr := run(t, append([]string{"run", "--nemesis", "clock", "--results", res}, tt.args...)...)
			if code != exitBadInput || !strings.Contains(stderr, tt.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
				t.Fatalf("exit %d, stderr %q; want exit %d and one line with %q", code, stderr, exitBadInput, tt.want)
			}
		})
	}
}

// fencedKeptData checks a fenced run under clock faults: the store kept
// the data and the tokens stayed in order, and the run is valid or its
// lock invalid for mutual exclusion only (a clock fault that expires a
// lease early breaks the lock's promise; fencing still keeps the data).
func fencedKeptData(t *testing.T, code int, res map[string]any) {
	t.Helper()
	if res["data"] != true {
		t.Fatalf("exit %d, data %v: want the data kept by fencing", code, res["data"])
	}
	c, _ := res["checkers"].(map[string]any)
	fo, _ := c["fence_order"].(map[string]any)
	mx, _ := c["mutex"].(map[string]any)
	if fo["valid"] != true {
		t.Fatalf("fence order %v: tokens went back", fo["valid"])
	}
	switch {
	case code == exitValid && res["valid"] == true && res["lock"] == true:
	case code == exitInvalid && res["lock"] == false && mx["valid"] == false:
	default:
		t.Fatalf("exit %d, valid %v, lock %v, mutual exclusion %v: want valid, or the lock invalid for mutual exclusion only",
			code, res["valid"], res["lock"], mx["valid"])
	}
}
