package zookeeper

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/splitbrain/splitbrain/targets"
)

// TestKeepAliveFailed: a lease's session failed its keep-alive when the
// members said it expired, when go-zookeeper replaced it, or while its
// connection is lost.
func TestKeepAliveFailed(t *testing.T) {
	// A connection that never reaches anyone (nothing listens on port 1):
	// its session id stays 0.
	c, _, err := zk.Connect([]string{"127.0.0.1:1"}, time.Second, zk.WithLogInfo(false), zk.WithLogger(zkLogger{slog.New(slog.DiscardHandler)}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ss := &session{conn: c}
	if ss.keepAliveFailed(0) {
		t.Fatal("a session with its connection failed its keep-alive")
	}
	if !ss.keepAliveFailed(42) {
		t.Fatal("a replaced session did not fail its keep-alive")
	}
	ss.downSince.Store(time.Now().UnixNano())
	if !ss.keepAliveFailed(0) {
		t.Fatal("a session without its connection did not fail its keep-alive")
	}
	ss.downSince.Store(0)
	ss.expired.Store(true)
	if !ss.keepAliveFailed(0) {
		t.Fatal("an expired session did not fail its keep-alive")
	}
}

// TestLockerWithoutService: an acquisition that cannot reach the ensemble
// fails unavailable by its deadline, not busy, and the Locker closes.
func TestLockerWithoutService(t *testing.T) {
	l, err := NewLocker(context.Background(), targets.RecipeConfig{Kind: Name, Endpoints: []string{"127.0.0.1:1"}, TTL: targets.Duration(time.Second)}, "c1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = l.Acquire(ctx, "k0")
	if !errors.Is(err, targets.ErrUnavailable) || errors.Is(err, targets.ErrBusy) {
		t.Fatalf("acquire: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("acquire took %v past its 300ms deadline", d)
	}
	// As agents make it: through the registered recipe's factory, which
	// checks the options against their declarations.
	r, err := targets.LookupRecipe(Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []targets.RecipeConfig{
		{Kind: Name, TTL: targets.Duration(time.Second)},
		{Kind: Name, Endpoints: []string{"a:1"}},
		{Kind: Name, Endpoints: []string{"a:1"}, TTL: targets.Duration(time.Second), Options: map[string]string{"endpoints": "some"}},
	} {
		if _, err := r.Factory()(context.Background(), bad, "c1", nil); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
}
