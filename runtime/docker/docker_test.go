package docker_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/docker"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/runtime/runtimetest"
)

func leftovers(t *testing.T, cli *client.Client, runID string) (int, int) {
	t.Helper()
	f := filters.NewArgs(filters.Arg("label", runtime.LabelRun+"="+runID))
	cs, err := cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cli.NetworkList(context.Background(), network.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	return len(cs), len(ns)
}

func procState(t *testing.T, ctx context.Context, n runtime.Node) string {
	t.Helper()
	out, err := runtime.Run(ctx, n, "sh", "-c", "grep '^State:' /proc/1/status")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func TestRuntime(t *testing.T) {
	cli := testenv.Docker(t)
	img := testenv.Images(t, cli, images.RoleClient)[images.RoleClient]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runID := fmt.Sprintf("t%d", time.Now().UnixNano()%1e9)
	// b's console is cat's stdio: attached (TestConsoles covers sockets).
	rt, err := docker.New(ctx, cli, docker.Options{RunID: runID, Control: docker.ControlAttach})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			rt.Close(context.Background())
		}
	})

	a, err := rt.Start(ctx, runtime.NodeSpec{Name: "a", Role: "test", Image: img, Cmd: []string{"sleep", "infinity"}, Caps: []string{runtime.CapNetAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := rt.Start(ctx, runtime.NodeSpec{Name: "b", Role: "test", Image: img, Cmd: []string{"cat"}, Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rt.Subnet().Contains(a.Addr()) || a.Addr() == b.Addr() {
		t.Fatalf("addresses %v %v outside %v or equal", a.Addr(), b.Addr(), rt.Subnet())
	}

	t.Run("exec and fixed addresses", func(t *testing.T) {
		out, err := runtime.Run(ctx, a, "ip", "-4", "-o", "addr", "show", "eth0")
		if err != nil || !strings.Contains(string(out), a.Addr().String()+"/24") {
			t.Fatalf("ip addr: %s %v", out, err)
		}
		if _, err := runtime.Run(ctx, a, "ping", "-c", "1", "-W", "2", b.Addr().String()); err != nil {
			t.Fatalf("a cannot reach b: %v", err)
		}
		res, err := a.Exec(ctx, []string{"sh", "-c", "echo oops >&2; exit 3"})
		if !errors.Is(err, runtime.ErrExit) || res.ExitCode != 3 || strings.TrimSpace(string(res.Stderr)) != "oops" {
			t.Fatalf("exit status: %+v %v", res, err)
		}
	})

	t.Run("console survives a partition", func(t *testing.T) {
		// Cut b off from everything; its stdio still works.
		if _, err := runtime.Run(ctx, a, "iptables", "-A", "INPUT", "-s", b.Addr().String(), "-j", "DROP"); err != nil {
			t.Fatal(err)
		}
		stdin, stdout := b.(runtime.Console).Stdio()
		sc := bufio.NewScanner(stdout)
		if _, err := fmt.Fprintln(stdin, "hello"); err != nil {
			t.Fatal(err)
		}
		if !sc.Scan() || sc.Text() != "hello" {
			t.Fatalf("echo: %q %v", sc.Text(), sc.Err())
		}
	})

	t.Run("stop and continue", func(t *testing.T) {
		if err := a.Signal(ctx, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		if s := procState(t, ctx, a); !strings.Contains(s, "T (stopped)") {
			t.Fatalf("after SIGSTOP: %s", s)
		}
		if err := a.Signal(ctx, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if s := procState(t, ctx, a); !strings.Contains(s, "S (sleeping)") {
			t.Fatalf("after SIGCONT: %s", s)
		}
	})

	t.Run("kill and restart keeps files", func(t *testing.T) {
		if _, err := runtime.Run(ctx, a, "sh", "-c", "echo kept > /var/tmp/mark"); err != nil {
			t.Fatal(err)
		}
		if err := a.Signal(ctx, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := a.(runtime.Restarter).Restart(ctx); err != nil {
			t.Fatal(err)
		}
		out, err := runtime.Run(ctx, a, "cat", "/var/tmp/mark")
		if err != nil || strings.TrimSpace(string(out)) != "kept" {
			t.Fatalf("after restart: %q %v", out, err)
		}
		if out, _ := runtime.Run(ctx, a, "ip", "-4", "-o", "addr", "show", "eth0"); !strings.Contains(string(out), a.Addr().String()) {
			t.Fatalf("address changed after restart: %s", out)
		}
	})

	if c, n := leftovers(t, cli, runID); c != 2 || n != 1 {
		t.Fatalf("before close: %d containers, %d networks", c, n)
	}
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	closed = true
	if c, n := leftovers(t, cli, runID); c != 0 || n != 0 {
		t.Fatalf("after close: %d containers, %d networks left", c, n)
	}
}

// TestConsoles: with either channel, an agent's console answers while its
// node is cut off from every network peer, reads EOF when the agent is
// killed, works again after a restart, and ends the agent when closed.
func TestConsoles(t *testing.T) {
	cli := testenv.Docker(t)
	img := testenv.Images(t, cli, images.RoleClient)[images.RoleClient]
	for _, control := range []string{docker.ControlSocket, docker.ControlAttach} {
		t.Run(control, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			runID := fmt.Sprintf("s%d", time.Now().UnixNano()%1e9)
			rt, err := docker.New(ctx, cli, docker.Options{RunID: runID, Control: control})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rt.Close(context.Background()) })
			if rt.Control() != control {
				t.Fatalf("control %s, want %s", rt.Control(), control)
			}
			n, err := rt.Start(ctx, runtime.NodeSpec{Name: "c1", Role: runtime.RoleClient, Image: img, Interactive: true,
				Cmd: []string{"/usr/local/bin/splitbrain", "agent"}, Caps: []string{runtime.CapNetAdmin}})
			if err != nil {
				t.Fatal(err)
			}
			insp, err := cli.ContainerInspect(ctx, n.(*docker.Node).ID())
			if err != nil {
				t.Fatal(err)
			}
			hc := insp.HostConfig
			if hc.Privileged || len(hc.CapAdd) != 1 || strings.TrimPrefix(hc.CapAdd[0], "CAP_") != runtime.CapNetAdmin || len(hc.PortBindings) != 0 {
				t.Fatalf("more than asked for: privileged %v, caps %v, ports %v", hc.Privileged, hc.CapAdd, hc.PortBindings)
			}
			switch control {
			case docker.ControlSocket:
				if len(hc.Binds) != 1 || !strings.HasSuffix(hc.Binds[0], ":/run/splitbrain-console") {
					t.Fatalf("binds %v: want only the console directory", hc.Binds)
				}
				fi, err := os.Stat(filepath.Dir(strings.Split(hc.Binds[0], ":")[0]))
				if err != nil || fi.Mode().Perm() != 0o700 {
					t.Fatalf("console directory not private to the harness's user: %v %v", fi.Mode(), err)
				}
			case docker.ControlAttach:
				if len(hc.Binds) != 0 {
					t.Fatalf("binds %v with an attached console", hc.Binds)
				}
			}
			ping := func(seq int) error {
				stdin, stdout := n.(runtime.Console).Stdio()
				if _, err := fmt.Fprintf(stdin, `{"type":"ping","seq":%d}`+"\n", seq); err != nil {
					return err
				}
				sc := bufio.NewScanner(stdout)
				if !sc.Scan() {
					return fmt.Errorf("no pong: %v", sc.Err())
				}
				if want := fmt.Sprintf(`"seq":%d`, seq); !strings.Contains(sc.Text(), `"pong"`) || !strings.Contains(sc.Text(), want) {
					return fmt.Errorf("answer %q", sc.Text())
				}
				return nil
			}
			for _, rule := range [][]string{{"INPUT"}, {"OUTPUT"}} {
				if _, err := runtime.Run(ctx, n, "iptables", "-P", rule[0], "DROP"); err != nil {
					t.Fatal(err)
				}
			}
			if err := ping(1); err != nil {
				t.Fatalf("console of a node cut off from the network: %v", err)
			}
			if err := n.Signal(ctx, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_, stdout := n.(runtime.Console).Stdio()
			eof := make(chan error, 1)
			go func() { _, err := io.Copy(io.Discard, stdout); eof <- err }()
			select {
			case <-eof:
			case <-time.After(30 * time.Second):
				t.Fatal("console still open after the agent was killed")
			}
			if err := n.(runtime.Restarter).Restart(ctx); err != nil {
				t.Fatal(err)
			}
			if err := ping(2); err != nil {
				t.Fatalf("console after restart: %v", err)
			}
			stdin, _ := n.(runtime.Console).Stdio()
			stdin.Close()
			if err := runtime.Poll(ctx, "the agent to exit when its console closed", 30*time.Second, 100*time.Millisecond, func(ctx context.Context) error {
				insp, err := cli.ContainerInspect(ctx, n.(*docker.Node).ID())
				if err != nil {
					return err
				}
				if insp.State.Running {
					return errors.New("still running")
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestCleanRemovesLeftovers(t *testing.T) {
	cli := testenv.Docker(t)
	img := testenv.Images(t, cli, images.RoleClient)[images.RoleClient]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runID := fmt.Sprintf("k%d", time.Now().UnixNano()%1e9)
	rt, err := docker.New(ctx, cli, docker.Options{RunID: runID, Keep: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Start(ctx, runtime.NodeSpec{Name: "a", Role: "test", Image: img, Cmd: []string{"sleep", "infinity"}}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(ctx); err != nil { // Keep: leaves everything
		t.Fatal(err)
	}
	if c, n := leftovers(t, cli, runID); c != 1 || n != 1 {
		t.Fatalf("kept: %d containers, %d networks", c, n)
	}
	c, n, err := docker.Clean(ctx, cli, runID)
	if err != nil || c != 1 || n != 1 {
		t.Fatalf("clean removed %d containers, %d networks: %v", c, n, err)
	}
	if c, n := leftovers(t, cli, runID); c != 0 || n != 0 {
		t.Fatalf("after clean: %d containers, %d networks", c, n)
	}
}

// TestCloseSweepsUnknownContainers: a container of the run that the
// runtime never learnt of (the engine created it but the create call's
// reply was lost) is removed at Close, found by the run's label.
func TestCloseSweepsUnknownContainers(t *testing.T) {
	cli := testenv.Docker(t)
	img := testenv.Images(t, cli, images.RoleClient)[images.RoleClient]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runID := fmt.Sprintf("u%d", time.Now().UnixNano()%1e9)
	rt, err := docker.New(ctx, cli, docker.Options{RunID: runID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { docker.Clean(context.Background(), cli, runID) })
	if _, err := rt.Start(ctx, runtime.NodeSpec{Name: "a", Role: "test", Image: img, Cmd: []string{"sleep", "infinity"}}); err != nil {
		t.Fatal(err)
	}
	// Behind the runtime's back, as the engine would after a lost reply.
	if _, err := cli.ContainerCreate(ctx, &container.Config{Image: img, Cmd: []string{"sleep", "infinity"},
		Labels: map[string]string{runtime.LabelRun: runID}}, nil, nil, nil, "sb-"+runID+"-orphan"); err != nil {
		t.Fatal(err)
	}
	if c, _ := leftovers(t, cli, runID); c != 2 {
		t.Fatalf("before close: %d containers, want 2", c)
	}
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if c, n := leftovers(t, cli, runID); c != 0 || n != 0 {
		t.Fatalf("after close: %d containers, %d networks left", c, n)
	}
}

func TestMissingImageIsClear(t *testing.T) {
	cli := testenv.Docker(t)
	ctx := context.Background()
	rt, err := docker.New(ctx, cli, docker.Options{RunID: fmt.Sprintf("m%d", time.Now().UnixNano()%1e9)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	_, err = rt.Start(ctx, runtime.NodeSpec{Name: "a", Role: "test", Image: "splitbrain-nothing:0", Cmd: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "splitbrain images build") {
		t.Fatalf("missing image: %v", err)
	}
}

// TestGroupFreeze: a node started with Group is frozen whole by SIGSTOP —
// a child of its main process stops ticking too — and thawed by SIGCONT,
// which checks that it runs again.
func TestGroupFreeze(t *testing.T) {
	cli := testenv.Docker(t)
	img := testenv.Images(t, cli, images.RoleClient)[images.RoleClient]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runID := fmt.Sprintf("t%d", time.Now().UnixNano()%1e9)
	rt, err := docker.New(ctx, cli, docker.Options{RunID: runID, Control: docker.ControlAttach})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	// The main process (PID 1) starts a child that prints a line every
	// 20 ms: the adapter of a client agent.
	n, err := rt.Start(ctx, runtime.NodeSpec{Name: "g", Role: "test", Image: img, Group: true,
		Cmd: []string{"sh", "-c", "(while :; do echo tick; sleep 0.02; done) & exec sleep infinity"}})
	if err != nil {
		t.Fatal(err)
	}
	ticks := func() int {
		var b strings.Builder
		if err := n.Logs(ctx, &b); err != nil {
			t.Fatal(err)
		}
		return strings.Count(b.String(), "tick")
	}
	time.Sleep(300 * time.Millisecond)
	if err := n.Signal(ctx, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Lines written just before the freeze reach the engine's log a little
	// later, later still on a loaded machine: wait until two reads 300 ms
	// apart agree (a running child would add about 15 lines meanwhile).
	frozen := ticks()
	for settle := time.Now().Add(5 * time.Second); ; {
		time.Sleep(300 * time.Millisecond)
		got := ticks()
		if got == frozen {
			break
		}
		if time.Now().After(settle) {
			t.Fatalf("the child kept ticking for 5 s after its node was frozen (%d ticks in the last 300 ms)", got-frozen)
		}
		frozen = got
	}
	time.Sleep(500 * time.Millisecond)
	if got := ticks(); got != frozen {
		t.Fatalf("the child ticked %d times while its node was frozen", got-frozen)
	}
	if _, err := n.Exec(ctx, []string{"true"}); err == nil {
		t.Log("exec into a frozen container succeeded (the engine allows it)")
	}
	if err := n.Signal(ctx, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if got := ticks(); got <= frozen {
		t.Fatalf("the child did not tick again after the thaw (%d ticks)", got)
	}
	if st := procState(t, ctx, n); strings.Contains(st, "stopped") {
		t.Fatalf("main process after thaw: %s", st)
	}
	// A second SIGCONT (the harness resumes every node at the end) is
	// harmless.
	if err := n.Signal(ctx, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// TestNetworksSideBySide creates the networks of several runs at once in
// one process, with run IDs chosen so that each would try the same /24
// first: every run gets its own range, and Close removes them all.
func TestNetworksSideBySide(t *testing.T) {
	cli := testenv.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const runs = 4
	base := fmt.Sprintf("t%d", time.Now().UnixNano()%1e9)
	firstTry := func(id string) uint32 { h := fnv.New32a(); h.Write([]byte(id)); return h.Sum32() % 256 }
	var ids []string
	for i := 0; len(ids) < runs; i++ {
		id := fmt.Sprintf("%s-%d", base, i)
		if len(ids) == 0 || firstTry(id) == firstTry(ids[0]) {
			ids = append(ids, id)
		}
	}
	rts := make([]*docker.Runtime, runs)
	errs := make([]error, runs)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rts[i], errs[i] = docker.New(ctx, cli, docker.Options{RunID: id, Control: docker.ControlAttach})
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for i, rt := range rts {
			if rt != nil {
				if err := rt.Close(context.Background()); err != nil {
					t.Error(err)
				}
			}
			if c, n := leftovers(t, cli, ids[i]); c+n != 0 {
				t.Errorf("run %s left %d containers and %d networks", ids[i], c, n)
			}
		}
	})
	seen := map[netip.Prefix]string{}
	for i, rt := range rts {
		if errs[i] != nil {
			t.Fatalf("run %s: %v", ids[i], errs[i])
		}
		if other, dup := seen[rt.Subnet()]; dup {
			t.Errorf("runs %s and %s share %s", other, ids[i], rt.Subnet())
		}
		seen[rt.Subnet()] = ids[i]
	}
}

// TestContract runs the runtime contract over containers of the client
// image (consoles attached: TestConsoles covers sockets).
func TestContract(t *testing.T) {
	cli := testenv.Docker(t)
	img := testenv.Images(t, cli, images.RoleClient)[images.RoleClient]
	runtimetest.Run(t, runtimetest.Env{
		New: func(t *testing.T) runtime.Runtime {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			runID := fmt.Sprintf("t%d", time.Now().UnixNano()%1e9)
			rt, err := docker.New(ctx, cli, docker.Options{RunID: runID, Control: docker.ControlAttach})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if c, n := leftovers(t, cli, runID); c+n != 0 {
					t.Errorf("run %s left %d containers and %d networks", runID, c, n)
				}
			})
			return rt
		},
		Spec: func(name string, p runtimetest.Program) runtime.NodeSpec {
			if p == runtimetest.Echo {
				return runtime.NodeSpec{Name: name, Role: "echo", Image: img, Cmd: []string{"cat"}, Interactive: true}
			}
			return runtime.NodeSpec{Name: name, Role: "idle", Image: img, Cmd: []string{"sleep", "infinity"}}
		},
		Shell:   true,
		Network: true,
		Timeout: time.Minute,
	})
}

// TestKeepForNextRun: nodes a run keeps stay, with their network, when
// its runtime closes; the next run's runtime takes them over (the same
// nodes, its own nodes on their network under its own label, the names of
// the first run's removed nodes at their addresses) and removes all at its
// Close. A node's log is cut between the runs with no line lost or
// repeated; kept nodes nobody takes over go at Kept.Close.
func TestKeepForNextRun(t *testing.T) {
	cli := testenv.Docker(t)
	img := testenv.Images(t, cli, images.RoleClient)[images.RoleClient]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	idA := fmt.Sprintf("ka%d", time.Now().UnixNano()%1e9)
	idB := "kb" + idA[2:]
	t.Cleanup(func() {
		docker.Clean(context.Background(), cli, idA)
		docker.Clean(context.Background(), cli, idB)
	})
	a, err := docker.New(ctx, cli, docker.Options{RunID: idA})
	if err != nil {
		t.Fatal(err)
	}
	counter := []string{"sh", "-c", "i=0; while :; do echo line $i; i=$((i+1)); sleep 0.05; done"}
	n1, err := a.Start(ctx, runtime.NodeSpec{Name: "n1", Role: "test", Image: img, Cmd: counter})
	if err != nil {
		t.Fatal(err)
	}
	c1, err := a.Start(ctx, runtime.NodeSpec{Name: "c1", Role: "test", Image: img, Cmd: []string{"cat"}, Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Keep([]runtime.Node{n1, c1}); err == nil {
		t.Fatal("an interactive node was kept")
	}
	kept, err := a.Keep([]runtime.Node{n1})
	if err != nil {
		t.Fatal(err)
	}
	// Lines on both sides of the cut, however slow the engine.
	logged := func(since time.Time) {
		t.Helper()
		err := runtime.Poll(ctx, "the counter's lines", time.Minute, 100*time.Millisecond, func(ctx context.Context) error {
			var b bytes.Buffer
			if err := n1.(runtime.WindowLogger).LogsBetween(ctx, &b, since, time.Time{}); err != nil || !strings.Contains(b.String(), "line ") {
				return fmt.Errorf("no line yet (%v)", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	logged(time.Time{})
	cut := time.Now()
	var first bytes.Buffer
	if err := n1.(runtime.WindowLogger).LogsBetween(ctx, &first, time.Time{}, cut); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if c, n := leftovers(t, cli, idA); c != 1 || n != 1 {
		t.Fatalf("after the first run's close: %d containers, %d networks of it, want n1 and the network", c, n)
	}

	rt, err := kept.Next(idB, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := rt.(*docker.Runtime)
	if nodes := b.Nodes(); len(nodes) != 1 || nodes[0] != n1 || b.Network() != a.Network() {
		t.Fatalf("the next runtime has %v on %s, want n1 on %s", nodes, b.Network(), a.Network())
	}
	c1b, err := b.Start(ctx, runtime.NodeSpec{Name: "c1", Role: "test", Image: img, Cmd: []string{"cat"}, Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	if c1b.Addr() != c1.Addr() {
		t.Fatalf("c1 of the next run at %v, want %v", c1b.Addr(), c1.Addr())
	}
	if c, n := leftovers(t, cli, idB); c != 1 || n != 0 {
		t.Fatalf("the next run's label: %d containers, %d networks, want its c1 only", c, n)
	}
	if _, err := runtime.Run(ctx, c1b, "true"); err != nil {
		t.Fatal(err)
	}
	logged(cut)
	var second bytes.Buffer
	if err := n1.(runtime.WindowLogger).LogsBetween(ctx, &second, cut, time.Time{}); err != nil {
		t.Fatal(err)
	}
	numbers := func(s string) []int {
		var out []int
		for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
			var i int
			if _, err := fmt.Sscanf(l[strings.Index(l, "line "):], "line %d", &i); err == nil {
				out = append(out, i)
			}
		}
		return out
	}
	x, y := numbers(first.String()), numbers(second.String())
	if len(x) == 0 || len(y) == 0 || x[0] != 0 || y[0] != x[len(x)-1]+1 {
		t.Fatalf("the log cut at %v: %v, then %v", cut, x, y)
	}
	if err := kept.Close(ctx); err != nil { // taken over: nothing to do
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{idA, idB} {
		if c, n := leftovers(t, cli, id); c != 0 || n != 0 {
			t.Fatalf("after the next run's close: %d containers, %d networks of %s", c, n, id)
		}
	}

	// Kept, never taken over: Kept.Close removes them.
	a2, err := docker.New(ctx, cli, docker.Options{RunID: idA})
	if err != nil {
		t.Fatal(err)
	}
	n2, err := a2.Start(ctx, runtime.NodeSpec{Name: "n1", Role: "test", Image: img, Cmd: []string{"sleep", "infinity"}})
	if err != nil {
		t.Fatal(err)
	}
	kept2, err := a2.Keep([]runtime.Node{n2})
	if err != nil {
		t.Fatal(err)
	}
	if err := a2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := kept2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if c, n := leftovers(t, cli, idA); c != 0 || n != 0 {
		t.Fatalf("after Kept.Close: %d containers, %d networks", c, n)
	}
}
