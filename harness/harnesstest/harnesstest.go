// Package harnesstest runs the harness in memory, as net/http/httptest runs
// a server: nodes are goroutines on the in-memory runtime (runtime/memrt),
// the lock backend is targets/inmem, the counter store a store.Mem, and
// each client is the real agent, driven over pipes. Stopping a node
// freezes what goes through it; killing the lock node makes the service
// unavailable until it restarts.
//
// It serves the tests of the harness and of what drives it (scenarios);
// only tests import it (internal/layers.TestOnly).
package harnesstest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/memrt"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/inmem"
	"github.com/splitbrain/splitbrain/targets/store"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

// World wires harness runs in memory. Each run gets its own runtime, lock
// service and store, as a real run gets fresh containers (a run that takes
// over an earlier run's lock node from a harness.Pool gets a store and
// clients of its own on that run's service); the last run's stay for the
// test to look at. The zero World is ready to use.
type World struct {
	// Service configures each run's lock service.
	Service inmem.Options
	// Target is the backend; its Alias renames it, so that a scenario
	// written for another backend runs on the in-memory service.
	Target inmem.Target
	// Lockers are more lock clients the agents can make, by recipe kind
	// (a recipe registered by the test), besides the in-memory one.
	Lockers map[string]targets.LockerFactory
	// Exec, when set, answers the commands run in the nodes (memrt.New);
	// otherwise every command succeeds.
	Exec memrt.ExecFunc

	mu   sync.Mutex
	last Run
}

// registerRecipe registers the in-memory recipe once per test binary (the
// registry is global): the harness checks recipe options against it. The
// agents of a run get the run's own service's factory.
var registerRecipe sync.Once

// Run is what one harness run was wired from.
type Run struct {
	Runtime *memrt.Runtime
	Locks   *inmem.Service
	Store   *store.Mem
}

// Last returns the latest run's parts (zero before any run).
func (w *World) Last() Run {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// Deps returns the harness's dependencies for runs in w; the harness's
// warnings and errors go to tb's log.
func (w *World) Deps(tb testing.TB) harness.Deps {
	registerRecipe.Do(func() { targets.RegisterRecipe(inmem.Recipe(inmem.NewService(inmem.Options{}))) })
	b := w.Target.Backend()
	return harness.Deps{
		Backends: func(name string) (targets.Backend, error) {
			if name != b.Name {
				return targets.Backend{}, fmt.Errorf("unknown target %q (known: %s)", name, b.Name)
			}
			return b, nil
		},
		NewRuntime: func(context.Context, string, bool, *slog.Logger) (runtime.Runtime, error) {
			r := w.newRun()
			return r.Runtime, nil
		},
		Log: slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

func (w *World) newRun() Run {
	locks, st := inmem.NewService(w.Service), store.NewMem(nil)
	programs := w.programs(locks, st)
	programs[inmem.Role] = locks.Program()
	r := Run{Runtime: memrt.New(programs, w.Exec), Locks: locks, Store: st}
	r.Runtime.Handover = func(next *memrt.Runtime) { w.takeOver(next, locks) }
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = r
	return r
}

// takeOver gives a run that took over the lock node of an earlier run
// (harness.Pool) a store and clients of its own, on the same lock service.
func (w *World) takeOver(next *memrt.Runtime, locks *inmem.Service) {
	st := store.NewMem(nil)
	for role, p := range w.programs(locks, st) {
		next.SetProgram(role, p)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = Run{Runtime: next, Locks: locks, Store: st}
}

// programs are the store's and the clients' programs of a run on locks
// with store st.
func (w *World) programs(locks *inmem.Service, st *store.Mem) map[string]memrt.Program {
	programs := map[string]memrt.Program{
		runtime.RoleStore: func(ctx context.Context, p *memrt.Proc) error {
			st.SetGate(p.Gate.WaitContext)
			<-ctx.Done()
			return nil
		},
		runtime.RoleClient: func(ctx context.Context, p *memrt.Proc) error {
			lockers := map[string]targets.LockerFactory{inmem.Kind: locks.Factory()}
			for k, f := range w.Lockers {
				lockers[k] = f
			}
			return agent.Serve(ctx, p.Stdin, p.Stdout, agent.Deps{
				Lockers:   lockers,
				DialStore: func(string, time.Duration) agent.Store { return st },
				Step:      p.Gate.Wait,
			})
		},
	}
	return programs
}

// tbWriter writes to a test's log, so that it shows only on failure.
type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Helper()
	w.tb.Log(string(p))
	return len(p), nil
}
