package inmem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/memrt"
	"github.com/splitbrain/splitbrain/targets"
)

const ttl = time.Second

// world is a service on a fake clock with two clients, a and b.
type world struct {
	clock *FakeClock
	s     *Service
	a, b  *Locker
}

func newWorld(svc, a Faults) *world {
	c := NewFakeClock(time.Unix(1000, 0))
	s := NewService(Options{Clock: c, Faults: svc})
	return &world{clock: c, s: s, a: s.Locker("a", ttl, a), b: s.Locker("b", ttl, Faults{})}
}

// acquire takes key or fails the test.
func acquire(t *testing.T, l *Locker, key string) targets.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("acquire %s: %v", key, err)
	}
	return lease
}

// acquireErr tries key for a short while and returns the error.
func acquireErr(l *Locker, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	lease, err := l.Acquire(ctx, key)
	if err == nil {
		_ = lease.Release(context.Background())
	}
	return err
}

func TestLease(t *testing.T) {
	bg := context.Background()
	tests := []struct {
		name     string
		svc, a   Faults
		scenario func(t *testing.T, w *world)
	}{
		{"grant, busy, release, grant", Faults{}, Faults{}, func(t *testing.T, w *world) {
			l1 := acquire(t, w.a, "k")
			if err := acquireErr(w.b, "k"); !errors.Is(err, targets.ErrBusy) {
				t.Fatalf("second holder: %v, want busy", err)
			}
			if err := l1.Release(bg); err != nil {
				t.Fatal(err)
			}
			if l2 := acquire(t, w.b, "k"); l2.Token() != l1.Token()+1 {
				t.Fatalf("tokens %d then %d", l1.Token(), l2.Token())
			}
		}},
		{"keys are independent", Faults{}, Faults{}, func(t *testing.T, w *world) {
			if acquire(t, w.a, "k").Token() != 1 || acquire(t, w.b, "j").Token() != 1 {
				t.Fatal("each key's tokens start at 1")
			}
		}},
		{"an expired lease is taken over and its release refused", Faults{}, Faults{}, func(t *testing.T, w *world) {
			l1 := acquire(t, w.a, "k")
			w.clock.Advance(ttl - time.Millisecond)
			if err := acquireErr(w.b, "k"); !errors.Is(err, targets.ErrBusy) {
				t.Fatalf("before expiry: %v", err)
			}
			w.clock.Advance(time.Millisecond)
			l2 := acquire(t, w.b, "k")
			if l2.Token() <= l1.Token() {
				t.Fatalf("takeover token %d after %d", l2.Token(), l1.Token())
			}
			if err := l1.Release(bg); !errors.Is(err, targets.ErrNotOwner) {
				t.Fatalf("stale release: %v", err)
			}
			if c, _, ok := w.s.Holder("k"); !ok || c != "b" {
				t.Fatalf("holder %q %v", c, ok)
			}
			if st := w.s.Stats(); st.Takeovers != 1 || st.NotOwner != 1 {
				t.Fatalf("stats %+v", st)
			}
		}},
		{"an expired lease nobody took is not the owner's any more", Faults{}, Faults{}, func(t *testing.T, w *world) {
			l1 := acquire(t, w.a, "k")
			w.clock.Advance(2 * ttl)
			if err := l1.Release(bg); !errors.Is(err, targets.ErrNotOwner) {
				t.Fatalf("release after expiry: %v", err)
			}
		}},
		{"no expiry", Faults{}, Faults{NoExpiry: true}, func(t *testing.T, w *world) {
			acquire(t, w.a, "k")
			w.clock.Advance(time.Hour)
			if err := acquireErr(w.b, "k"); !errors.Is(err, targets.ErrBusy) {
				t.Fatalf("a lease without expiry was lost: %v", err)
			}
		}},
		{"backward tokens", Faults{BackwardTokens: true}, Faults{}, func(t *testing.T, w *world) {
			l1 := acquire(t, w.a, "k")
			_ = l1.Release(bg)
			l2 := acquire(t, w.b, "k")
			if l1.Token() != 1<<20 || l2.Token() != 1<<20-1 {
				t.Fatalf("tokens %d then %d", l1.Token(), l2.Token())
			}
		}},
		{"backward tokens after forward ones", Faults{}, Faults{BackwardTokens: true}, func(t *testing.T, w *world) {
			l1 := acquire(t, w.b, "k")
			_ = l1.Release(bg)
			l2 := acquire(t, w.b, "k")
			_ = l2.Release(bg)
			if l3 := acquire(t, w.a, "k"); l3.Token() != 1 {
				t.Fatalf("tokens %d, %d, then %d", l1.Token(), l2.Token(), l3.Token())
			}
		}},
		{"unchecked release deletes the new holder's lock", Faults{}, Faults{UncheckedRelease: true}, func(t *testing.T, w *world) {
			l1 := acquire(t, w.a, "k")
			w.clock.Advance(ttl)
			acquire(t, w.b, "k")
			if err := l1.Release(bg); err != nil {
				t.Fatal(err)
			}
			if _, _, ok := w.s.Holder("k"); ok {
				t.Fatal("b's lock survived an unchecked release")
			}
		}},
		{"unavailable", Faults{Unavailable: true}, Faults{}, func(t *testing.T, w *world) {
			if err := acquireErr(w.a, "k"); !errors.Is(err, targets.ErrUnavailable) {
				t.Fatalf("acquire: %v", err)
			}
		}},
		{"unavailable for one client only", Faults{}, Faults{Unavailable: true}, func(t *testing.T, w *world) {
			if err := acquireErr(w.a, "k"); !errors.Is(err, targets.ErrUnavailable) {
				t.Fatalf("a: %v", err)
			}
			acquire(t, w.b, "k")
		}},
		{"a release when the service went away", Faults{}, Faults{}, func(t *testing.T, w *world) {
			l1 := acquire(t, w.a, "k")
			w.s.Stop()
			if err := l1.Release(bg); !errors.Is(err, targets.ErrUnavailable) {
				t.Fatalf("release: %v", err)
			}
			if err := acquireErr(w.b, "j"); !errors.Is(err, targets.ErrUnavailable) {
				t.Fatalf("acquire: %v", err)
			}
			w.s.Start()
			if err := l1.Release(bg); err != nil {
				t.Fatalf("release after restart: %v", err)
			}
		}},
		{"faults switched on later", Faults{}, Faults{}, func(t *testing.T, w *world) {
			acquire(t, w.a, "k")
			w.s.SetFaults(Faults{UncheckedRelease: true, NoExpiry: true})
			w.clock.Advance(time.Hour)
			if err := acquireErr(w.b, "k"); err != nil {
				t.Fatalf("a lease granted with a TTL still expires: %v", err)
			}
		}},
		{"a closed locker", Faults{}, Faults{}, func(t *testing.T, w *world) {
			_ = w.a.Close()
			if err := acquireErr(w.a, "k"); !errors.Is(err, targets.ErrUnavailable) {
				t.Fatalf("acquire: %v", err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.scenario(t, newWorld(tt.svc, tt.a)) })
	}
}

// TestReleaseWakesWaiter: a waiting Acquire gets the lock at its release,
// long before its deadline.
func TestReleaseWakesWaiter(t *testing.T) {
	s := NewService(Options{Poll: time.Hour})
	l1 := acquire(t, s.Locker("a", time.Hour, Faults{}), "k")
	got := make(chan error, 1)
	go func() {
		_, err := s.Locker("b", time.Hour, Faults{}).Acquire(context.Background(), "k")
		got <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := l1.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken")
	}
}

// TestMutualExclusion: clients on the real clock never overlap while
// their leases last, and every grant's token is greater than the last.
func TestMutualExclusion(t *testing.T) {
	s := NewService(Options{})
	var (
		mu      sync.Mutex
		holding bool
		last    uint64
	)
	var wg sync.WaitGroup
	for i := range 8 {
		l := s.Locker(string(rune('a'+i)), time.Minute, Faults{})
		wg.Go(func() {
			for range 50 {
				lease := acquire(t, l, "k")
				mu.Lock()
				if holding || lease.Token() <= last {
					t.Errorf("overlap or token %d after %d", lease.Token(), last)
				}
				holding, last = true, lease.Token()
				mu.Unlock()
				mu.Lock()
				holding = false
				mu.Unlock()
				if err := lease.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if st := s.Stats(); st.Grants != 400 || st.Releases != 400 {
		t.Fatalf("stats %+v", st)
	}
}

// TestGate: while the gate holds requests, an Acquire with a deadline finds
// the service unavailable; once open, it is granted.
func TestGate(t *testing.T) {
	s := NewService(Options{})
	open := make(chan struct{})
	s.SetGate(func(ctx context.Context) error {
		select {
		case <-open:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	l := s.Locker("a", ttl, Faults{})
	if err := acquireErr(l, "k"); !errors.Is(err, targets.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("frozen service: %v", err)
	}
	close(open)
	acquire(t, l, "k")
}

func TestParseOptions(t *testing.T) {
	tests := []struct {
		opts map[string]string
		want Faults
		err  bool
	}{
		{nil, Faults{}, false},
		{map[string]string{"expiry": "ttl", "release": "checked", "tokens": "forward", "available": "yes"}, Faults{}, false},
		{map[string]string{"expiry": "none", "release": "unchecked", "tokens": "backward", "available": "no"}, Faults{true, true, true, true}, false},
		{map[string]string{"expiry": "client"}, Faults{}, true},
		{map[string]string{"lock-delay": "2s"}, Faults{}, true},
	}
	for _, tt := range tests {
		got, err := ParseOptions(tt.opts)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("%v: %+v, %v", tt.opts, got, err)
		}
	}
	f := NewService(Options{}).Factory()
	if _, err := f(context.Background(), targets.RecipeConfig{Kind: Kind}, "c1", nil); err == nil {
		t.Error("a recipe without a TTL was accepted")
	}
	if _, err := f(context.Background(), targets.RecipeConfig{Kind: Kind, Options: map[string]string{"expiry": "none"}}, "c1", nil); err != nil {
		t.Errorf("expiry=none: %v", err)
	}
}

// TestTargetOnMemrt runs the target on the in-memory runtime: a stopped
// node freezes the service, a killed one makes it unavailable until it
// restarts.
func TestTargetOnMemrt(t *testing.T) {
	s := NewService(Options{})
	rt := memrt.New(map[string]memrt.Program{Role: s.Program()}, nil)
	ctx := context.Background()
	t.Cleanup(func() { _ = rt.Close(ctx) })
	c, err := Target{}.Start(ctx, rt, targets.Options{TTL: ttl, ExtraCaps: []string{runtime.CapSysPtrace}})
	if err != nil {
		t.Fatal(err)
	}
	if eps := c.Endpoints(); len(c.Nodes()) != 1 || len(eps) != 1 || eps[0] != c.Nodes()[0].Addr().String() {
		t.Fatalf("endpoints %v, nodes %v", eps, c.Nodes())
	}
	if caps := c.Nodes()[0].(*memrt.Node).Spec().Caps; len(caps) != 2 {
		t.Fatalf("caps %v", caps)
	}
	l, err := s.Factory()(ctx, targets.RecipeConfig{Kind: Kind, Endpoints: c.Endpoints(), TTL: targets.Duration(ttl)}, "c1", nil)
	if err != nil {
		t.Fatal(err)
	}
	n := c.Nodes()[0]
	steps := []struct {
		sig  syscall.Signal
		want error
	}{
		{0, nil},
		{syscall.SIGSTOP, targets.ErrUnavailable},
		{syscall.SIGCONT, nil},
		{syscall.SIGKILL, targets.ErrUnavailable},
	}
	for _, st := range steps {
		if st.sig != 0 {
			if err := n.Signal(ctx, st.sig); err != nil {
				t.Fatal(err)
			}
		}
		if err := eventually(l.(*Locker), st.want); err != nil {
			t.Fatalf("after %v: %v", st.sig, err)
		}
	}
	if err := n.(runtime.Restarter).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := eventually(l.(*Locker), nil); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}

// eventually tries to take a lock until the outcome is want (nil: granted)
// or 5s have passed: a signal takes effect when the node's program has
// seen it.
func eventually(l *Locker, want error) error {
	var err error
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		if err = acquireErr(l, "k"); errors.Is(err, want) {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("got %v, want %v", err, want)
}
