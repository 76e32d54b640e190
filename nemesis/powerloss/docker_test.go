//go:build linux

package powerloss_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/nemesis/powerloss"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/docker"
	"github.com/splitbrain/splitbrain/targets/redis"
)

// TestPowerLossInContainer holds the fault to its promise on the real
// runtime, in a node whose program (sleep) stays PID 1 under the power-loss
// filesystem: a SIGKILL and restart (a process crash, the kernel
// surviving) keeps a file written without fsync; a power loss loses one,
// and an append to a synced file, while files synced with fsync and
// written with O_DSYNC survive; and nothing of the fault is left once the
// runtime is closed (no container, no FUSE mount).
func TestPowerLossInContainer(t *testing.T) {
	rt, imgs := testenv.Runtime(t, "p", redis.Role)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nm := &powerloss.Nemesis{Weights: nemesis.Weights{nemesis.GroupNode: 1}, Memory: 64 << 20}
	wrt, err := nm.Wrap(rt, map[string][]string{redis.Role: {"/data"}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := wrt.Start(ctx, runtime.NodeSpec{Name: "n1", Role: redis.Role, Image: imgs[redis.Role], Cmd: []string{"sleep", "infinity"}})
	if err != nil {
		t.Fatal(err)
	}
	env := &nemesis.Env{Nodes: []runtime.Node{n}}
	if err := nm.Prepare(ctx, env, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	sh := func(script string) string {
		t.Helper()
		out, err := runtime.Run(ctx, n, "bash", "-c", script)
		if err != nil {
			t.Fatalf("%s: %v", script, err)
		}
		return string(out)
	}
	if got := sh("cat /proc/1/comm; grep ' /data fuse' /proc/mounts | cut -d' ' -f1-3"); got != "sleep\nsplitbrain-powerfs /data fuse.powerfs\n" {
		t.Fatalf("PID 1 and the mount on /data: %q, want sleep and powerfs", got)
	}

	// A process crash: the kernel keeps what was written.
	sh("printf unsynced > /data/crash")
	if err := n.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := n.(runtime.Restarter).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitMounted(t, ctx, n)
	if got := sh("cat /data/crash"); got != "unsynced" {
		t.Errorf("after a kill, a file written without fsync holds %q, want %q", got, "unsynced")
	}

	// A power loss: only what was synced stays.
	sh(`printf lost > /data/lost
printf synced > /data/synced && sync /data/synced
printf 'dsync' | dd of=/data/dsync oflag=dsync status=none
printf 'one ' > /data/log && sync /data/log && printf 'two ' >> /data/log`)
	f, err := nm.Inject(ctx, env, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	// lost (4 bytes) and log's append (4); the restart began a new
	// journal, so crash counts as synced.
	if d := f.Detail(); !strings.Contains(d, "n1 lost 8 unsynced bytes in 2 files") {
		t.Errorf("detail %q, want n1 to have lost 8 bytes in 2 files", d)
	}
	if err := f.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	waitMounted(t, ctx, n)
	for file, want := range map[string]string{"lost": "", "synced": "synced", "dsync": "dsync", "log": "one ", "crash": "unsynced"} {
		if got := sh("cat /data/" + file); got != want {
			t.Errorf("after a power loss %s holds %q, want %q", file, got, want)
		}
	}
	if err := nm.Finish(ctx); err != nil {
		t.Errorf("Finish: %v", err)
	}

	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if c, nets, err := docker.Clean(ctx, testenv.Docker(t), rt.RunID()); err != nil || c != 0 || nets != 0 {
		t.Errorf("after Close, clean found %d containers and %d networks (%v)", c, nets, err)
	}
	if m, _ := os.ReadFile("/proc/mounts"); strings.Contains(string(m), "splitbrain-powerfs") {
		t.Errorf("a powerfs mount is left on this host:\n%s", m)
	}
}

// waitMounted waits until n's filesystem answers again after a restart.
func waitMounted(t *testing.T, ctx context.Context, n runtime.Node) {
	t.Helper()
	err := runtime.Poll(ctx, n.Name()+": the power-loss filesystem never came back", 20*time.Second, 50*time.Millisecond,
		func(ctx context.Context) error {
			_, err := runtime.Run(ctx, n, "/usr/local/bin/splitbrain", "powerfs", "stats")
			return err
		})
	if err != nil {
		t.Fatal(err)
	}
}
