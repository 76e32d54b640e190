package lockd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/lockd/client"
	"github.com/splitbrain/splitbrain/targets/lockd/server"
)

func TestServerOptions(t *testing.T) {
	tests := []struct {
		name    string
		target  Target
		ttl     time.Duration
		opts    map[string]string
		want    ServerOptions
		wantErr string
	}{
		{"defaults follow the TTL", Target{}, 2 * time.Second, nil, ServerOptions{MaxTTL: 2 * time.Second}, ""},
		{"no TTL", Target{}, 0, nil, ServerOptions{MaxTTL: 10 * time.Second}, ""},
		{"TTL rounded up to the ms", Target{}, 1500*time.Millisecond + 1, nil, ServerOptions{MaxTTL: 1501 * time.Millisecond}, ""},
		{"target fields", Target{LockDelay: time.Second, MaxTTL: 5 * time.Second}, 2 * time.Second, nil,
			ServerOptions{MaxTTL: 5 * time.Second, LockDelay: time.Second}, ""},
		{"recipe options win", Target{LockDelay: time.Second}, 2 * time.Second,
			map[string]string{"lock-delay": "250ms", "max-ttl": "3s", "endpoints": "pinned"},
			ServerOptions{MaxTTL: 3 * time.Second, LockDelay: 250 * time.Millisecond}, ""},
		{"lock-delay off", Target{LockDelay: time.Second}, time.Second, map[string]string{"lock-delay": "0s"}, ServerOptions{MaxTTL: time.Second}, ""},
		{"bad duration", Target{}, time.Second, map[string]string{"lock-delay": "soon"}, ServerOptions{}, "lock-delay"},
		{"negative delay", Target{}, time.Second, map[string]string{"lock-delay": "-1s"}, ServerOptions{}, "lock-delay=\"-1s\" for target lockd: want a duration of at least 0s"},
		{"ttl above max", Target{}, 5 * time.Second, map[string]string{"max-ttl": "2s"}, ServerOptions{}, "exceeds"},
		{"zero max", Target{}, 0, map[string]string{"max-ttl": "0s"}, ServerOptions{}, "max-ttl=\"0s\" for target lockd: want a duration of at least 1ms"},
		{"raft-sync off", Target{}, time.Second, map[string]string{"raft-sync": "off"}, ServerOptions{MaxTTL: time.Second, NoSync: true}, ""},
		{"raft-sync on", Target{}, time.Second, map[string]string{"raft-sync": "on"}, ServerOptions{MaxTTL: time.Second}, ""},
		{"raft-sync neither", Target{}, time.Second, map[string]string{"raft-sync": "no"}, ServerOptions{}, "want one of on, off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := option.Parse(option.Decls(LockDelay, MaxTTL, RaftSync, EndpointsOption), tt.opts, "option", "target lockd")
			var got ServerOptions
			if err == nil {
				got, err = tt.target.serverOptions(targets.Options{TTL: tt.ttl, Settings: set.Only(option.Decls(LockDelay, MaxTTL, RaftSync))})
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// TestCommand: the node's command line is one lockd's own flag parser
// accepts, with the timing the target promises.
func TestCommand(t *testing.T) {
	peers := map[string]string{"n2": "10.0.0.12", "n1": "10.0.0.11", "n3": "10.0.0.13"}
	cmd := Command("n2", peers, ServerOptions{MaxTTL: 2 * time.Second, LockDelay: 300 * time.Millisecond})
	if cmd[0] != Binary || cmd[1] != "lockd" {
		t.Fatalf("command %q", cmd)
	}
	cfg, err := server.ParseFlags(cmd[2:])
	if err != nil {
		t.Fatal(err)
	}
	want := []server.Peer{{ID: "n1", Addr: "10.0.0.11:7001"}, {ID: "n2", Addr: "10.0.0.12:7001"}, {ID: "n3", Addr: "10.0.0.13:7001"}}
	checks := []struct {
		name      string
		got, want any
	}{
		{"id", cfg.ID, "n2"},
		{"peers", fmt.Sprint(cfg.Peers), fmt.Sprint(want)},
		{"http", cfg.HTTPAddr, ":7002"},
		{"data dir", cfg.DataDir, DataDir},
		{"max ttl", cfg.MaxTTL, 2 * time.Second},
		{"default ttl", cfg.DefaultTTL, 2 * time.Second},
		{"lock delay", cfg.LockDelay, 300 * time.Millisecond},
		{"lease margin", cfg.LeaseMargin, LeaseMargin},
		{"heartbeat", cfg.HeartbeatTimeout, HeartbeatTimeout},
		{"election", cfg.ElectionTimeout, ElectionTimeout},
		{"leader lease", cfg.LeaderLeaseTimeout, LeaderLeaseTimeout},
		{"apply", cfg.ApplyTimeout, ApplyTimeout},
		{"fsync", cfg.NoSync, false},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	cfg, err = server.ParseFlags(Command("n2", peers, ServerOptions{MaxTTL: time.Second, NoSync: true})[2:])
	if err != nil || !cfg.NoSync {
		t.Fatalf("NoSync did not reach the server's flags: %+v %v", cfg.NoSync, err)
	}
}

func TestHealthy(t *testing.T) {
	st := func(id, leader string, ready bool) Status {
		s := Status{}
		s.ID, s.LeaderID, s.Ready = id, leader, ready
		if leader != "" {
			s.LeaderHTTPAddr = "10.0.0.1:7002"
		}
		if id == leader {
			s.State = "Leader"
		}
		return s
	}
	tests := []struct {
		name string
		sts  []Status
		errs []error
		want string
	}{
		{"healthy", []Status{st("n1", "n2", false), st("n2", "n2", true), st("n3", "n2", false)}, nil, ""},
		{"one silent", []Status{st("n1", "n2", false), st("n2", "n2", true), {}}, []error{nil, nil, errors.New("exec failed")}, "exec failed"},
		{"disagree", []Status{st("n1", "n1", true), st("n2", "n3", false), st("n3", "n3", true)}, nil, "disagree"},
		{"no leader", []Status{st("n1", "", false), st("n2", "", false), st("n3", "", false)}, nil, "disagree"},
		{"leader not ready", []Status{st("n1", "n2", false), st("n2", "n2", false), st("n3", "n2", false)}, nil, "not ready"},
		{"leader address unknown", []Status{st("n1", "n2", false), st("n2", "n2", true), func() Status { s := st("n3", "n2", false); s.LeaderHTTPAddr = ""; return s }()}, nil, "HTTP address"},
		{"leader elsewhere", []Status{st("n1", "n9", false), st("n2", "n9", false), st("n3", "n9", false)}, nil, "not among"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := tt.errs
			if errs == nil {
				errs = make([]error, len(tt.sts))
			}
			err := healthy(tt.sts, errs)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestTarget starts the real Target (command lines, health check, probe
// parsing) on the in-memory runtime with real lockd servers on loopback,
// and checks what the harness relies on: the recipe, versions, the leader,
// and a killed leader replaced and rejoining with its data, tokens rising
// throughout.
func TestTarget(t *testing.T) {
	ctx := context.Background()
	m := startMem(t, Target{}, targets.Options{TTL: time.Second, Settings: option.Set{"lock-delay": "200ms"}})

	// The recipe clients get: every node's HTTP address, the run's TTL
	// and options.
	var want []string
	for _, n := range m.Nodes() {
		want = append(want, net.JoinHostPort(n.Addr().String(), strconv.Itoa(HTTPPort)))
	}
	if eps := m.Cluster.Endpoints(); !slices.Equal(eps, want) {
		t.Fatalf("endpoints %v, want %v", eps, want)
	}
	if m.Server() != (ServerOptions{MaxTTL: time.Second, LockDelay: 200 * time.Millisecond}) {
		t.Fatalf("server options %+v", m.Server())
	}
	if args := strings.Join(m.argsOf("n3"), " "); !strings.Contains(args, "--id n3 ") || !strings.Contains(args, "--lock-delay 200ms") {
		t.Fatalf("n3 command line %q", args)
	}
	v := m.Versions(ctx)
	if v["lockd"] != server.Version {
		t.Fatalf("versions %v", v)
	}
	t.Logf("versions %v", v)

	l := newTestLocker(t, m.recipe(), "c1")
	token := func() uint64 {
		t.Helper()
		s := acquire(t, l, "k", 10*time.Second)
		if err := s.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		return s.Token()
	}
	t0 := token()

	old, err := m.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sts, _ := m.Statuses(ctx)
	var before Status
	for _, s := range sts {
		if s.ID == old.Name() {
			before = s
		}
	}
	if before.State != "Leader" || !before.Ready {
		t.Fatalf("Leader() = %s, whose status is %+v", old.Name(), before)
	}

	if err := old.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	nl := waitLeader(t, ctx, m.Cluster, old.Name())
	t.Logf("leader %s killed, %s leads", old.Name(), nl.Name())
	t1 := token()
	if t1 <= t0 {
		t.Fatalf("token after the leader change %d <= %d", t1, t0)
	}

	if err := old.(runtime.Restarter).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.WaitHealthy(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	sts, errs := m.Statuses(ctx)
	for i, s := range sts {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if s.ID == old.Name() && (s.AppliedIndex < before.AppliedIndex || s.Term <= before.Term) {
			t.Fatalf("restarted %s: %+v, before the kill %+v", s.ID, s, before)
		}
	}
	t2 := token()
	if t2 <= t1 {
		t.Fatalf("token after the restart %d <= %d", t2, t1)
	}
}

// TestRecipeOnCluster runs the recipe against a real 3-node lockd on
// loopback: mutual exclusion, rising tokens, the watchdog, lost leases,
// lock-delay, pinned endpoints and a cluster without quorum.
func TestRecipeOnCluster(t *testing.T) {
	ctx := context.Background()
	const ttl = 600 * time.Millisecond
	m := startMem(t, Target{}, targets.Options{TTL: ttl, Settings: option.Set{"lock-delay": "800ms"}})
	a := newTestLocker(t, m.recipe(), "c1")
	b := newTestLocker(t, m.recipe(), "c2")

	busy := func(t *testing.T, l targets.Locker, key string) error {
		t.Helper()
		bctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		s, err := l.Acquire(bctx, key)
		if err == nil {
			t.Fatalf("%s granted with token %d while held", key, s.Token())
		}
		if got := sentinels(err); got != "busy" {
			t.Fatalf("acquire of a held lock: %v matches %s, want busy", err, got)
		}
		return err
	}

	t.Run("exclusion and rising tokens", func(t *testing.T) {
		sa := acquire(t, a, "x", 5*time.Second)
		busy(t, b, "x")
		// Another key is free.
		sy := acquire(t, b, "y", 5*time.Second)
		if sy.Token() <= sa.Token() {
			t.Fatalf("token of y %d <= token of x %d", sy.Token(), sa.Token())
		}
		if err := sa.Release(ctx); err != nil {
			t.Fatal(err)
		}
		sb := acquire(t, b, "x", 5*time.Second)
		if sb.Token() <= sy.Token() {
			t.Fatalf("token %d after %d", sb.Token(), sy.Token())
		}
		for _, s := range []*Lease{sb, sy} {
			if err := s.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// Releasing twice is fine; the lease is gone.
		if err := sb.Release(ctx); err != nil {
			t.Fatalf("second release: %v", err)
		}
	})

	t.Run("watchdog holds the lease past its TTL", func(t *testing.T) {
		s := acquire(t, a, "w", 5*time.Second)
		time.Sleep(3 * ttl)
		busy(t, b, "w")
		if err := s.Release(ctx); err != nil {
			t.Fatalf("release after 3 TTLs: %v", err)
		}
		if s.RenewFailures() != 0 {
			t.Fatalf("renew failures %d", s.RenewFailures())
		}
	})

	t.Run("lost lease: lock-delay, then not owner", func(t *testing.T) {
		quiet, err := newLocker(m.recipe(), "c3", nil, client.WithRequestTimeout(RequestTimeout))
		if err != nil {
			t.Fatal(err)
		}
		defer quiet.Close()
		quiet.renew = time.Hour // a holder that never renews (as if paused)
		s := acquire(t, quiet, "d", 5*time.Second)
		select {
		case <-s.Done():
		case <-time.After(5 * ttl):
			t.Fatal("unrenewed lease not reported lost")
		}
		if !errors.Is(s.Err(), client.ErrLeaseExpired) || s.RenewFailures() != 1 {
			t.Fatalf("lease err %v, renew failures %d", s.Err(), s.RenewFailures())
		}
		// The leader expires it and keeps the lock in lock-delay.
		cl, err := client.New(m.Endpoints)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		deadline := time.Now().Add(5 * time.Second)
		for {
			st, err := cl.Get(ctx, "d")
			if err == nil && st.LockDelay {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("lock never entered lock-delay: %+v, %v", st, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := busy(t, b, "d"); !errors.Is(err, client.ErrLockDelay) {
			t.Fatalf("acquire in lock-delay: %v", err)
		}
		if err := s.Renew(ctx); sentinels(err) != "not-owner" {
			t.Fatalf("renew of an expired lease: %v", err)
		}
		sb := acquire(t, b, "d", 5*time.Second)
		if sb.Token() <= s.Token() {
			t.Fatalf("token %d after the lapsed %d", sb.Token(), s.Token())
		}
		if err := s.Release(ctx); sentinels(err) != "not-owner" {
			t.Fatalf("release of a lapsed lease: %v", err)
		}
		if err := sb.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("pinned to a follower", func(t *testing.T) {
		leader, err := m.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lnum, _ := strconv.Atoi(strings.TrimPrefix(leader.Name(), "n"))
		name := fmt.Sprintf("c%d", lnum%3+1) // pinned to the next node: a follower
		cfg := m.recipe()
		cfg.Options = map[string]string{"endpoints": "pinned"}
		p := newTestLocker(t, cfg, name)
		s := acquire(t, p, "p", 5*time.Second)
		if err := s.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if p.Stats().Redirects < 1 {
			t.Fatalf("client %s pinned to a follower was never redirected: %+v", name, p.Stats())
		}
	})

	t.Run("no quorum is unavailable, not busy", func(t *testing.T) {
		leader, err := m.Leader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		killed := 0
		for _, n := range m.Nodes() {
			if n != leader && killed < 2 {
				if err := n.Signal(ctx, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				killed++
			}
		}
		c := newTestLocker(t, m.recipe(), "c4")
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		s, err := c.Acquire(actx, "q")
		if err == nil {
			t.Fatalf("granted %d without quorum", s.Token())
		}
		if got := sentinels(err); got != "unavailable" {
			t.Fatalf("acquire without quorum: %v matches %s", err, got)
		}
	})
}
