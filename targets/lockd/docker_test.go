package lockd_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/lockd"
	"github.com/splitbrain/splitbrain/targets/lockd/server"
)

// TestDockerCluster brings the real 3-node cluster up in containers and
// faults its leader: a paused leader is replaced and rejoins; a killed one
// is replaced, restarted with its files and rejoins without bootstrapping
// again. Locks taken through the recipe (from this host, over the run's
// bridge network) keep their tokens rising, and the lock of a holder that
// crashes with the leader is not granted to anyone else before the
// holder's lease ran out.
func TestDockerCluster(t *testing.T) {
	rt, imgs := testenv.Runtime(t, "lk", lockd.Role)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const ttl = 2 * time.Second
	start := time.Now()
	cl, err := lockd.Target{}.Start(ctx, rt, targets.Options{Images: imgs, TTL: ttl})
	if err != nil {
		dumpLogs(t, rt)
		t.Fatal(err)
	}
	t.Logf("3 nodes healthy in %v", time.Since(start).Round(time.Millisecond))
	c := cl.(*lockd.Cluster)
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, rt)
		}
	})

	v := c.Versions(ctx)
	if v["lockd"] != server.Version || !strings.HasPrefix(v["raft"], "v1.") {
		t.Fatalf("versions %v", v)
	}
	sts, errs := c.Statuses(ctx)
	for i, s := range sts {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if s.ID != c.Nodes()[i].Name() || s.LeaderID == "" || s.LeaderHTTPAddr != sts[0].LeaderHTTPAddr {
			t.Fatalf("status of %s: %+v", c.Nodes()[i].Name(), s)
		}
	}

	recipe := targets.RecipeConfig{Kind: lockd.Name, Endpoints: c.Endpoints(), TTL: targets.Duration(ttl)}
	testenv.Reach(t, recipe.Endpoints[0])
	l := newLocker(t, recipe, "c1")
	other := newLocker(t, recipe, "c2")
	var last uint64
	token := func(when string) {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		s, err := l.Acquire(actx, "k")
		if err != nil {
			t.Fatalf("acquire %s: %v", when, err)
		}
		if err := s.Release(actx); err != nil {
			t.Fatalf("release %s: %v", when, err)
		}
		if s.Token() <= last {
			t.Fatalf("token %s %d <= %d", when, s.Token(), last)
		}
		t.Logf("token %s: %d", when, s.Token())
		last = s.Token()
	}
	token("at start")

	// A paused leader is replaced, and rejoins when resumed.
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	if err := leader.Signal(ctx, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	nl := waitLeader(t, ctx, c, leader.Name())
	t.Logf("%s paused: %s leads after %v", leader.Name(), nl.Name(), time.Since(paused).Round(time.Millisecond))
	token("with the old leader paused")
	if err := leader.Signal(ctx, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	token("after the resume")

	// The leader is killed while locks are held. One holder crashes with
	// it: nobody else gets its lock before its lease ran out. The other
	// keeps renewing through the new leader, which inherited the lease.
	leader, err = c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := l.Acquire(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	crasher := newLocker(t, recipe, "c3")
	held, err := crasher.Acquire(ctx, "h")
	if err != nil {
		t.Fatal(err)
	}
	sts, _ = c.Statuses(ctx)
	var before lockd.Status
	for _, s := range sts {
		if s.ID == leader.Name() {
			before = s
		}
	}
	killed := time.Now()
	if err := leader.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	crasher.Close() // no more renewals of h
	expires := held.(*lockd.Lease).Expires()
	nl = waitLeader(t, ctx, c, leader.Name())
	t.Logf("%s killed: %s leads after %v", leader.Name(), nl.Name(), time.Since(killed).Round(time.Millisecond))
	actx, acancel := context.WithTimeout(ctx, 15*time.Second)
	taken, err := other.Acquire(actx, "h")
	acancel()
	if err != nil {
		t.Fatalf("acquire the crashed holder's lock: %v", err)
	}
	granted := time.Now()
	t.Logf("crashed holder's lock granted again %v after the kill, %v after its lease ran out",
		granted.Sub(killed).Round(time.Millisecond), granted.Sub(expires).Round(time.Millisecond))
	if granted.Before(expires) {
		t.Fatalf("lock granted at %v, before its holder's lease ran out at %v", granted, expires)
	}
	if taken.Token() <= held.Token() {
		t.Fatalf("token %d after %d", taken.Token(), held.Token())
	}
	if err := taken.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-kept.(*lockd.Lease).Done():
		// A renewal fell into the election: the watchdog gives up at once.
		t.Logf("lease kept through the kill was lost: %v", kept.(*lockd.Lease).Err())
		_ = kept.Release(ctx)
	default:
		if err := kept.Release(ctx); err != nil {
			t.Fatalf("release of a lease renewed through the leader change: %v", err)
		}
		t.Logf("lease renewed through the leader change, released (token %d)", kept.Token())
	}
	token("after the kill")

	// The killed node restarts with its files and rejoins.
	if err := leader.(runtime.Restarter).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	sts, errs = c.Statuses(ctx)
	for i, s := range sts {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if s.ID == leader.Name() && (s.AppliedIndex < before.AppliedIndex || s.Term <= before.Term) {
			t.Fatalf("restarted %s: %+v; before the kill %+v", s.ID, s, before)
		}
	}
	var logs bytes.Buffer
	if err := leader.Logs(ctx, &logs); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "bootstrapping the static cluster"); n != 1 {
		t.Fatalf("%s bootstrapped %d times: the restart lost its data", leader.Name(), n)
	}
	if n := strings.Count(logs.String(), "lockd serving"); n != 2 {
		t.Fatalf("%s served %d times, want 2:\n%s", leader.Name(), n, logs.String())
	}
	token("after the restart")
}

func newLocker(t *testing.T, cfg targets.RecipeConfig, name string) targets.Locker {
	t.Helper()
	l, err := lockd.NewLocker(context.Background(), cfg, name, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// waitLeader waits until a node other than not leads.
func waitLeader(t *testing.T, ctx context.Context, c *lockd.Cluster, not string) runtime.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		n, err := c.Leader(ctx)
		if err == nil && n.Name() != not {
			return n
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no leader other than %s: %v", not, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func dumpLogs(t *testing.T, rt runtime.Runtime) {
	for _, n := range rt.Nodes() {
		var b bytes.Buffer
		_ = n.Logs(context.Background(), &b)
		t.Logf("log of %s:\n%s", n.Name(), b.String())
	}
}
