package setnx_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/redis"
	"github.com/splitbrain/splitbrain/targets/redis/node"
	"github.com/splitbrain/splitbrain/targets/redis/setnx"
)

// startRedis runs our Redis image with testcontainers (no reaper: nothing
// can be pulled here) and returns its host:port.
func startRedis(t *testing.T) (string, testcontainers.Container) {
	t.Helper()
	cli := testenv.Docker(t)
	img := testenv.Images(t, cli, redis.Role)[redis.Role]
	// No reaper (its image cannot be pulled), and the mapped port on
	// loopback: left alone, testcontainers may pick a gateway address, and
	// test traffic must stay on loopback and the project's own containers.
	t.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	t.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	ctx := context.Background()
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:        img,
			Cmd:          serverArgs(t),
			ExposedPorts: []string{"6379/tcp"},
			Labels:       map[string]string{"splitbrain.test": t.Name()},
			WaitingFor:   wait.ForLog("Ready to accept connections").WithStartupTimeout(30 * time.Second),
		},
		Started: true,
	})
	if err != nil {
		t.Fatalf("start redis: %v", err)
	}
	t.Cleanup(func() { _ = c.Terminate(context.Background()) })
	host, err := c.Host(ctx)
	if err != nil {
		t.Fatal(err)
	}
	port, err := c.MappedPort(ctx, "6379/tcp")
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Fatalf("testcontainers maps redis to %s, not loopback", host)
	}
	// Prefer the container's own address on its network, where this host
	// reaches it directly: the engine's userland port proxy stalls
	// connections now and then while other tests churn containers.
	if ip, err := c.ContainerIP(ctx); err == nil && ip != "" {
		direct := net.JoinHostPort(ip, "6379")
		if conn, err := net.DialTimeout("tcp", direct, time.Second); err == nil {
			conn.Close()
			return direct, c
		}
	}
	return net.JoinHostPort(host, port.Port()), c
}

