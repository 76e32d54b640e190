package workloads

import (
	"context"
	"fmt"
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

// pipelineRun runs a quiet counter on one key for d with clients agents
// over console sockets, all on the recorder's clock, and returns the
// history as read back (so validated) and the clients.
func pipelineRun(t *testing.T, opts CounterOptions, clients int, d time.Duration, st *store.Mem) ([]history.Event, []*Client) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "history.jsonl")
	hw, err := history.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	rec := history.NewRecorder(hw, history.NewMonotonicClock())
	locks := inmem.NewService(inmem.Options{})
	var cs []*Client
	for i := range clients {
		c := pairOn(t, transportSocket, locks, nil, st, rec.Clock())
		c.Name, c.Process = fmt.Sprintf("c%d", i+1), i
		cs = append(cs, c)
	}
	w, err := New(UnfencedCounter, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := w.Run(ctx, cs, rec); err != nil {
		t.Fatal(err)
	}
	if err := hw.Close(); err != nil {
		t.Fatal(err)
	}
	events, _, err := history.ReadFile(path)
	if err != nil {
		t.Fatalf("the history does not read back: %v", err)
	}
	return events, cs
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
	path := filepath.Join(t.TempDir(), "history.jsonl")
	hw, err := history.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	rec := history.NewRecorder(hw, history.NewMonotonicClock())
	harnessEnd, agentEnd := socketPair(t)
	st := store.NewMem(nil)
	var n atomic.Int64
	st.SetGate(func(ctx context.Context) error {
		if n.Add(1) == 20 {
			agentEnd.Close() // the agent's node dies mid-operation
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() {
		served <- agent.Serve(ctx, agentEnd, agentEnd, agent.Deps{
			Lockers:   map[string]targets.LockerFactory{inmem.Kind: inmem.NewService(inmem.Options{}).Factory()},
			DialStore: func(string, time.Duration) agent.Store { return st },
		})
	}()
	c := NewClient("c1", 0, harnessEnd, harnessEnd, rec.Clock())
	recipe := targets.RecipeConfig{Kind: inmem.Kind, TTL: targets.Duration(time.Minute)}
	if err := c.Configure(ctx, agent.Config{Client: "c1", Recipe: recipe, AcquireTimeout: targets.Duration(time.Second), ReleaseTimeout: targets.Duration(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(ctx); err != nil || !c.Exact() {
		t.Fatalf("sync: %v, exact %v", err, c.Exact())
	}
	w, err := New(UnfencedCounter, CounterOptions{Keys: 1, Quiet: true, OpTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer rcancel()
	if err := w.Run(rctx, []*Client{c}, rec); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-served
	if err := hw.Close(); err != nil {
		t.Fatal(err)
	}
	events, _, err := history.ReadFile(path)
	if err != nil {
		t.Fatalf("the history does not read back: %v", err)
	}
	var crashed []history.Event
	for _, e := range events {
		if e.Type == history.Info {
			crashed = append(crashed, e)
		}
	}
	if len(crashed) != 2 || crashed[0].Error != history.ErrCrashed || crashed[0].Process == crashed[1].Process {
		t.Fatalf("want two crashed outcomes on two processes, got %+v", crashed)
	}
}
