package server

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/targets/lockd/client"
)

// TestRunOverTCP runs three nodes with Run, configured by ParseFlags, on
// loopback TCP, takes a lock through the client, shuts the cluster down
// through its contexts and restarts it on the same data dirs.
func TestRunOverTCP(t *testing.T) {
	log := testLogger(t)
	ports := testenv.FreePorts(t, 6)
	var peers, urls []string
	for i := range 3 {
		peers = append(peers, fmt.Sprintf("n%d=127.0.0.1:%d", i+1, ports[i]))
		urls = append(urls, fmt.Sprintf("127.0.0.1:%d", ports[3+i]))
	}
	base := t.TempDir()
	type running struct {
		cancel context.CancelFunc
		done   chan error
	}
	startAll := func() []running {
		var rs []running
		for i := range 3 {
			id := fmt.Sprintf("n%d", i+1)
			cfg, err := ParseFlags([]string{
				"--id", id,
				"--http-addr", urls[i],
				"--peers", strings.Join(peers, ","),
				"--data-dir", filepath.Join(base, id),
				"--heartbeat-timeout", "100ms", "--election-timeout", "100ms",
				"--leader-lease-timeout", "50ms", "--commit-timeout", "5ms",
				"--max-ttl", "5s", "--default-ttl", "2s", "--lease-margin", "100ms",
			})
			if err != nil {
				t.Fatalf("flags: %v", err)
			}
			cfg.NoSync = true
			ctx, cancel := context.WithCancel(context.Background())
			r := running{cancel: cancel, done: make(chan error, 1)}
			go func() { r.done <- Run(ctx, cfg, log) }()
			rs = append(rs, r)
		}
		return rs
	}
	stopAll := func(rs []running) {
		for _, r := range rs {
			r.cancel()
		}
		for i, r := range rs {
			select {
			case err := <-r.done:
				if err != nil {
					t.Errorf("Run of n%d: %v", i+1, err)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("Run of n%d did not return after cancel", i+1)
			}
		}
	}

	cl, err := client.New(urls, client.WithRequestTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lock := func() *client.Lease {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		l, err := cl.Lock(ctx, "k", "a", 0)
		if err != nil {
			t.Fatalf("lock: %v", err)
		}
		if l.TTL() != 2*time.Second {
			t.Fatalf("default TTL %v, want 2s", l.TTL())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		return l
	}

	rs := startAll()
	first := lock()
	stopAll(rs)

	rs = startAll() // existing state: no bootstrap
	second := lock()
	stopAll(rs)
	if second.Token() <= first.Token() {
		t.Fatalf("token after restart %d <= %d", second.Token(), first.Token())
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	err := Run(context.Background(), DefaultConfig(), nil)
	if err == nil || !strings.Contains(err.Error(), "--id is required") {
		t.Fatalf("Run with no id: %v", err)
	}
}
