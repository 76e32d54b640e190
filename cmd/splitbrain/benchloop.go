package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/targets/external"
	"github.com/splitbrain/splitbrain/workloads"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

// Modes of bench-loop.
const (
	// benchBare is the plain loop: the critical section's calls, nothing
	// recorded.
	benchBare = "bare"
	// benchAgent runs the real agent in this process, driven over in-memory
	// pipes by the real workload and client, recording to /dev/null: the
	// harness's protocol without the container's attached stdio.
	benchAgent = "agent"
	// benchAgentRecord is benchAgent recording history.jsonl to a file.
	benchAgentRecord = "agent-record"
)

// newBenchLoopCmd is the client side of `go run ./bench record`: it does
// the harness's critical section (acquire with the recipe's own Locker,
// read, work, write read+1, release) in a tight loop for --duration and
// prints its count as JSON, so that the harness's throughput can be
// compared with what the same containers reach without it.
func newBenchLoopCmd(_ *globalFlags) *cobra.Command {
	var (
		cfgJSON  string
		mode     string
		keys     int
		duration time.Duration
		startAt  int64
		seed     uint64
		out      string
	)
	cmd := &cobra.Command{
		Use:    "bench-loop",
		Short:  "Critical sections in a tight loop, counted (runs inside client nodes for the record benchmark)",
		Hidden: true,
		Args:   exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var cfg agent.Config
			if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
				return &usageError{fmt.Errorf("--config: %w", err)}
			}
			if keys < 1 || duration <= 0 {
				return &usageError{errors.New("--keys and --duration must be positive")}
			}
			if cfg.Client == "" {
				cfg.Client, _ = os.Hostname()
			}
			ctx := cmd.Context()
			if startAt > 0 {
				if d := time.Until(time.Unix(0, startAt)); d > 0 {
					time.Sleep(d)
				}
			}
			res := workloads.LoopResult{Mode: mode, Client: cfg.Client}
			if startAt > 0 {
				res.StartLag = max(0, time.Since(time.Unix(0, startAt)))
			}
			var err error
			switch mode {
			case benchBare:
				err = benchBareLoop(ctx, cfg, keys, duration, seed, &res)
			case benchAgent:
				err = benchAgentLoop(ctx, cfg, keys, duration, seed, "/dev/null", &res)
			case benchAgentRecord:
				err = benchAgentLoop(ctx, cfg, keys, duration, seed, out, &res)
			default:
				return &usageError{fmt.Errorf("--mode %q: want %s, %s or %s", mode, benchBare, benchAgent, benchAgentRecord)}
			}
			if err != nil {
				return err
			}
			res.CPU = processCPU()
			res.Finish()
			return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfgJSON, "config", "", "the agent configuration (JSON, as the harness sends it)")
	f.StringVar(&mode, "mode", benchBare, "bare (the calls only), agent (the agent protocol over in-process pipes), agent-record (and history.jsonl written)")
	f.IntVar(&keys, "keys", 3, "number of counters")
	f.DurationVar(&duration, "duration", 10*time.Second, "how long to loop")
	f.Int64Var(&startAt, "start-at", 0, "wall-clock time (Unix ns) to start at, so that all clients loop together")
	f.Uint64Var(&seed, "seed", 1, "seed of the key choices")
	f.StringVar(&out, "history", "/tmp/history.jsonl", "history file of --mode agent-record")
	return cmd
}

// benchBareLoop is the agent's unfenced critical section without the
// agent's protocol (agent.Sections): the same Locker, store client and
// timeouts.
func benchBareLoop(ctx context.Context, cfg agent.Config, keys int, d time.Duration, seed uint64, res *workloads.LoopResult) error {
	s, err := agent.NewSections(ctx, cfg, agent.Deps{Lockers: external.Lockers()})
	if err != nil {
		return err
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(seed, 1))
	start := time.Now()
	deadline := start.Add(d)
	for time.Now().Before(deadline) {
		r := s.Run(ctx, workloads.Key(rng.IntN(keys)))
		if r.Type != history.OK {
			res.Count(r.Error, 0, 0)
			continue
		}
		res.Count("", time.Duration(r.Wait), time.Duration(r.Hold))
	}
	res.Elapsed = time.Since(start)
	return nil
}

// benchAgentLoop runs the real agent in this process over pipes, driven by
// the counter workload and the harness's client, recording to path.
func benchAgentLoop(ctx context.Context, cfg agent.Config, keys int, d time.Duration, seed uint64, path string, res *workloads.LoopResult) error {
	// OS pipes, buffered like the container's attached stdio (io.Pipe
	// would block every event until the client read it).
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return err
	}
	respR, respW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer reqR.Close()
	defer respR.Close()
	actx, stop := context.WithCancel(ctx)
	defer stop()
	served := make(chan error, 1)
	go func() {
		served <- agent.Serve(actx, reqR, respW, agent.Deps{Lockers: external.Lockers()})
		respW.Close()
	}()
	hw, err := history.Create(path)
	if err != nil {
		return err
	}
	defer hw.Close()
	hw.OnAppend(func(e history.Event) {
		if e.F != history.FCriticalSection || !e.IsCompletion() {
			return
		}
		if e.Type == history.OK {
			res.Count("", time.Duration(e.Wait), time.Duration(e.Hold))
		} else {
			res.Count(string(e.Type)+":"+e.Error, 0, 0)
		}
	})
	rec := history.NewRecorder(hw, history.NewMonotonicClock())
	c := workloads.NewClient(cfg.Client, 0, reqW, respR, rec.Clock())
	hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	err = c.Configure(hctx, cfg)
	if err == nil {
		err = c.Sync(hctx)
	}
	cancel()
	if err != nil {
		return fmt.Errorf("agent handshake: %w", err)
	}
	// Quiet, as the harness is when no fault targets lock holders.
	wl, err := workloads.New(workloads.UnfencedCounter, workloads.CounterOptions{Keys: keys, Seed: seed, Work: time.Duration(cfg.Work), Quiet: true})
	if err != nil {
		return err
	}
	start := time.Now()
	wctx, wcancel := context.WithTimeout(ctx, d)
	defer wcancel()
	if err := wl.Run(wctx, []*workloads.Client{c}, rec); err != nil {
		return err
	}
	res.Elapsed = time.Since(start)
	_ = c.Close()
	select {
	case <-served:
	case <-time.After(5 * time.Second):
	}
	return nil
}

// processCPU is this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
