package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestLockBasics(t *testing.T) {
	c := newCluster(t, 3)
	all := c.all()

	a := c.mustAcquire(all, "k", "a", 5*time.Second)
	if a.Token == 0 || a.Renewed || a.TTL != 5*time.Second {
		t.Fatalf("first grant %+v", a)
	}

	_, err := c.acquire(all, "k", "b", 5*time.Second)
	oe := opErr(t, err, errLockHeld)
	if oe.token != a.Token || oe.remaining <= 0 || oe.remaining > 5*time.Second {
		t.Fatalf("busy error carries token %d, remaining %v; want token %d and (0, 5s]", oe.token, oe.remaining, a.Token)
	}

	again := c.mustAcquire(all, "k", "a", 5*time.Second)
	if !again.Renewed || again.Token != a.Token {
		t.Fatalf("re-acquire by the owner = %+v, want a renewal of token %d", again, a.Token)
	}

	other := c.mustAcquire(all, "k2", "b", time.Second)
	if other.Token <= a.Token {
		t.Fatalf("token of a later grant %d <= %d", other.Token, a.Token)
	}
	if err := c.renew(all, "k", "a", a.Token); err != nil {
		t.Fatalf("renew by the owner: %v", err)
	}
	if v := c.lockState(all, "k"); !v.Held || v.Owner != "a" || v.Token != a.Token {
		t.Fatalf("lock state %+v", v)
	}
	if err := c.release(all, "k", "a", a.Token); err != nil {
		t.Fatalf("release by the owner: %v", err)
	}
	if err := c.release(all, "k", "a", a.Token); err != nil {
		t.Fatalf("retried release: %v", err)
	}
	if v := c.lockState(all, "k"); v.Held || v.LastToken != a.Token {
		t.Fatalf("lock state after release %+v", v)
	}
	b := c.mustAcquire(all, "k", "b", 5*time.Second)
	if b.Token <= other.Token {
		t.Fatalf("token after release %d <= %d", b.Token, other.Token)
	}
	if got := c.sumMetric(func(m *metrics) uint64 { return m.grants.Load() }); got != 3 {
		t.Fatalf("lockd_grants_total summed over nodes = %d, want 3", got)
	}
}

func TestBadRequests(t *testing.T) {
	c := newCluster(t, 1)
	n := c.node(c.waitLeader())
	ctx := context.Background()
	tests := []struct {
		name       string
		key, owner string
		ttl, wait  time.Duration
	}{
		{"no key", "", "a", time.Second, 0},
		{"no owner", "k", "", time.Second, 0},
		{"ttl above max", "k", "a", time.Hour, 0},
		{"negative ttl", "k", "a", -time.Second, 0},
		{"negative wait", "k", "a", time.Second, -time.Second},
		{"bad utf-8", "k\xff", "a", time.Second, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := n.acquire(ctx, tt.key, tt.owner, tt.ttl, tt.wait)
			opErr(t, err, errBadRequest)
		})
	}
	if g, err := n.acquire(ctx, "k", "a", 0, 0); err != nil || g.TTL != c.cfgs[0].DefaultTTL {
		t.Fatalf("acquire with ttl 0 = %+v, %v; want the default TTL", g, err)
	}
}

func TestLeaseExpiresOnLeaderClock(t *testing.T) {
	c := newCluster(t, 3)
	all := c.all()
	a := c.mustAcquire(all, "k", "a", 2*time.Second)

	c.clock.Advance(2*time.Second - time.Millisecond)
	c.settle()
	if _, err := c.acquire(all, "k", "b", time.Second); !errors.Is(err, errLockHeld) {
		t.Fatalf("acquire 1ms before the lease ends: %v, want lock held", err)
	}
	c.clock.Advance(time.Millisecond)
	c.waitState(all, "k", func(v lockView) bool { return !v.Held })
	b := c.mustAcquire(all, "k", "b", time.Second)
	if b.Token <= a.Token {
		t.Fatalf("token after expiry %d <= %d", b.Token, a.Token)
	}
	if got := c.sumMetric(func(m *metrics) uint64 { return m.expiries.Load() }); got < 1 {
		t.Fatalf("lockd_lease_expiries_total = %d, want 1", got)
	}
}

