package main

import (
	"context"
	"fmt"
	"os"
	"time"
)

// zkRound is one ZooKeeper bring-up.
type zkRound struct {
	Round int `json:"round"`
	// Untuned says the JVMs ran with their start-up defaults.
	Untuned bool `json:"untuned"`
	// ContainersMS is when the last of the 3 containers had started;
	// ServingMS is zookeeper.Target.Start: every member serving, one
	// leading (the srvr probe, from inside each member).
	ContainersMS float64 `json:"containers_started_ms"`
	ServingMS    float64 `json:"serving_ms"`
	Err          string  `json:"error,omitempty"`
}

type zkBringupData struct {
	Rounds     []zkRound `json:"rounds"`
	Tuned      Stats     `json:"tuned_serving_ms"`
	Untuned    Stats     `json:"untuned_serving_ms"`
	Containers Stats     `json:"tuned_containers_started_ms"`
	Load       [2]string `json:"loadavg_before_after"`
}

// runBringupZK times ZooKeeper ensembles coming up: rounds with the
// member program's JVM flags (serial collector, C1 only, small initial
// heap) and, interleaved, rounds with the JVM's defaults.
func runBringupZK(args []string) error {
	var c common
	fs := newFlags("bringup-zk", &c)
	rounds := fs.Int("rounds", 5, "bring-ups with the tuned JVM flags")
	untuned := fs.Int("untuned-rounds", 3, "bring-ups with the JVM's defaults, interleaved")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.begin("bringup-zk", args)
	ctx := context.Background()
	roles, err := backendRoles("zookeeper")
	if err != nil {
		return err
	}
	env, err := connectDocker(ctx, roles...)
	if err != nil {
		return err
	}
	defer env.Close()
	var data zkBringupData
	data.Load[0] = loadavg()
	var tunedMS, untunedMS, contMS []float64
	for r := 1; r <= max(*rounds, *untuned); r++ {
		for _, u := range []bool{false, true} {
			if (!u && r > *rounds) || (u && r > *untuned) {
				continue
			}
			zr := bringupZKOnce(ctx, env, r, u)
			data.Rounds = append(data.Rounds, zr)
			if zr.Err == "" {
				if u {
					untunedMS = append(untunedMS, zr.ServingMS)
				} else {
					tunedMS, contMS = append(tunedMS, zr.ServingMS), append(contMS, zr.ContainersMS)
				}
			}
			logf("round %d (untuned %v): containers started %.0f ms, serving %.0f ms %s", r, u, zr.ContainersMS, zr.ServingMS, zr.Err)
		}
	}
	data.Load[1] = loadavg()
	data.Tuned, data.Untuned, data.Containers = stats(tunedMS), stats(untunedMS), stats(contMS)

	fmt.Println("## ZooKeeper bring-up (ms), each round on a fresh docker.New runtime")
	tw := table(os.Stdout, "round", "JVM flags", "containers started", "3 members serving (Start)", "error")
	for _, r := range data.Rounds {
		flags := "tuned"
		if r.Untuned {
			flags = "defaults"
		}
		row(tw, fmt.Sprint(r.Round), flags, fms(r.ContainersMS), fms(r.ServingMS), r.Err)
	}
	row(tw, "median", "tuned", fms(data.Containers.Median), fms(data.Tuned.Median))
	row(tw, "max", "tuned", fms(data.Containers.Max), fms(data.Tuned.Max))
	row(tw, "median", "defaults", "", fms(data.Untuned.Median))
	tw.Flush()
	fmt.Printf("\nload average before: %s; after: %s\n", data.Load[0], data.Load[1])
	if data.Tuned.Median > 0 && data.Untuned.Median > 0 {
		fmt.Printf("tuned JVM flags: bring-up at %.0f%% of the defaults' (median)\n", 100*data.Tuned.Median/data.Untuned.Median)
	}
	return c.finish([]Target{{
		Name: fmt.Sprintf("3-member ZooKeeper serving from container create (%d rounds)", len(tunedMS)), Want: "< 15 s",
		Measured: len(tunedMS) > 0, Value: data.Tuned.Max / 1000, Met: len(tunedMS) > 0 && data.Tuned.Max < 15000,
		Got: fmt.Sprintf("median %.2fs, max %.2fs (JVM defaults: median %.2fs)", data.Tuned.Median/1000, data.Tuned.Max/1000, data.Untuned.Median/1000),
	}}, data)
}

func bringupZKOnce(ctx context.Context, env *dockerEnv, round int, untuned bool) zkRound {
	zr := zkRound{Round: round, Untuned: untuned}
	rt, _, err := env.newRuntime(ctx, "bench")
	if err != nil {
		zr.Err = err.Error()
		return zr
	}
	defer closeRuntime(rt)
	tr := &timedRuntime{Runtime: rt, t0: time.Now()}
	jvm := map[string]string{"jvm": "tuned"}
	if untuned {
		jvm["jvm"] = "defaults"
	}
	if _, _, err := env.startBackend(ctx, tr, "zookeeper", jvm, 2*time.Second); err != nil {
		zr.Err = err.Error()
		return zr
	}
	zr.ServingMS = ms(time.Since(tr.t0))
	for _, s := range tr.starts {
		zr.ContainersMS = max(zr.ContainersMS, ms(s))
	}
	return zr
}

// loadavg is /proc/loadavg's first three fields: how busy the machine
// was, for reading the figures.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	var a, b5, c string
	fmt.Sscan(string(b), &a, &b5, &c)
	return a + " " + b5 + " " + c
}
