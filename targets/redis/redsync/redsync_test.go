package redsync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/splitbrain/splitbrain/targets"
)

func newLocker(t *testing.T, addrs []string, ttl time.Duration) targets.Locker {
	t.Helper()
	l, err := NewLocker(context.Background(), targets.RecipeConfig{Kind: Kind, Endpoints: addrs, TTL: targets.Duration(ttl)}, "c1", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func acquire(l targets.Locker, key string, d time.Duration) (targets.Lease, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return l.Acquire(ctx, key)
}

// masters starts n miniredis servers.
func masters(t *testing.T, n int) ([]*miniredis.Miniredis, []string) {
	var mrs []*miniredis.Miniredis
	var addrs []string
	for range n {
		mr := miniredis.RunT(t)
		mrs = append(mrs, mr)
		addrs = append(addrs, mr.Addr())
	}
	return mrs, addrs
}

func TestMutexOnOneRedis(t *testing.T) {
	mrs, addrs := masters(t, 1)
	a := newLocker(t, addrs, 2*time.Second)
	b := newLocker(t, addrs, 2*time.Second)
	ctx := context.Background()
	s, err := acquire(a, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if s.Token() != 0 {
		t.Fatalf("redsync gives no token, got %d", s.Token())
	}
	if _, err := acquire(b, "k", 150*time.Millisecond); !errors.Is(err, targets.ErrBusy) {
		t.Fatalf("acquire of a held lock: %v, want ErrBusy", err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := acquire(b, "k", time.Second)
	if err != nil {
		t.Fatalf("acquire after the release: %v", err)
	}
	// B's lease lapses and A takes the lock: B's release is refused and
	// leaves A's lock in place.
	mrs[0].FastForward(3 * time.Second)
	sa, err := acquire(a, "k", time.Second)
	if err != nil {
		t.Fatalf("acquire after the lapse: %v", err)
	}
	if err := sb.Release(ctx); !errors.Is(err, targets.ErrNotOwner) {
		t.Fatalf("release of a lapsed lease: %v, want ErrNotOwner", err)
	}
	if !mrs[0].Exists("lock:k") {
		t.Fatal("a lapsed holder's release deleted the new holder's lock")
	}
	if err := sa.Release(ctx); err != nil {
		t.Fatal(err)
	}
	mrs[0].Close()
	if _, err := acquire(a, "k", 300*time.Millisecond); !errors.Is(err, targets.ErrUnavailable) {
		t.Fatalf("acquire with Redis down: %v, want ErrUnavailable", err)
	}
}

// TestRedlock: a majority of masters grants; a lock on a majority is busy
// for others; fewer than a majority answering is unavailable.
func TestRedlock(t *testing.T) {
	mrs, addrs := masters(t, 5)
	a := newLocker(t, addrs, 5*time.Second)
	b := newLocker(t, addrs, 5*time.Second)
	ctx := context.Background()

	mrs[0].Close()
	mrs[1].Close()
	s, err := acquire(a, "k", 2*time.Second)
	if err != nil {
		t.Fatalf("acquire with 3 of 5 masters up: %v", err)
	}
	for i, mr := range mrs[2:] {
		if !mr.Exists("lock:k") {
			t.Fatalf("master %d holds no lock:k", i+2)
		}
	}
	if _, err := acquire(b, "k", 300*time.Millisecond); !errors.Is(err, targets.ErrBusy) {
		t.Fatalf("acquire of a lock held on a majority: %v, want ErrBusy", err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatalf("release on the 3 masters that hold it: %v", err)
	}
	mrs[2].Close()
	if _, err := acquire(b, "k", 500*time.Millisecond); !errors.Is(err, targets.ErrUnavailable) {
		t.Fatalf("acquire with 2 of 5 masters up: %v, want ErrUnavailable", err)
	}
}

func TestNewLockerRefuses(t *testing.T) {
	for _, cfg := range []targets.RecipeConfig{
		{Kind: Kind, TTL: targets.Duration(time.Second)},
		{Kind: Kind, Endpoints: []string{"127.0.0.1:1"}},
	} {
		if _, err := NewLocker(context.Background(), cfg, "c1", nil); err == nil {
			t.Errorf("NewLocker(%+v) succeeded", cfg)
		}
	}
}
