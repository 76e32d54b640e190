package redislock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/splitbrain/splitbrain/targets"
)

func newLocker(t *testing.T, addr string, ttl time.Duration) targets.Locker {
	t.Helper()
	l, err := NewLocker(context.Background(), targets.RecipeConfig{Kind: Kind, Endpoints: []string{addr}, TTL: targets.Duration(ttl)}, "c1", nil)
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

func TestLocker(t *testing.T) {
	mr := miniredis.RunT(t)
	a := newLocker(t, mr.Addr(), 2*time.Second)
	b := newLocker(t, mr.Addr(), 2*time.Second)
	ctx := context.Background()

	s, err := acquire(a, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if s.Token() != 0 {
		t.Fatalf("redislock gives no token, got %d", s.Token())
	}
	if !mr.Exists("lock:k") {
		t.Fatal("no lock:k key in Redis")
	}
	if _, err := acquire(b, "k", 100*time.Millisecond); !errors.Is(err, targets.ErrBusy) {
		t.Fatalf("acquire of a held lock: %v, want ErrBusy", err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := acquire(b, "k", time.Second)
	if err != nil {
		t.Fatalf("acquire after the release: %v", err)
	}

	// A's lease lapsed and B holds the key: A's release must not delete
	// B's lock (owner-checked release).
	mr.FastForward(3 * time.Second)
	sa, err := acquire(a, "k", time.Second)
	if err != nil {
		t.Fatalf("acquire after the lapse: %v", err)
	}
	if err := sb.Release(ctx); !errors.Is(err, targets.ErrNotOwner) {
		t.Fatalf("release of a lapsed lease: %v, want ErrNotOwner", err)
	}
	if !mr.Exists("lock:k") {
		t.Fatal("a lapsed holder's release deleted the new holder's lock")
	}
	if err := sa.Release(ctx); err != nil {
		t.Fatal(err)
	}

	mr.Close()
	if _, err := acquire(a, "k", 200*time.Millisecond); !errors.Is(err, targets.ErrUnavailable) {
		t.Fatalf("acquire with Redis down: %v, want ErrUnavailable", err)
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

func TestRegistered(t *testing.T) {
	r, err := targets.LookupRecipe(Kind)
	if err != nil {
		t.Fatal(err)
	}
	if r.Fencing || !r.CheckedRelease || r.Library != Library {
		t.Fatalf("declaration: %+v", r)
	}
}
