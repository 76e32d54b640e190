package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/inmem"
	"github.com/splitbrain/splitbrain/targets/store"
	"github.com/splitbrain/splitbrain/workloads"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

// The benchmarks below isolate what the harness adds to one critical
// section, with a lock and a store that answer at once, in process (the
// in-memory lock service and store.Mem): the agent protocol over real pipes
// (JSON lines both ways, four responses per operation), and the history
// records. Profile them with
//
//	go test -run '^$' -bench Protocol -cpuprofile cpu.out ./bench/
//	go tool pprof -top bench.test cpu.out

var fakeConfig = agent.Config{
	Client: "c1", Recipe: targets.RecipeConfig{Kind: inmem.Kind, Endpoints: []string{"x"}, TTL: targets.Duration(2 * time.Second)},
	Store: "x", StoreTimeout: targets.Duration(time.Second), AcquireTimeout: targets.Duration(5 * time.Second),
	ReleaseTimeout: targets.Duration(time.Second),
}

// BenchmarkProtocolBare is the critical section's calls alone.
func BenchmarkProtocolBare(b *testing.B) {
	l, st := inmem.NewService(inmem.Options{}).Locker("c1", time.Minute, inmem.Faults{}), store.NewMem(nil)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		lease, _ := l.Acquire(ctx, "k0")
		e, _ := st.Read(ctx, "k0", false, 0)
		_, _ = st.Write(ctx, "k0", e.Value+1, int64(i), false, 0)
		_ = lease.Release(ctx)
	}
}

// BenchmarkProtocolAgent is one critical section through the agent
// protocol over OS pipes, recorded (or not) as the counter workload does.
func BenchmarkProtocolAgent(b *testing.B) {
	for _, rec := range []string{"none", "file"} {
		b.Run("history="+rec, func(b *testing.B) {
			path := os.DevNull
			if rec == "file" {
				path = filepath.Join(b.TempDir(), "history.jsonl")
			}
			benchProtocol(b, path)
		})
	}
}

func benchProtocol(b *testing.B, path string) {
	reqR, reqW, _ := os.Pipe()
	respR, respW, _ := os.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deps := agent.Deps{
		Lockers:   map[string]targets.LockerFactory{inmem.Kind: inmem.NewService(inmem.Options{}).Factory()},
		DialStore: func(string, time.Duration) agent.Store { return store.NewMem(nil) },
	}
	done := make(chan struct{})
	go func() {
		_ = agent.Serve(ctx, reqR, respW, deps)
		respW.Close()
		close(done)
	}()
	hw, err := history.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer hw.Close()
	rec := history.NewRecorder(hw, history.NewMonotonicClock())
	c := workloads.NewClient("c1", 0, reqW, respR, rec.Clock())
	if err := c.Configure(ctx, fakeConfig); err != nil {
		b.Fatal(err)
	}
	if err := c.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var id int64
	for b.Loop() {
		id++
		// What workloads.Counter.op does around one operation.
		inv := history.Event{Type: history.Invoke, Process: 0, Client: "c1", ID: id, F: history.FCriticalSection, Key: "k0"}
		rec.Record(inv)
		res, err := c.Do(ctx, agent.OpRequest{ID: id, F: history.FCriticalSection, Key: "k0"}, time.Minute, func(agent.Response) {})
		if err != nil {
			b.Fatal(err)
		}
		d := inv
		d.Type, d.Token, d.Read, d.Write = res.Type, res.Token, res.Read, res.Write
		d.Acquired, d.WriteAt, d.Released = c.RunTime(res.AcquiredMono), c.RunTime(res.WriteMono), c.RunTime(res.ReleasedMono)
		d.Wait, d.Hold = res.Wait, res.Hold
		rec.Record(d)
	}
	b.StopTimer()
	_ = c.Close()
	<-done
	_, _ = io.Copy(io.Discard, respR)
}