func TestStaleRenewAndReleaseRefused(t *testing.T) {
	c := newCluster(t, 3)
	all := c.all()
	old := c.mustAcquire(all, "k", "a", 5*time.Second)
	if err := c.release(all, "k", "a", old.Token); err != nil {
		t.Fatal(err)
	}
	cur := c.mustAcquire(all, "k", "b", 5*time.Second)

	tests := []struct {
		name    string
		release bool
		key     string
		owner   string
		token   uint64
	}{
		{"renew with an old token", false, "k", "a", old.Token},
		{"renew by the holder with an old token", false, "k", "b", old.Token},
		{"renew by another owner with the current token", false, "k", "a", cur.Token},
		{"renew of a free lock", false, "free", "a", old.Token},
		{"release with an old token", true, "k", "a", old.Token},
		{"release by another owner with the current token", true, "k", "c", cur.Token},
		{"release with a made-up token", true, "k", "b", cur.Token + 1000},
	}
	var renews, releases uint64
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.release {
				err = c.release(all, tt.key, tt.owner, tt.token)
				releases++
			} else {
				err = c.renew(all, tt.key, tt.owner, tt.token)
				renews++
			}
			oe := opErr(t, err, errNotOwner)
			if tt.key == "k" && oe.token != cur.Token {
				t.Fatalf("refusal names token %d, want the holder's %d", oe.token, cur.Token)
			}
		})
	}
	if v := c.lockState(all, "k"); !v.Held || v.Owner != "b" || v.Token != cur.Token {
		t.Fatalf("refused calls changed the lock: %+v", v)
	}
	if got := c.sumMetric(func(m *metrics) uint64 { return m.renewFailures.Load() }); got != renews {
		t.Fatalf("lockd_renew_failures_total = %d, want %d", got, renews)
	}
	if got := c.sumMetric(func(m *metrics) uint64 { return m.releasesRefused.Load() }); got != releases {
		t.Fatalf("lockd_releases_refused_total = %d, want %d", got, releases)
	}
}

// TestLeaderChangeWaitOut checks the wait-out rule: a new leader does not
// free a lease it inherited before max(MaxTTL, TTL) + LeaseMargin have
// passed on its own clock since it became leader.
func TestLeaderChangeWaitOut(t *testing.T) {
	c := newCluster(t, 3) // MaxTTL 10s, LeaseMargin 1s
	t0 := c.clock.Now()
	a := c.mustAcquire(c.all(), "k", "a", 5*time.Second)
	old := c.waitLeader()

	c.clock.Advance(time.Second)
	c.isolate(old)
	rest := c.others(old)
	c.waitLeader(rest...)
	// A new leader took over at t0+1s or later, so it must hold "k" for
	// a until t0+12s at least, although a's lease (5s) would have run out
	// at t0+5s on the old leader's clock.
	c.clock.Advance(5 * time.Second) // t0+6s
	c.settle()
	_, err := c.acquire(rest, "k", "b", 5*time.Second)
	oe := opErr(t, err, errLockHeld)
	if oe.token != a.Token || oe.remaining < 6*time.Second {
		t.Fatalf("busy error token %d remaining %v; want token %d and >= 6s left of the wait-out", oe.token, oe.remaining, a.Token)
	}

	c.clock.Advance(t0.Add(12*time.Second).Sub(c.clock.Now()) - time.Millisecond) // t0+12s-1ms
	c.settle()
	if _, err := c.acquire(rest, "k", "b", 5*time.Second); !errors.Is(err, errLockHeld) {
		t.Fatalf("acquire just before the wait-out ends: %v, want lock held", err)
	}

	c.clock.Advance(time.Millisecond)
	b := c.acquireEventually(rest, "k", "b", 5*time.Second)
	if b.Token <= a.Token {
		t.Fatalf("token of the grant after the leader change %d <= %d", b.Token, a.Token)
	}
	if c.clock.Now().Before(t0.Add(12 * time.Second)) {
		t.Fatalf("granted before the wait-out ended")
	}
	opErr(t, c.renew(rest, "k", "a", a.Token), errNotOwner)
	opErr(t, c.release(rest, "k", "a", a.Token), errNotOwner)

	// The old leader rejoins and learns of b's lease.
	c.heal()
	eventually(t, "old leader to catch up", func() bool {
		v, _ := c.node(old).fsm.view("k")
		return v.Token == b.Token
	})
}

