package workloads

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/inmem"
	"github.com/splitbrain/splitbrain/targets/store"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

// newHistory returns a recorder on a fresh history file and a function
// that closes the file and reads it back (so validates it).
func newHistory(t *testing.T) (*history.Recorder, func() []history.Event) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "history.jsonl")
	hw, err := history.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hw.Close() })
	return history.NewRecorder(hw, history.NewMonotonicClock()), func() []history.Event {
		t.Helper()
		if err := hw.Close(); err != nil {
			t.Fatal(err)
		}
		events, _, err := history.ReadFile(path)
		if err != nil {
			t.Fatalf("the history does not read back: %v", err)
		}
		return events
	}
}

// socketAgent serves an agent built from deps (the in-memory lock service
// added) on one end of a socket pair and returns a configured, synced
// Client on clock at the other, and the agent's end: closing it is the
// agent's death.
func socketAgent(t *testing.T, deps agent.Deps, clock history.Clock) (*Client, *net.UnixConn) {
	t.Helper()
	harnessEnd, agentEnd := socketPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	deps.Lockers = map[string]targets.LockerFactory{inmem.Kind: inmem.NewService(inmem.Options{}).Factory()}
	go func() { served <- agent.Serve(ctx, agentEnd, agentEnd, deps) }()
	t.Cleanup(func() { cancel(); harnessEnd.Shutdown(); <-served })
	c := NewClient("c1", 0, harnessEnd, harnessEnd, clock)
	recipe := targets.RecipeConfig{Kind: inmem.Kind, TTL: targets.Duration(time.Minute)}
	if err := c.Configure(ctx, agent.Config{Client: "c1", Recipe: recipe, AcquireTimeout: targets.Duration(time.Second), ReleaseTimeout: targets.Duration(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	return c, agentEnd
}

// runFor runs a counter with opts on cs for d.
func runFor(t *testing.T, opts CounterOptions, cs []*Client, rec *history.Recorder, d time.Duration) {
	t.Helper()
	w, err := New(UnfencedCounter, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := w.Run(ctx, cs, rec); err != nil {
		t.Fatal(err)
	}
}

// pipelineRun runs a quiet counter on one key for d with clients agents
// over console sockets, all on the recorder's clock, and returns the
// history as read back and the clients.
func pipelineRun(t *testing.T, opts CounterOptions, clients int, d time.Duration, st *store.Mem) ([]history.Event, []*Client) {
	t.Helper()
	rec, finish := newHistory(t)
	locks := inmem.NewService(inmem.Options{})
	var cs []*Client
	for i := range clients {
		c := pairOn(t, transportSocket, locks, nil, st, rec.Clock())
		c.Name, c.Process = fmt.Sprintf("c%d", i+1), i
		cs = append(cs, c)
	}
	runFor(t, opts, cs, rec, d)
	return finish(), cs
}

// TestPipeline: a quiet counter whose agents read the run's clock sends a
// client's next operation while the current one runs (and with Serial
// never does). Either way the history reads back (time order, one
// operation per process in flight), every ok operation's invocation is no
// later than its grant and its completion no earlier than its release, and
// the store holds exactly the ok increments.
func TestPipeline(t *testing.T) {
	for _, serial := range []bool{false, true} {
		t.Run(fmt.Sprintf("serial=%v", serial), func(t *testing.T) {
			st := store.NewMem(nil)
			events, cs := pipelineRun(t, CounterOptions{Keys: 1, Quiet: true, Serial: serial, OpTimeout: 5 * time.Second}, 3, 300*time.Millisecond, st)
			ahead := 0
			for _, c := range cs {
				if !c.Exact() {
					t.Fatalf("%s: the agent's clock is not taken as the run's", c.Name)
				}
				ahead += c.ahead
			}
			if serial != (ahead == 0) {
				t.Fatalf("serial=%v, yet %d operations were sent while another ran", serial, ahead)
			}
			inv := map[int64]history.Event{}
			ok := 0
			for _, e := range events {
				switch e.Type {
				case history.Invoke:
					inv[e.ID] = e
				case history.OK:
					ok++
					i := inv[e.ID]
					if e.Acquired < i.Time || e.Released < e.Acquired || e.Time < e.Released {
						t.Fatalf("id %d: invoked %d, granted %d, released %d, completed %d", e.ID, i.Time, e.Acquired, e.Released, e.Time)
					}
				case history.Info:
					t.Fatalf("an unknown outcome without faults: %+v", e)
				}
			}
			if ok < 10 {
				t.Fatalf("only %d ok operations", ok)
			}
			e, err := st.Read(context.Background(), "k0", false, 0)
			if err != nil || e.Value != int64(ok) {
				t.Fatalf("the store holds %d (%v), %d ok increments recorded", e.Value, err, ok)
			}
		})
	}
}

// TestPipelineTimeout: when an operation outlasts the timeout, it and the
// one sent after it end unknown, each on a process of its own, invoked no
// later than the end of the client's operation before; the client then
// goes on once the agent has finished both.
func TestPipelineTimeout(t *testing.T) {
	st := store.NewMem(nil)
	var n atomic.Int64
	st.SetGate(func(ctx context.Context) error {
		if n.Add(1) == 20 { // a read or write halfway through the run
			time.Sleep(300 * time.Millisecond)
		}
		return nil
	})
	events, cs := pipelineRun(t, CounterOptions{Keys: 1, Quiet: true, OpTimeout: 100 * time.Millisecond}, 1, time.Second, st)
	if cs[0].ahead == 0 {
		t.Fatal("nothing was sent ahead")
	}
	var infos []history.Event
	inv := map[int64]history.Event{}
	lastEnd := int64(0) // the client's last known completion
	okAfter := 0
	for _, e := range events {
		switch e.Type {
		case history.Invoke:
			inv[e.ID] = e
		case history.Info:
			if i := inv[e.ID]; i.Time > lastEnd {
				t.Errorf("unknown id %d invoked at %d, after the client's last completion at %d", e.ID, i.Time, lastEnd)
			}
			infos = append(infos, e)
		case history.OK:
			lastEnd = e.Time
			if len(infos) > 0 {
				okAfter++
			}
		}
	}
	if len(infos) != 2 || infos[0].Process == infos[1].Process || infos[0].Error != history.ErrTimeout {
		t.Fatalf("want two unknown outcomes (timeout) on two processes, got %+v", infos)
	}
	if okAfter == 0 {
		t.Fatal("no operation after the timeout")
	}
}

// TestPipelineCrash: when the agent dies, the operation it was running and
// the one sent after it end crashed, each on a process of its own, and the
// history reads back.
func TestPipelineCrash(t *testing.T) {
	rec, finish := newHistory(t)
	st := store.NewMem(nil)
	var agentEnd atomic.Pointer[net.UnixConn]
	var n atomic.Int64
	st.SetGate(func(ctx context.Context) error {
		if n.Add(1) == 20 {
			agentEnd.Load().Close() // the agent's node dies mid-operation
		}
		return nil
	})
	c, end := socketAgent(t, agent.Deps{DialStore: func(string, time.Duration) agent.Store { return st }}, rec.Clock())
	agentEnd.Store(end)
	if !c.Exact() {
		t.Fatal("an agent on the harness's clock is not taken as exact")
	}
	runFor(t, CounterOptions{Keys: 1, Quiet: true, OpTimeout: 5 * time.Second}, []*Client{c}, rec, 500*time.Millisecond)
	var crashed []history.Event
	for _, e := range finish() {
		if e.Type == history.Info {
			crashed = append(crashed, e)
		}
	}
	if len(crashed) != 2 || crashed[0].Error != history.ErrCrashed || crashed[0].Process == crashed[1].Process {
		t.Fatalf("want two crashed outcomes on two processes, got %+v", crashed)
	}
}

// TestNotExact: a client whose agent reads another clock is not exact, and
// a quiet counter then runs it serially, stamping times itself.
func TestNotExact(t *testing.T) {
	rec, finish := newHistory(t)
	c, _ := socketAgent(t, agent.Deps{
		DialStore: func(string, time.Duration) agent.Store { return store.NewMem(nil) },
		Mono:      func() int64 { return history.MonotonicNow() + int64(time.Millisecond) }, // 1 ms off
	}, rec.Clock())
	if c.Exact() {
		t.Fatal("an agent on another clock is taken as exact")
	}
	runFor(t, CounterOptions{Keys: 1, Quiet: true, OpTimeout: 5 * time.Second}, []*Client{c}, rec, 100*time.Millisecond)
	if c.ahead != 0 {
		t.Fatalf("%d operations sent ahead to an agent on another clock", c.ahead)
	}
	if len(finish()) == 0 {
		t.Fatal("nothing recorded")
	}
}
