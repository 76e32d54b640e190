package ssh

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh/agent"

	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/runtimetest"
)

// fixture is a runtime over one or more test servers, its directories in
// a temporary directory of this machine.
type fixture struct {
	srv     []*testServer
	rt      *Runtime
	root    string
	keyFile string
	log     *bytes.Buffer
}

const daemonScript = `#!/bin/sh
echo "started $*"
echo "cwd $(pwd)"
trap 'echo "got TERM"; exit 0' TERM
while :; do sleep 0.05; done
`

// echoAgent echoes its stdin, prefixed, and says bye on stderr at EOF.
const echoAgent = `#!/bin/sh
while IFS= read -r l; do echo "echo:$l"; done
echo bye >&2
`

func writeExec(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func newFixture(t *testing.T, servers int, mutate func(*Options)) *fixture {
	t.Helper()
	signer, priv := newKey(t)
	f := &fixture{root: t.TempDir(), keyFile: writeKey(t, priv, ""), log: &bytes.Buffer{}}
	var known []string
	var hosts []Host
	for i := range servers {
		s := startServer(t, signer.PublicKey(), "")
		f.srv = append(f.srv, s)
		known = append(known, s.knownHosts(t, s.hostKey.PublicKey()))
		hosts = append(hosts, Host{Name: "n" + strconv.Itoa(i+1), Address: "127.0.0.1", Port: s.port()})
	}
	opts := Options{
		RunID: "run1", Hosts: hosts, Auth: Auth{Key: f.keyFile}, KnownHosts: known,
		RunRoot: filepath.Join(f.root, "var/lib/splitbrain"), BinRoot: filepath.Join(f.root, "usr/local/lib/splitbrain"),
		Binaries: []Binary{
			{Name: "daemon", Local: writeExec(t, daemonScript), Dest: "/usr/local/bin/daemon"},
			{Name: "agent", Local: writeExec(t, echoAgent), Dest: "/usr/local/bin/agent"},
		},
		StateDirs: []string{"/var/lib/thing"},
		Log:       slog.New(slog.NewTextHandler(f.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mutate != nil {
		mutate(&opts)
	}
	rt, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.rt = rt
	t.Cleanup(func() { rt.Close(context.Background()) })
	return f
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "gone"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "State:"); ok {
			v = strings.TrimSpace(v)
			if strings.HasPrefix(v, "Z") {
				return "gone"
			}
			return v[:1]
		}
	}
	return "?"
}

func waitState(t *testing.T, pid int, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for procState(t, pid) != want {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: state %s, want %s", pid, procState(t, pid), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func logsOf(t *testing.T, n runtime.Node) string {
	t.Helper()
	var b bytes.Buffer
	if err := n.Logs(ctxT(t), &b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestDaemonLifecycle(t *testing.T) {
	f := newFixture(t, 1, nil)
	ctx := ctxT(t)
	a, err := f.rt.Reserve("n1")
	if err != nil || a.String() != "127.0.0.1" {
		t.Fatalf("Reserve = %v, %v", a, err)
	}
	node, err := f.rt.Start(ctx, runtime.NodeSpec{
		Name: "n1", Role: "thing",
		Cmd: []string{"/usr/local/bin/daemon", "--data-dir", "/var/lib/thing", "--x=/var/lib/thing/sub", "it's $HOME"},
		Env: []string{"GREETING=hello world", "PRELOAD=/usr/local/bin/agent"},
	})
	if err != nil {
		t.Fatal(err)
	}
	n := node.(*Node)
	pid := n.Pid()
	if procState(t, pid) == "gone" {
		t.Fatalf("daemon pid %d not running", pid)
	}
	wantDir := filepath.Join(f.root, "var/lib/splitbrain/run1/n1")
	wantCmd := []string{"env", "GREETING=hello world", "PRELOAD=" + filepath.Join(f.root, "usr/local/lib/splitbrain/run1/agent"), filepath.Join(f.root, "usr/local/lib/splitbrain/run1/daemon"),
		"--data-dir", wantDir + "/root/var/lib/thing", "--x=" + wantDir + "/root/var/lib/thing/sub", "it's $HOME"}
	if got := n.Command(); strings.Join(got, "|") != strings.Join(wantCmd, "|") {
		t.Fatalf("command %q\nwant %q", got, wantCmd)
	}
	time.Sleep(100 * time.Millisecond)
	logs := logsOf(t, n)
	if !strings.Contains(logs, "started --data-dir "+wantDir+"/root/var/lib/thing --x="+wantDir+"/root/var/lib/thing/sub it's $HOME") || !strings.Contains(logs, "cwd "+wantDir) {
		t.Fatalf("logs: %q", logs)
	}
	// The parent of the state directory exists, the directory itself is the program's to make.
	if st, err := os.Stat(wantDir + "/root/var/lib"); err != nil || !st.IsDir() {
		t.Fatalf("state parent: %v", err)
	}

	// Exec: argv quoted, binaries rewritten, non-zero exits reported.
	out, err := runtime.Run(ctx, n, "printf", "%s|", "a b", "$HOME", "`id`", "")
	if err != nil || string(out) != "a b|$HOME|`id`||" {
		t.Fatalf("exec = %q, %v", out, err)
	}
	res, err := n.Exec(ctx, []string{"sh", "-c", "echo oops >&2; exit 7"})
	if !errors.Is(err, runtime.ErrExit) || res.ExitCode != 7 || string(res.Stderr) != "oops\n" {
		t.Fatalf("exit: %+v %v", res, err)
	}
	out, err = runtime.Run(ctx, n, "cat", "/usr/local/bin/daemon")
	if err != nil || !strings.Contains(string(out), "trap") {
		t.Fatalf("binary path not rewritten: %q %v", out, err)
	}

	// Signals reach the daemon itself.
	if err := n.Signal(ctx, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, "T")
	if err := n.Signal(ctx, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, "S")

	// Kill, restart: a new process, the files kept.
	if _, err := runtime.Run(ctx, n, "sh", "-c", "echo kept > \"$1\"/file", "sh", wantDir); err != nil {
		t.Fatal(err)
	}
	if err := n.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := n.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if n.Pid() == pid || procState(t, n.Pid()) == "gone" {
		t.Fatalf("restart: pid %d → %d (%s)", pid, n.Pid(), procState(t, n.Pid()))
	}
	if b, err := os.ReadFile(wantDir + "/file"); err != nil || string(b) != "kept\n" {
		t.Fatalf("files not kept: %q %v", b, err)
	}
	if strings.Count(logsOf(t, n), "started") != 2 {
		t.Fatalf("log not appended: %q", logsOf(t, n))
	}

	// Upload: content, mode, no temporary file left.
	dst := filepath.Join(f.root, "up/dir/file.txt")
	if err := n.Upload(ctx, strings.NewReader("payload"), dst, 0o640); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(dst); err != nil || string(b) != "payload" {
		t.Fatalf("upload: %q %v", b, err)
	}
	if st, _ := os.Stat(dst); st.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v", st.Mode())
	}
	if m, _ := filepath.Glob(dst + ".upload.*"); len(m) != 0 {
		t.Fatalf("temporary files left: %v", m)
	}

	// Close kills by pid file, heals the firewall, removes the directories.
	last := n.Pid()
	if err := f.rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if procState(t, last) != "gone" {
		t.Fatalf("daemon %d survived Close", last)
	}
	for _, d := range []string{"var/lib/splitbrain", "usr/local/lib/splitbrain"} {
		if _, err := os.Stat(filepath.Join(f.root, d)); !os.IsNotExist(err) {
			t.Fatalf("%s left: %v", d, err)
		}
	}
	if log := f.srv[0].stubLog(); !strings.Contains(log, "iptables -w -X SPLITBRAIN") {
		t.Fatalf("chain not removed: %q", log)
	}
}

func TestStartErrors(t *testing.T) {
	f := newFixture(t, 1, nil)
	ctx := ctxT(t)
	_, err := f.rt.Start(ctx, runtime.NodeSpec{Name: "n1", Role: "redis", Cmd: []string{"env", "LD_PRELOAD=/nope.so", "redis-server-not-here", "--port", "1"}})
	if err == nil || !strings.Contains(err.Error(), "redis-server-not-here is not installed on host n1") {
		t.Fatalf("missing program: %v", err)
	}
	_, err = f.rt.Start(ctx, runtime.NodeSpec{Name: "c1", Role: "x", Cmd: []string{"sh", "-c", "echo dying words; exit 1"}})
	if err == nil || !strings.Contains(err.Error(), "exited at once") || !strings.Contains(err.Error(), "dying words") {
		t.Fatalf("daemon dying at once: %v", err)
	}
	if _, err := f.rt.Reserve("n2"); err == nil || !strings.Contains(err.Error(), `no host for node "n2"`) {
		t.Fatalf("placement: %v", err)
	}
}

func TestConsole(t *testing.T) {
	f := newFixture(t, 1, nil)
	ctx := ctxT(t)
	node, err := f.rt.Start(ctx, runtime.NodeSpec{Name: "c1", Role: runtime.RoleClient, Cmd: []string{"/usr/local/bin/agent"}, Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	n := node.(*Node)
	converse := func() {
		t.Helper()
		stdin, stdout := n.Stdio()
		if _, err := stdin.Write([]byte("hello\n")); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || line != "echo:hello\n" {
			t.Fatalf("console read %q, %v", line, err)
		}
	}
	converse()
	pid := n.Pid()
	// The recorded pid is the agent's own: SIGSTOP freezes it.
	if err := n.Signal(ctx, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, pid, "T")
	if err := n.Signal(ctx, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Kill and restart: a new session, a new console.
	if err := n.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := n.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if n.Pid() == pid {
		t.Fatal("same pid after restart")
	}
	converse()
	stdin, stdout := n.Stdio()
	stdin.Close() // EOF: the agent ends
	if rest, _ := bufio.NewReader(stdout).ReadString('\n'); rest != "" {
		t.Fatalf("output after EOF: %q", rest)
	}
	waitState(t, n.Pid(), "gone")
	if logs := logsOf(t, n); !strings.Contains(logs, "bye") {
		t.Fatalf("stderr not in the log: %q", logs)
	}
}

func TestExecTimeout(t *testing.T) {
	f := newFixture(t, 1, nil)
	node, err := f.rt.Start(ctxT(t), runtime.NodeSpec{Name: "n1", Role: "x", Cmd: []string{"/usr/local/bin/daemon"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = node.Exec(ctx, []string{"sleep", "10"})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 3*time.Second {
		t.Fatalf("exec with a deadline: %v after %v", err, time.Since(start))
	}
	// The connection is still good.
	if _, err := runtime.Run(ctxT(t), node, "true"); err != nil {
		t.Fatal(err)
	}
}

func TestHostKeys(t *testing.T) {
	signer, priv := newKey(t)
	keyFile := writeKey(t, priv, "")
	other, _ := newKey(t)
	tests := []struct {
		name     string
		known    func(s *testServer) []string
		insecure bool
		wantErr  []string
		changed  bool
	}{
		{name: "changed key", known: func(s *testServer) []string { return []string{s.knownHosts(t, other.PublicKey())} },
			wantErr: []string{"host key CHANGED", "ssh-keygen -R", "someone may be intercepting"}, changed: true},
		{name: "unknown host", known: func(s *testServer) []string {
			p := filepath.Join(t.TempDir(), "known_hosts")
			os.WriteFile(p, []byte("# empty\n"), 0o600)
			return []string{p}
		}, wantErr: []string{"is not in", "ssh-keyscan -p", "--known-hosts FILE"}},
		{name: "missing known_hosts file", known: func(*testServer) []string { return []string{filepath.Join(t.TempDir(), "nope")} },
			wantErr: []string{"known_hosts file", "no such file", "--known-hosts FILE"}},
		{name: "insecure accepts anything", known: func(*testServer) []string { return nil }, insecure: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, signer.PublicKey(), "")
			var logb bytes.Buffer
			_, err := New(ctxT(t), Options{
				RunID: "r", Hosts: []Host{{Name: "h", Address: "127.0.0.1", Port: s.port()}},
				Auth: Auth{Key: keyFile}, KnownHosts: tt.known(s), InsecureIgnoreHostKeys: tt.insecure,
				RunRoot: filepath.Join(t.TempDir(), "run"), BinRoot: filepath.Join(t.TempDir(), "bin"),
				Log: slog.New(slog.NewTextHandler(&logb, nil)),
			})
			if tt.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(logb.String(), "INSECURE: host keys are NOT verified") {
					t.Fatalf("no loud warning: %q", logb.String())
				}
				return
			}
			if err == nil {
				t.Fatal("connected")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
			var hk *HostKeyError
			if errors.As(err, &hk) != (tt.name != "missing known_hosts file") || (hk != nil && hk.Changed() != tt.changed) {
				t.Errorf("error type %T, changed %v", err, tt.changed)
			}
			if cmds := s.commands(); len(cmds) != 0 {
				t.Errorf("commands ran on a host that failed verification: %q", cmds)
			}
		})
	}
}

func TestAuthMethods(t *testing.T) {
	signer, priv := newKey(t)
	keyFile := writeKey(t, priv, "")
	locked := writeKey(t, priv, "secret")
	_, otherPriv := newKey(t)
	otherKey := writeKey(t, otherPriv, "")

	// An agent holding the key, on a unix socket.
	keyring := agent.NewKeyring()
	if err := keyring.Add(agent.AddedKey{PrivateKey: priv}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go agent.ServeAgent(keyring, c)
		}
	}()
	t.Setenv("SSH_AUTH_SOCK", sock)
	t.Setenv("SB_TEST_PW", "hunter2")

	tests := []struct {
		name    string
		auth    Auth
		user    string
		wantErr string
	}{
		{name: "key file", auth: Auth{Key: keyFile}},
		{name: "agent", auth: Auth{Agent: true}},
		{name: "password from env", auth: Auth{PasswordEnv: "SB_TEST_PW"}},
		{name: "wrong key then password", auth: Auth{Key: otherKey, Password: "hunter2"}},
		{name: "wrong key", auth: Auth{Key: otherKey}, wantErr: "authentication as root failed"},
		{name: "passphrase-protected key", auth: Auth{Key: locked}, wantErr: "load it into ssh-agent (ssh-add"},
		{name: "unset password variable", auth: Auth{PasswordEnv: "SB_TEST_NOPE"}, wantErr: "SB_TEST_NOPE is not set"},
		{name: "sudo for another user", auth: Auth{Key: keyFile}, user: "alice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, signer.PublicKey(), "hunter2")
			root := t.TempDir()
			rt, err := New(ctxT(t), Options{
				RunID: "r", Hosts: []Host{{Name: "h", Address: "127.0.0.1", Port: s.port(), User: tt.user, Auth: &tt.auth}},
				KnownHosts: []string{s.knownHosts(t, s.hostKey.PublicKey())},
				RunRoot:    filepath.Join(root, "run"), BinRoot: filepath.Join(root, "bin"),
				Binaries: []Binary{{Name: "agent", Local: writeExec(t, echoAgent), Dest: "/usr/local/bin/agent"}},
			})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close(context.Background())
			n, err := rt.Start(ctxT(t), runtime.NodeSpec{Name: "c1", Role: "client", Cmd: []string{"/usr/local/bin/agent"}, Interactive: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := runtime.Run(ctxT(t), n, "true"); err != nil {
				t.Fatal(err)
			}
			if err := rt.Close(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if tt.user == "alice" {
				log := s.stubLog()
				if !strings.Contains(log, "sudo true") || !strings.Contains(log, "sudo sh") {
					t.Fatalf("privileged commands not run through sudo: %q", log)
				}
				// The agent itself runs as the login user, without sudo.
				for _, c := range s.commands() {
					if strings.Contains(c, "exec \"$@\" 2>>") && strings.HasPrefix(c, "sudo") {
						t.Fatalf("console run through sudo: %q", c)
					}
				}
			}
		})
	}
}

func TestConnectionReuse(t *testing.T) {
	f := newFixture(t, 2, nil)
	ctx := ctxT(t)
	var nodes []runtime.Node
	for _, name := range []string{"n1", "n2", "store", "c1", "c2", "c3"} {
		n, err := f.rt.Start(ctx, runtime.NodeSpec{Name: name, Role: "x", Cmd: []string{"/usr/local/bin/daemon"}})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	hosts := map[string]string{}
	for _, n := range nodes {
		hosts[n.Name()] = n.(*Node).Host()
		for range 3 {
			if _, err := runtime.Run(ctx, n, "true"); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := map[string]string{"n1": "n1", "n2": "n2", "store": "n1", "c1": "n2", "c2": "n1", "c3": "n2"}
	for k, v := range want {
		if hosts[k] != v {
			t.Fatalf("placement %v, want %v", hosts, want)
		}
	}
	for i, s := range f.srv {
		s.mu.Lock()
		users := len(s.users)
		s.mu.Unlock()
		if users != 1 {
			t.Fatalf("server %d saw %d connections, want 1", i, users)
		}
	}
}

// TestClean: what a crashed control node left is found by its pid files
// and removed.
func TestClean(t *testing.T) {
	for _, runID := range []string{"run1", ""} {
		t.Run("run "+runID, func(t *testing.T) {
			var opts Options
			f := newFixture(t, 1, func(o *Options) { opts = *o })
			ctx := ctxT(t)
			var pids []int
			for _, spec := range []runtime.NodeSpec{
				{Name: "n1", Role: "x", Cmd: []string{"/usr/local/bin/daemon"}},
				{Name: "c1", Role: runtime.RoleClient, Cmd: []string{"/usr/local/bin/agent"}, Interactive: true},
			} {
				n, err := f.rt.Start(ctx, spec)
				if err != nil {
					t.Fatal(err)
				}
				pids = append(pids, n.(*Node).Pid())
			}
			// The control node "crashes": its connections go, the daemon stays
			// (the agent may see EOF and end by itself).
			f.rt.closeConns()
			if procState(t, pids[0]) == "gone" {
				t.Fatalf("daemon %d gone before Clean", pids[0])
			}
			if err := Clean(ctx, opts, runID); err != nil {
				t.Fatal(err)
			}
			for _, p := range pids {
				waitState(t, p, "gone")
			}
			for _, d := range []string{"var/lib/splitbrain", "usr/local/lib/splitbrain"} {
				if _, err := os.Stat(filepath.Join(f.root, d)); !os.IsNotExist(err) {
					t.Fatalf("%s left: %v", d, err)
				}
			}
		})
	}
}

// TestContract runs the runtime contract over a test server on this
// machine: the nodes are real processes, all on one host.
func TestContract(t *testing.T) {
	runtimetest.Run(t, runtimetest.Env{
		New: func(t *testing.T) runtime.Runtime {
			return newFixture(t, 1, func(o *Options) { o.Hosts[0].Nodes = runtimetest.Names }).rt
		},
		Spec: func(name string, p runtimetest.Program) runtime.NodeSpec {
			if p == runtimetest.Echo {
				return runtime.NodeSpec{Name: name, Role: "echo", Cmd: []string{"cat"}, Interactive: true}
			}
			return runtime.NodeSpec{Name: name, Role: "idle", Cmd: []string{"sleep", "600"}}
		},
		SharedAddrs: true,
		Shell:       true,
	})
}