func TestRenewDuringWaitOut(t *testing.T) {
	c := newCluster(t, 3) // MaxTTL 10s, LeaseMargin 1s
	t0 := c.clock.Now()
	a := c.mustAcquire(c.all(), "k", "a", 5*time.Second)
	old := c.waitLeader()
	c.isolate(old)
	rest := c.others(old)
	c.waitLeader(rest...)

	// The new leader treats a as alive and renews it.
	c.clock.Advance(4 * time.Second)
	if err := c.renew(rest, "k", "a", a.Token); err != nil {
		t.Fatalf("renew during the wait-out: %v", err)
	}
	c.clock.Advance(4 * time.Second) // t0+8s: the lease now runs to t0+13s at least
	if err := c.renew(rest, "k", "a", a.Token); err != nil {
		t.Fatalf("second renew during the wait-out: %v", err)
	}
	c.clock.Advance(t0.Add(12 * time.Second).Sub(c.clock.Now())) // past the wait-out, not the renewal
	c.settle()
	if _, err := c.acquire(rest, "k", "b", time.Second); !errors.Is(err, errLockHeld) {
		t.Fatalf("acquire after the wait-out but inside the renewed lease: %v, want lock held", err)
	}
	if err := c.release(rest, "k", "a", a.Token); err != nil {
		t.Fatalf("release by the holder after a leader change: %v", err)
	}
	c.mustAcquire(rest, "k", "b", time.Second)
}

func TestLockDelay(t *testing.T) {
	c := newCluster(t, 3, withConfig(func(cfg *Config) { cfg.LockDelay = 3 * time.Second }))
	all := c.all()
	c.mustAcquire(all, "k", "a", 2*time.Second)
	c.clock.Advance(2 * time.Second)
	c.waitState(all, "k", func(v lockView) bool { return v.Delayed })

	_, err := c.acquire(all, "k", "b", time.Second)
	oe := opErr(t, err, errLockDelay)
	if oe.remaining <= 0 || oe.remaining > 3*time.Second {
		t.Fatalf("lock-delay remaining %v, want (0, 3s]", oe.remaining)
	}
	c.clock.Advance(3*time.Second - 10*time.Millisecond)
	c.settle()
	if _, err := c.acquire(all, "k", "b", time.Second); !errors.Is(err, errLockDelay) {
		t.Fatalf("acquire just before the delay ends: %v, want lock delay", err)
	}
	c.clock.Advance(10 * time.Millisecond)
	b := c.acquireEventually(all, "k", "b", time.Second)

	// A release does not start a lock-delay.
	if err := c.release(all, "k", "b", b.Token); err != nil {
		t.Fatal(err)
	}
	c.mustAcquire(all, "k", "c", time.Second)
}

