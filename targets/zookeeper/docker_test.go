//go:build linux

package zookeeper_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"golang.org/x/sys/unix"

	"github.com/splitbrain/splitbrain/internal/clockskew"
	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/external"
	"github.com/splitbrain/splitbrain/targets/zookeeper"
)

// consRe reads one session's line of `cons`: its session id, when it was
// established (the member's System.currentTimeMillis() then) and when it
// was last answered (the member's monotonic clock, in ms).
var consRe = regexp.MustCompile(`sid=0x([0-9a-f]+),.*est=(\d+),.*lresp=(\d+)`)

// jvmClocks returns how far member n's JVM clocks are from the true ones,
// as ZooKeeper itself reports them: a new session's establishment time
// (the wall clock, when it connected) and its last response time (the
// monotonic clock, known to within slack: the ping interval and the
// round trip of the exec that reads it).
func jvmClocks(ctx context.Context, t *testing.T, n runtime.Node) (wall, mono, slack time.Duration) {
	t.Helper()
	before := time.Now()
	conn, _, err := zk.Connect([]string{fmt.Sprintf("%s:%d", n.Addr(), zookeeper.ClientPort)}, time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, _, err := conn.Exists("/"); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	time.Sleep(700 * time.Millisecond) // a ping or two
	// The session's last response came at most a ping interval (a third
	// of the 1 s session timeout) before cons ran, inside the exec: its
	// time is known to within the exec's round trip, which a loaded
	// machine stretches to a second or more. mono is measured from the
	// middle of that window, give or take slack.
	monoNow := func() time.Duration {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ts.Nano())
	}
	t0 := monoNow()
	out, err := runtime.Run(ctx, n, "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d; printf cons >&3; cat <&3", zookeeper.ClientPort))
	if err != nil {
		t.Fatal(err)
	}
	t1 := monoNow()
	const ping = 400 * time.Millisecond
	mid := (t0 - ping + t1) / 2
	slack = (t1 - t0 + ping) / 2
	for _, m := range consRe.FindAllStringSubmatch(string(out), -1) {
		sid, _ := strconv.ParseUint(m[1], 16, 64)
		if int64(sid) != conn.SessionID() {
			continue
		}
		est, _ := strconv.ParseInt(m[2], 10, 64)
		lresp, _ := strconv.ParseInt(m[3], 10, 64)
		wall = time.UnixMilli(est).Sub(before.Add(after.Sub(before) / 2))
		mono = time.Duration(lresp)*time.Millisecond - mid
		return wall, mono, slack
	}
	t.Fatalf("cons does not list session %x: %q", conn.SessionID(), out)
	return 0, 0, 0
}