func locker(t *testing.T, addr, client string, ttl time.Duration, opts map[string]string) targets.Locker {
	t.Helper()
	l, err := setnx.NewLocker(context.Background(), targets.RecipeConfig{Kind: "redis", Endpoints: []string{addr}, TTL: targets.Duration(ttl), Options: opts}, client, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestRecipe(t *testing.T) {
	addr, c := startRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("grant, busy, release, token order", func(t *testing.T) {
		a, b := locker(t, addr, "a", 5*time.Second, nil), locker(t, addr, "b", 5*time.Second, nil)
		la, err := a.Acquire(ctx, "k1")
		if err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, time.Second)
		_, err = b.Acquire(short, "k1")
		cancel()
		if !errors.Is(err, targets.ErrBusy) {
			t.Fatalf("second acquire: %v, want busy", err)
		}
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lb, err := b.Acquire(ctx, "k1")
		if err != nil {
			t.Fatal(err)
		}
		if lb.Token() <= la.Token() {
			t.Fatalf("tokens %d then %d: not increasing", la.Token(), lb.Token())
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("expired lease cannot release the new holder's lock", func(t *testing.T) {
		a, b := locker(t, addr, "a", 200*time.Millisecond, nil), locker(t, addr, "b", 5*time.Second, nil)
		la, err := a.Acquire(ctx, "k2")
		if err != nil {
			t.Fatal(err)
		}
		lb, err := b.Acquire(ctx, "k2") // waits out a's lease
		if err != nil {
			t.Fatal(err)
		}
		if err := la.Release(ctx); !errors.Is(err, targets.ErrNotOwner) {
			t.Fatalf("stale release: %v, want not-owner", err)
		}
		if err := lb.Release(ctx); err != nil {
			t.Fatalf("owner release after a stale one: %v", err)
		}
	})

	t.Run("unchecked release deletes someone else's lock", func(t *testing.T) {
		a := locker(t, addr, "a", 200*time.Millisecond, map[string]string{"release": "unchecked"})
		b := locker(t, addr, "b", 5*time.Second, nil)
		la, err := a.Acquire(ctx, "k3")
		if err != nil {
			t.Fatal(err)
		}
		lb, err := b.Acquire(ctx, "k3")
		if err != nil {
			t.Fatal(err)
		}
		if err := la.Release(ctx); err != nil { // the anti-pattern: no error, b's lock gone
			t.Fatal(err)
		}
		lc, err := locker(t, addr, "c", time.Second, nil).Acquire(ctx, "k3")
		if err != nil {
			t.Fatalf("a third client could not get the lock b still believes it holds: %v", err)
		}
		_ = lb.Release(ctx)
		_ = lc.Release(ctx)
	})

	t.Run("no expiry deadlocks after a lost holder", func(t *testing.T) {
		a := locker(t, addr, "a", time.Second, map[string]string{"expiry": "none"})
		if _, err := a.Acquire(ctx, "k4"); err != nil { // never released: the holder "crashed"
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		if _, err := locker(t, addr, "b", time.Second, nil).Acquire(short, "k4"); !errors.Is(err, targets.ErrBusy) {
			t.Fatalf("acquire after a lost holder without expiry: %v, want busy forever", err)
		}
	})

	t.Run("client-judged expiry lets a client with a fast clock steal a live lock", func(t *testing.T) {
		opts := map[string]string{"expiry": "client"}
		a, b := locker(t, addr, "a", 2*time.Second, opts), locker(t, addr, "b", 2*time.Second, opts)
		ahead := locker(t, addr, "ahead", 2*time.Second, opts).(*setnx.Locker)
		setnx.SetClock(ahead, func() time.Time { return time.Now().Add(3 * time.Second) }) // its wall clock runs 3s fast
		la, err := a.Acquire(ctx, "k6")
		if err != nil {
			t.Fatal(err)
		}
		// A client with a true clock must not get the live lock; it is
		// busy (a transport hiccup of this loaded machine, unavailable,
		// is tried again, but a grant never is).
		for attempt := 0; ; attempt++ {
			short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			lb, err := b.Acquire(short, "k6")
			cancel()
			if err == nil {
				t.Fatalf("a client with a true clock took a live lock (token %d)", lb.Token())
			}
			if errors.Is(err, targets.ErrBusy) {
				break
			}
			if attempt == 2 {
				t.Fatalf("acquire of a live lock: %v, want busy", err)
			}
		}
		short, cancel := context.WithTimeout(ctx, time.Second)
		lt, err := ahead.Acquire(short, "k6") // a's lease has over 1s left by a's clock
		cancel()
		if err != nil {
			t.Fatalf("the client ahead did not steal the lock: %v", err)
		}
		if lt.Token() <= la.Token() {
			t.Fatalf("tokens %d then %d: the steal did not take a greater token", la.Token(), lt.Token())
		}
		if err := la.Release(ctx); !errors.Is(err, targets.ErrNotOwner) {
			t.Fatalf("release by the robbed holder: %v, want not-owner", err)
		}
		if err := lt.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lb, err := b.Acquire(ctx, "k6") // free again: granted at once
		if err != nil {
			t.Fatal(err)
		}
		_ = lb.Release(ctx)
	})

	t.Run("unreachable is not busy", func(t *testing.T) {
		if err := c.Stop(ctx, nil); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := locker(t, addr, "a", time.Second, nil).Acquire(short, "k5")
		if !errors.Is(err, targets.ErrUnavailable) || errors.Is(err, targets.ErrBusy) {
			t.Fatalf("acquire with redis down: %v, want unavailable", err)
		}
	})
}

func TestRecipeOptions(t *testing.T) {
	for _, tt := range []struct {
		opts map[string]string
		ttl  time.Duration
		ok   bool
	}{
		{nil, time.Second, true},
		{map[string]string{"expiry": "none"}, 0, true},
		{map[string]string{"expiry": "sometimes"}, time.Second, false},
		{map[string]string{"expiry": "client"}, time.Second, true},
		{map[string]string{"expiry": "client"}, 0, false},
		{nil, 0, false},
	} {
		// Through the registered factory, which checks the options
		// against the recipe's declarations before NewLocker reads them.
		newLocker := targets.Recipe{Kind: "redis", Backends: []string{"redis"}, Options: setnx.Options(), New: setnx.NewLocker}.Factory()
		_, err := newLocker(context.Background(), targets.RecipeConfig{Endpoints: []string{"127.0.0.1:1"}, TTL: targets.Duration(tt.ttl), Options: tt.opts}, "c", nil)
		if (err == nil) != tt.ok {
			t.Errorf("options %v ttl %v: err %v", tt.opts, tt.ttl, err)
		}
	}
}

func serverArgs(t *testing.T) []string {
	t.Helper()
	c, err := node.ServerArgs("")
	if err != nil {
		t.Fatal(err)
	}
	return c
}
