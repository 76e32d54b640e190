//go:build linux

package sentinel_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/redis/sentinel"
)

// TestFailover brings the primary, its replicas and the Sentinels up and
// checks what the harness relies on: the primary is found, a grant with
// WAIT is given when the replicas have it and refused when they cannot
// (wait=2 with a replica down), and when the primary is killed the
// Sentinels promote a replica, the recipe follows it, and the old primary
// comes back as a replica of the new one.
func TestFailover(t *testing.T) {
	rt, imgs := testenv.Runtime(t, "s", sentinel.Role)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	cl, err := sentinel.Target{}.Start(ctx, rt, targets.Options{Images: imgs, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("primary, replicas and sentinels serving in %v", time.Since(start).Round(time.Millisecond))
	c := cl.(*sentinel.Cluster)
	if v := c.Versions(ctx); !strings.HasPrefix(v["redis"], "7.") || v["redis_sentinel_debian"] == "" {
		t.Fatalf("versions %v", v)
	}
	var first runtime.Node
	err = runtime.Poll(ctx, "no primary found", 60*time.Second, 200*time.Millisecond, func(ctx context.Context) (err error) {
		first, err = c.Leader(ctx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if first != c.Nodes()[0] {
		t.Fatalf("primary %s, want n1", first.Name())
	}

	locker := func(opts map[string]string) targets.Locker {
		t.Helper()
		cfg := targets.RecipeConfig{Kind: sentinel.Name, Backend: sentinel.Name, Endpoints: c.Endpoints(), TTL: targets.Duration(2 * time.Second), Options: opts}
		l, err := sentinel.NewLocker(ctx, cfg, t.Name(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	acquire := func(l targets.Locker, key string, d time.Duration) (targets.Lease, error) {
		actx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return l.Acquire(actx, key)
	}
	waited := locker(map[string]string{"wait": "2"})
	lease, err := acquire(waited, "k1", 5*time.Second)
	if err != nil {
		t.Fatalf("grant with both replicas up: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// One replica cut off from the primary (its packets dropped inside
	// it; neither frozen, which would put its Sentinel in TILT mode for
	// 30 s, nor its PID 1 stopped from inside, which the kernel ignores):
	// wait=2 cannot be met, wait=1 can.
	replica := c.Nodes()[2]
	drop := []string{"INPUT", "-s", first.Addr().String(), "-j", "DROP"}
	if _, err := runtime.Run(ctx, replica, append([]string{"iptables", "-I"}, drop...)...); err != nil {
		t.Fatal(err)
	}
	if _, err := acquire(waited, "k1", 1500*time.Millisecond); !errors.Is(err, targets.ErrUnavailable) {
		t.Fatalf("wait=2 with a replica cut off: %v, want unavailable", err)
	}
	if l, err := acquire(locker(map[string]string{"wait": "1"}), "k1", 5*time.Second); err != nil {
		t.Fatalf("wait=1 with a replica cut off: %v (was the refused grant taken back?)", err)
	} else {
		_ = l.Release(ctx)
	}
	if _, err := runtime.Run(ctx, replica, append([]string{"iptables", "-D"}, drop...)...); err != nil {
		t.Fatal(err)
	}

	// The primary killed: a replica is promoted and the recipe finds it.
	plain := locker(nil)
	before, err := acquire(plain, "k2", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := before.Release(ctx); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := first.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var next runtime.Node
	err = runtime.Poll(ctx, "no replica promoted", 90*time.Second, 200*time.Millisecond, func(ctx context.Context) error {
		n, err := c.Leader(ctx)
		if err == nil && n == first {
			err = errors.New("still the old primary")
		}
		next = n
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s promoted %v after the kill", next.Name(), time.Since(killed).Round(time.Millisecond))
	after, err := acquire(plain, "k2", 10*time.Second)
	if err != nil {
		t.Fatalf("grant after the failover: %v", err)
	}
	// The token counter was replicated before the kill: the new primary
	// counts on from it.
	if after.Token() <= before.Token() {
		t.Fatalf("token %d after the failover, %d before", after.Token(), before.Token())
	}
	_ = after.Release(ctx)

	// Restarted, the old primary is turned into a replica of the new one.
	if err := first.(runtime.Restarter).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Leader(ctx); err != nil || n != next {
		t.Fatalf("primary after the old one came back: %v, %v; want %s", n, err, next.Name())
	}
}