// TestZooKeeperClockAndRestart brings a real ensemble up and checks what
// the harness relies on: the leader is found, a member's JVM sees a clock
// skewed by vDSO injection (read back through ZooKeeper's own `cons`
// times, not only through the injected code), and a member killed and
// restarted keeps its data (its transaction log in the state directory:
// the zxid goes on from where it was).
func TestZooKeeperClockAndRestart(t *testing.T) {
	rt, imgs := testenv.Runtime(t, "z", zookeeper.Role)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	cl, err := zookeeper.Target{}.Start(ctx, rt, targets.Options{Images: imgs, TTL: 2 * time.Second, ExtraCaps: []string{runtime.CapSysPtrace}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("3 members serving in %v", time.Since(start).Round(time.Millisecond))
	leader, err := cl.(targets.LeaderFinder).Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v := cl.Versions(ctx); v["zookeeper"] != "3.8.0" || v["zookeeper_debian"] == "" {
		t.Fatalf("versions %v", v)
	}
	var follower runtime.Node
	for _, n := range cl.Nodes() {
		if n != leader {
			follower = n
		}
	}

	// Clock: a follower's JVM, skewed by vDSO injection, as ZooKeeper's
	// own session times show it.
	p := clockskew.NewProcess(follower, nil, 0)
	if wall, mono, slack := jvmClocks(ctx, t, follower); wall.Abs() > time.Second || mono.Abs() > time.Second+slack {
		t.Fatalf("%s's JVM is off by %v (wall), %v ± %v (monotonic) before any skew", follower.Name(), wall, mono, slack)
	}
	skew := clockskew.Offsets{Realtime: time.Hour, Monotonic: 5 * time.Second}
	if err := p.Set(ctx, skew); err != nil {
		t.Fatal(err)
	}
	obs, err := p.Verify(ctx, skew)
	if err != nil {
		t.Fatal(err)
	}
	wall, mono, slack := jvmClocks(ctx, t, follower)
	t.Logf("%s: offsets %v (wall) and %v (monotonic) set; the injected code reads %v and %v; ZooKeeper's session times read %v and %v",
		follower.Name(), skew.Realtime, skew.Monotonic, obs.Realtime.Round(time.Millisecond), obs.Monotonic.Round(time.Millisecond),
		wall.Round(time.Millisecond), mono.Round(time.Millisecond))
	if (wall-skew.Realtime).Abs() > time.Second || (mono-skew.Monotonic).Abs() > time.Second+slack {
		t.Fatalf("the JVM's clocks are off by %v and %v ± %v, want %v and %v", wall, mono, slack, skew.Realtime, skew.Monotonic)
	}
	if err := p.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if wall, mono, slack := jvmClocks(ctx, t, follower); wall.Abs() > time.Second || mono.Abs() > time.Second+slack {
		t.Fatalf("%s's JVM is still off by %v, %v ± %v after reset", follower.Name(), wall, mono, slack)
	}

	// Kill and restart the leader: it comes back with its data (its zxid
	// goes on from where it was), and the ensemble serves again under a
	// leader of a higher epoch.
	status := func(n runtime.Node) zookeeper.Status {
		t.Helper()
		st, err := targets.ProbeJSON[zookeeper.Status](ctx, n, "/usr/local/bin/splitbrain", "probe", zookeeper.Name,
			"--endpoint", fmt.Sprintf("127.0.0.1:%d", zookeeper.ClientPort))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	old := status(leader)
	if err := leader.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := leader.(runtime.Restarter).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.(*zookeeper.Cluster).WaitHealthy(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	back := status(leader)
	newLeader, err := cl.(targets.LeaderFinder).Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leader %s killed at zxid %#x (epoch %d); back as %s at zxid %#x; leader now %s (epoch %d)",
		leader.Name(), old.Zxid, old.Epoch(), back.Mode, back.Zxid, newLeader.Name(), status(newLeader).Epoch())
	if back.Zxid < old.Zxid || status(newLeader).Epoch() <= old.Epoch() {
		t.Fatalf("zxid went from %#x to %#x, epoch from %d to %d: data lost or no new epoch", old.Zxid, back.Zxid, old.Epoch(), status(newLeader).Epoch())
	}
}

// TestZooKeeperAdaptersConform runs `splitbrain client-check` on the Curator
// and Kazoo adapters inside their own client images, against a real
// ensemble: each speaks the client protocol, says what it offers, tells
// busy from granted and gives tokens that grow.
func TestZooKeeperAdaptersConform(t *testing.T) {
	rt, imgs := testenv.Runtime(t, "z", zookeeper.Role, "client-"+zookeeper.CuratorKind, "client-"+zookeeper.KazooKind)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cl, err := zookeeper.Target{}.Start(ctx, rt, targets.Options{Images: imgs, TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	eps := cl.Endpoints()
	for _, c := range []struct{ kind, adapter string }{
		{zookeeper.CuratorKind, zookeeper.CuratorAdapter},
		{zookeeper.KazooKind, zookeeper.KazooAdapter},
	} {
		t.Run(c.kind, func(t *testing.T) {
			n, err := rt.Start(ctx, runtime.NodeSpec{
				Name: "c-" + c.kind, Role: "client-" + c.kind, Image: imgs["client-"+c.kind],
				Cmd: []string{"sleep", "infinity"}, Caps: []string{runtime.CapNetAdmin},
			})
			if err != nil {
				t.Fatal(err)
			}
			res, err := n.Exec(ctx, []string{"/usr/local/bin/splitbrain", "client-check", "--backend", zookeeper.Name,
				"--endpoints", strings.Join(eps, ","), "--dir", external.ClientDir, "--", "sh", "-c", c.adapter})
			t.Logf("client-check:\n%s", res.Stdout)
			if err != nil {
				t.Fatalf("client-check failed: %v\n%s", err, res.Stderr)
			}
		})
	}
}
