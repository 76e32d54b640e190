package workloads

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/inmem"
	"github.com/splitbrain/splitbrain/targets/store"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

// benchAgentEnv makes the test binary a bare agent (see TestMain).
const benchAgentEnv = "SPLITBRAIN_WORKLOADS_BENCH_AGENT"

func TestMain(m *testing.M) {
	if os.Getenv(benchAgentEnv) != "" {
		os.Exit(serveBenchAgent())
	}
	os.Exit(m.Run())
}

// serveBenchAgent is the child of BenchmarkCriticalSectionProcess: a real
// agent on the console socket the runtime names, with the in-memory lock
// service and store.
func serveBenchAgent() int {
	ctx := context.Background()
	// As the agent command does (cmd/splitbrain/agent.go).
	if os.Getenv("GOMAXPROCS") == "" {
		goruntime.GOMAXPROCS(1)
	}
	if path := os.Getenv(benchAgentEnv + "_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			if pprof.StartCPUProfile(f) == nil {
				defer pprof.StopCPUProfile()
			}
		}
	}
	deps := agent.Deps{
		Lockers:   map[string]targets.LockerFactory{inmem.Kind: inmem.NewService(inmem.Options{}).Factory()},
		DialStore: func(string, time.Duration) agent.Store { return store.NewMem(nil) },
	}
	err := runtime.ServeConsole(ctx, func(in io.Reader, out io.Writer) error { return agent.Serve(ctx, in, out, deps) })
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench agent:", err)
		return 1
	}
	return 0
}

// BenchmarkCriticalSectionProcess is one recorded critical section as the
// harness runs it (Counter.op: invocation and completion written to a
// history file) against a real agent in another process, over a console
// Unix socket as with a local engine, with the in-memory lock service and
// store in the agent (work 0). Besides the wall time it reports the CPU
// each process spent per operation and their context switches (wake-ups)
// per operation: what the control channel costs on a machine where every
// microsecond of CPU is taken from the lock service and the store.
// Sub-benchmarks: live (progress events sent, as when a fault targets
// holders) and quiet (done responses only).
func BenchmarkCriticalSectionProcess(b *testing.B) {
	for _, quiet := range []bool{false, true} {
		name := "live"
		if quiet {
			name = "quiet"
		}
		b.Run(name, func(b *testing.B) { benchCriticalSectionProcess(b, quiet) })
	}
}

func benchCriticalSectionProcess(b *testing.B, quiet bool) {
	dir := b.TempDir()
	sock := filepath.Join(dir, "console")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchAgentEnv+"=1", runtime.ControlSocketEnv+"="+sock)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	ctx := context.Background()
	conn, err := runtime.DialConsole(ctx, sock, 10*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Shutdown()
	hw, err := history.Create(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer hw.Close()
	rec := history.NewRecorder(hw, history.NewMonotonicClock())
	c := NewClient("c1", 0, conn, conn, rec.Clock())
	recipe := targets.RecipeConfig{Kind: inmem.Kind, TTL: targets.Duration(time.Minute)}
	if err := c.Configure(ctx, agent.Config{Client: "c1", Recipe: recipe, AcquireTimeout: targets.Duration(time.Second), ReleaseTimeout: targets.Duration(time.Second)}); err != nil {
		b.Fatal(err)
	}
	if err := c.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	w, err := New(UnfencedCounter, CounterOptions{Keys: 1, Quiet: quiet})
	if err != nil {
		b.Fatal(err)
	}
	self, child := procUse(os.Getpid()), procUse(cmd.Process.Pid)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		done, err := w.op(ctx, c, 1, history.FCriticalSection, "k0", false, 5*time.Second, rec)
		if err != nil || done.Type != history.OK {
			b.Fatalf("%+v %v", done, err)
		}
		n++
	}
	b.StopTimer()
	self2, child2 := procUse(os.Getpid()), procUse(cmd.Process.Pid)
	per := func(x int64) float64 { return float64(x) / float64(n) }
	b.ReportMetric(per(self2.cpuNS-self.cpuNS)/1e3, "harness-cpu-µs/op")
	b.ReportMetric(per(child2.cpuNS-child.cpuNS)/1e3, "agent-cpu-µs/op")
	b.ReportMetric(per(self2.switches-self.switches), "harness-cs/op")
	b.ReportMetric(per(child2.switches-child.switches), "agent-cs/op")
	_ = c.Close() // the agent ends, writing its profile if asked
}

// use is a process's CPU time on all its threads and its context
// switches, voluntary or not.
type use struct{ cpuNS, switches int64 }

// procUse reads pid's use from /proc (zero where it cannot).
func procUse(pid int) use {
	var u use
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	for _, t := range tasks {
		if b, err := os.ReadFile(filepath.Join(t, "schedstat")); err == nil {
			if f := bytes.Fields(b); len(f) > 0 {
				ns, _ := strconv.ParseInt(string(f[0]), 10, 64)
				u.cpuNS += ns
			}
		}
		f, err := os.Open(filepath.Join(t, "status"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := bytes.Cut(sc.Bytes(), []byte(":"))
			if ok && (string(k) == "voluntary_ctxt_switches" || string(k) == "nonvoluntary_ctxt_switches") {
				x, _ := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
				u.switches += x
			}
		}
		f.Close()
	}
	return u
}
