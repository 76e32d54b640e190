package workloads

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/inmem"
	"github.com/splitbrain/splitbrain/targets/store"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

// TestCertainHold: a hold is recorded shrunk by its client's clock mapping
// uncertainty, so that two holds on one key overlap in the record only if
// they certainly overlapped.
func TestCertainHold(t *testing.T) {
	ms := int64(time.Millisecond)
	type hold struct{ acq, rel int64 }
	overlap := func(a, b hold) bool { return a.acq < b.rel && b.acq < a.rel }
	tests := []struct {
		name    string
		a, b    hold // as mapped from each client's clock
		skew    time.Duration
		overlap bool
	}{
		// B's grant mapped 0.5 ms before A's release: within 2 × 1 ms of
		// mapping error, not certainly a second holder.
		{"within the uncertainty", hold{10 * ms, 110 * ms}, hold{109*ms + ms/2, 200 * ms}, time.Millisecond, false},
		// 20 ms of overlap is more than any mapping error: kept.
		{"beyond the uncertainty", hold{10 * ms, 110 * ms}, hold{90 * ms, 200 * ms}, time.Millisecond, true},
		// A perfect mapping keeps every overlap, however short.
		{"no uncertainty", hold{10 * ms, 110 * ms}, hold{110*ms - 1, 200 * ms}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a, b hold
			a.acq, a.rel = certainHold(tt.a.acq, tt.a.rel, tt.skew)
			b.acq, b.rel = certainHold(tt.b.acq, tt.b.rel, tt.skew)
			if got := overlap(a, b); got != tt.overlap {
				t.Fatalf("overlap %v after shrinking (%v, %v), want %v", got, a, b, tt.overlap)
			}
			if a.acq > a.rel || b.acq > b.rel {
				t.Fatalf("a hold ends before it starts: %v %v", a, b)
			}
		})
	}
	// A hold shorter than twice the uncertainty becomes an instant; unknown
	// times stay unknown.
	if acq, rel := certainHold(10*ms, 11*ms, time.Millisecond); acq != 11*ms || rel != 11*ms {
		t.Fatalf("short hold: %d, %d", acq, rel)
	}
	if acq, rel := certainHold(0, 0, time.Millisecond); acq != 0 || rel != 0 {
		t.Fatalf("unknown hold: %d, %d", acq, rel)
	}
	if acq, rel := certainHold(10*ms, 0, time.Millisecond); acq != 11*ms || rel != 0 {
		t.Fatalf("unreleased hold: %d, %d", acq, rel)
	}
}

// TestCounterFollowsHolders: a live counter names a client from its read
// to its write, which is what a fault aimed at lock holders needs; a quiet
// one names nobody, and records the same outcome and times; a bypass
// writer, which holds no lock, is never named.
func TestCounterFollowsHolders(t *testing.T) {
	const work = 300 * time.Millisecond
	for _, tc := range []struct{ quiet, bypass bool }{{false, false}, {true, false}, {false, true}} {
		quiet := tc.quiet
		t.Run(fmt.Sprintf("quiet=%v,bypass=%v", quiet, tc.bypass), func(t *testing.T) {
			c := pair(t, transportSocket, inmem.NewService(inmem.Options{}), nil, store.NewMem(nil))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			recipe := targets.RecipeConfig{Kind: inmem.Kind, TTL: targets.Duration(time.Minute)}
			if err := c.Configure(ctx, agent.Config{Client: "c1", Recipe: recipe, Work: targets.Duration(work), AcquireTimeout: targets.Duration(time.Second), ReleaseTimeout: targets.Duration(time.Second)}); err != nil {
				t.Fatal(err)
			}
			opts := CounterOptions{Keys: 1, Work: work, Quiet: quiet}
			if tc.bypass {
				opts.Bypass = []string{"c1"}
			}
			w, err := New(UnfencedCounter, opts)
			if err != nil {
				t.Fatal(err)
			}
			hw, err := history.Create(filepath.Join(t.TempDir(), "history.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			defer hw.Close()
			rec := history.NewRecorder(hw, history.NewMonotonicClock())
			type outcome struct {
				done history.Event
				err  error
			}
			out := make(chan outcome, 1)
			go func() {
				done, err := w.op(ctx, c, 1, history.FCriticalSection, "k0", false, 5*time.Second, rec)
				out <- outcome{done, err}
			}()
			named := false
			holds := map[int64]bool{} // the holds Unwritten named
			var o outcome
		poll:
			for {
				select {
				case o = <-out:
					break poll
				case <-time.After(5 * time.Millisecond):
					named = named || slices.Contains(w.InCriticalSection(), "c1")
					if h, ok := w.Unwritten("c1"); ok {
						holds[h] = true
					}
				}
			}
			if o.err != nil || o.done.Type != history.OK {
				t.Fatalf("critical section: %+v, %v", o.done, o.err)
			}
			live := !quiet && !tc.bypass
			if named != live {
				t.Fatalf("holder named while it held: %v, want %v", named, live)
			}
			if want := map[int64]bool{o.done.ID: true}; live && !maps.Equal(holds, want) || !live && len(holds) > 0 {
				t.Fatalf("Unwritten named holds %v, want the operation's (%d) only when live", holds, o.done.ID)
			}
			if _, ok := w.Unwritten("c1"); ok {
				t.Fatal("Unwritten still names the hold after its write")
			}
			if tc.bypass {
				return // no lock, no hold to record
			}
			// (The hold is recorded shrunk by the clock mapping's uncertainty.)
			if o.done.Acquired == 0 || o.done.WriteAt == 0 || o.done.Released < o.done.Acquired || o.done.Hold < int64(work) {
				t.Fatalf("hold not recorded: acquired %d, write %d, released %d", o.done.Acquired, o.done.WriteAt, o.done.Released)
			}
		})
	}
}
