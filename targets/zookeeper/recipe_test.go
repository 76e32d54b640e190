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

// TestSessionLost: a lease's session counts as lost when the members said
// it expired, when go-zookeeper replaced it, or when it went without a
// connection for longer than its timeout (the members expire it then).
func TestSessionLost(t *testing.T) {
	// A connection that never reaches anyone (nothing listens on port 1):
	// its session id stays 0.
	c, _, err := zk.Connect([]string{"127.0.0.1:1"}, time.Second, zk.WithLogInfo(false), zk.WithLogger(zkLogger{slog.New(slog.DiscardHandler)}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ss := &session{conn: c}
	ttl := 2 * time.Second
	if ss.lost(0, ttl) {
		t.Fatal("a session with a connection is lost")
	}
	if !ss.lost(42, ttl) {
		t.Fatal("a replaced session is not lost")
	}
	ss.downSince.Store(time.Now().Add(-time.Second).UnixNano())
	if ss.lost(0, ttl) {
		t.Fatal("a session down for less than its timeout is lost")
	}
	ss.downSince.Store(time.Now().Add(-3 * time.Second).UnixNano())
	if !ss.lost(0, ttl) {
		t.Fatal("a session down for longer than its timeout is not lost")
	}
	ss.downSince.Store(0)
	ss.expired.Store(true)
	if !ss.lost(0, ttl) {
		t.Fatal("an expired session is not lost")
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
	for _, bad := range []targets.RecipeConfig{
		{Kind: Name, TTL: targets.Duration(time.Second)},
		{Kind: Name, Endpoints: []string{"a:1"}},
		{Kind: Name, Endpoints: []string{"a:1"}, TTL: targets.Duration(time.Second), Options: map[string]string{"endpoints": "some"}},
	} {
		if _, err := NewLocker(context.Background(), bad, "c1", nil); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
}
