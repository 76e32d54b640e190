package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/inmem"
	"github.com/splitbrain/splitbrain/targets/store"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

// TestSections: the agent's critical section in process, without the
// protocol — ok sections add one each with their wait and hold, a held
// lock answers busy, an unreachable store store-unavailable, the lock is
// given back every time; an unknown recipe is refused at the start.
func TestSections(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(locks *inmem.Service, st *spyStore)
		typ   history.Type
		kind  string
		value int64 // the counter after 3 sections
	}{
		{name: "ok", typ: history.OK, value: 3},
		{name: "busy", setup: func(locks *inmem.Service, _ *spyStore) { hold(t, locks) }, typ: history.Fail, kind: history.ErrBusy},
		{name: "store unreachable", setup: func(_ *inmem.Service, st *spyStore) { st.Fail(store.Refuse, store.Deliver) },
			typ: history.Fail, kind: history.ErrStoreUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			locks := inmem.NewService(inmem.Options{})
			st := &spyStore{Mem: store.NewMem(nil)}
			if tc.setup != nil {
				tc.setup(locks, st)
			}
			ctx := context.Background()
			s, err := agent.NewSections(ctx, *config(nil), agent.Deps{
				Lockers:   map[string]targets.LockerFactory{inmem.Kind: locks.Factory()},
				DialStore: func(string, time.Duration) agent.Store { return st },
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for range 3 {
				r := s.Run(ctx, "k")
				if r.Type != tc.typ || r.Error != tc.kind {
					t.Fatalf("result %+v, want %s %q", r, tc.typ, tc.kind)
				}
				if r.Type == history.OK && (r.Wait < 0 || r.Hold < int64(time.Millisecond) || r.Write == nil) {
					t.Errorf("ok section: wait %d, hold %d ns (work 1 ms), write %+v", r.Wait, r.Hold, r.Write)
				}
			}
			if e, _ := st.Store().Read("k", false, 0); e.Value != tc.value {
				t.Errorf("counter %d, want %d", e.Value, tc.value)
			}
			if tc.kind != history.ErrBusy {
				// Given back: another client takes it at once.
				if _, err := locks.Locker("other", time.Minute, inmem.Faults{}).Acquire(ctx, "k"); err != nil {
					t.Errorf("the lock was not given back: %v", err)
				}
			}
		})
	}
	if _, err := agent.NewSections(context.Background(), agent.Config{Recipe: targets.RecipeConfig{Kind: "nope"}}, agent.Deps{}); err == nil {
		t.Error("an unknown recipe was accepted")
	}
}