func TestServerSideWait(t *testing.T) {
	c := newCluster(t, 3)
	leader := c.node(c.waitLeader())
	a := c.mustAcquire(c.all(), "k", "a", 5*time.Second)

	done := make(chan struct{})
	var got grant
	var err error
	go func() {
		defer close(done)
		got, err = leader.acquire(context.Background(), "k", "b", time.Second, 5*time.Second)
	}()
	time.Sleep(50 * time.Millisecond)
	if e := c.release(c.all(), "k", "a", a.Token); e != nil {
		t.Fatal(e)
	}
	<-done
	if err != nil || got.Token <= a.Token || got.Owner != "b" {
		t.Fatalf("waiting acquire = %+v, %v", got, err)
	}

	// A bounded wait ends with lock held.
	start := time.Now()
	_, err = leader.acquire(context.Background(), "k", "c", time.Second, 100*time.Millisecond)
	opErr(t, err, errLockHeld)
	if time.Since(start) < 100*time.Millisecond {
		t.Fatalf("gave up after %v, before the 100ms wait", time.Since(start))
	}
}

func TestTokensMonotonicAcrossRestart(t *testing.T) {
	c := newCluster(t, 3)
	all := c.all()
	var last uint64
	for _, key := range []string{"a", "b", "c", "a"} {
		g := c.mustAcquire(all, key, "x", 5*time.Second)
		if g.Token <= last && !g.Renewed {
			t.Fatalf("token %d not above %d", g.Token, last)
		}
		last = max(last, g.Token)
	}
	held := c.mustAcquire(all, "held", "x", 5*time.Second)
	last = held.Token
	// Snapshot one node so that a restart goes through Restore too.
	if err := c.node(0).raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}

	c.stopAll()
	for i := range all {
		c.start(i)
	}
	g := c.acquireEventually(all, "new", "y", 5*time.Second)
	if g.Token <= last {
		t.Fatalf("token after restart %d <= %d", g.Token, last)
	}
	if _, err := c.acquire(all, "held", "y", time.Second); !errors.Is(err, errLockHeld) {
		t.Fatalf("lease held across the restart: %v, want lock held (wait-out)", err)
	}
	if err := c.renew(all, "held", "x", held.Token); err != nil {
		t.Fatalf("renew of a lease held across the restart: %v", err)
	}
	c.stopAll()
	for i := range all {
		c.start(i)
	}
	if g2 := c.acquireEventually(all, "newer", "y", 5*time.Second); g2.Token <= g.Token {
		t.Fatalf("token after the second restart %d <= %d", g2.Token, g.Token)
	}
}

func TestMinorityCannotGrant(t *testing.T) {
	tests := []struct {
		name          string
		isolateLeader bool
	}{
		{"isolated leader", true},
		{"isolated follower", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t, 3)
			leader := c.waitLeader()
			victim := leader
			if !tt.isolateLeader {
				victim = c.others(leader)[0]
			}
			c.isolate(victim)
			n := c.node(victim)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := n.acquire(ctx, "m", "x", time.Second, 0)
			if !retryable(err) {
				t.Fatalf("acquire on the isolated node: %v, want not leader or unavailable", err)
			}
			eventually(t, "isolated node to lose leadership", func() bool { return n.raft.State() != raft.Leader })
			eventually(t, "isolated node to report unhealthy", func() bool { ok, _ := n.health(); return !ok })
			if _, err := n.acquire(ctx, "m", "x", time.Second, 0); !errors.Is(err, errNotLeader) {
				t.Fatalf("acquire on the isolated node later: %v, want not leader", err)
			}
			if _, err := n.lockState(ctx, "m"); !errors.Is(err, errNotLeader) {
				t.Fatalf("read on the isolated node: %v, want not leader", err)
			}
			if v, _ := n.fsm.view("m"); v.Held {
				t.Fatalf("the isolated node applied a grant: %+v", v)
			}
			// The majority side still grants.
			rest := c.others(victim)
			g := c.mustAcquire(rest, "m", "y", time.Second)
			if v := c.lockState(rest, "m"); v.Owner != "y" || v.Token != g.Token {
				t.Fatalf("majority state %+v", v)
			}
		})
	}
}
