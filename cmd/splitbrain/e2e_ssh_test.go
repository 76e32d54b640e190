package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/docker"
	"github.com/splitbrain/splitbrain/runtime/images"
	sshrt "github.com/splitbrain/splitbrain/runtime/ssh"
)

// sshLab is three "hosts" for the SSH runtime: containers of the client
// image whose main process is sshd, with a host key and an authorized key
// made by the test. Docker only creates them; the runs under test reach
// them over SSH alone.
type sshLab struct {
	hosts    []sshrt.Host
	keys     []ssh.PublicKey // each host's key
	keyFile  string          // the client's private key
	signer   ssh.Signer
	known    string // a known_hosts file vouching for every host
	dockerRT *docker.Runtime
}

// sshdPrelude writes the injected keys and execs sshd as the main process.
const sshdPrelude = `set -e
umask 077
mkdir -p /run/sshd /root/.ssh /etc/ssh/splitbrain-test
printf '%s\n' "$SB_HOST_KEY" > /etc/ssh/splitbrain-test/host_key
printf '%s\n' "$SB_AUTHORIZED_KEY" > /root/.ssh/authorized_keys
unset SB_HOST_KEY SB_AUTHORIZED_KEY
exec /usr/sbin/sshd -D -e -h /etc/ssh/splitbrain-test/host_key -o UsePAM=no -o PasswordAuthentication=no -o PermitRootLogin=prohibit-password`

func newEd25519(t *testing.T) (ed25519.PrivateKey, ssh.Signer) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return priv, s
}

func pemKey(t *testing.T, priv ed25519.PrivateKey) []byte {
	t.Helper()
	blk, err := ssh.MarshalPrivateKey(priv, "splitbrain-test")
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(blk)
}

func startSSHLab(t *testing.T, n int) *sshLab {
	t.Helper()
	cli := testenv.Docker(t)
	img := testenv.Images(t, cli, images.RoleClient)[images.RoleClient]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clientPriv, clientSigner := newEd25519(t)
	lab := &sshLab{keyFile: filepath.Join(t.TempDir(), "id_ed25519"), signer: clientSigner}
	if err := os.WriteFile(lab.keyFile, pemKey(t, clientPriv), 0o600); err != nil {
		t.Fatal(err)
	}
	id := make([]byte, 2)
	rand.Read(id)
	rt, err := docker.New(ctx, cli, docker.Options{RunID: "sshlab-" + hex.EncodeToString(id)})
	if err != nil {
		t.Fatal(err)
	}
	lab.dockerRT = rt
	t.Cleanup(func() { rt.Close(context.Background()) })
	authorized := string(ssh.MarshalAuthorizedKey(clientSigner.PublicKey()))
	var known strings.Builder
	for i := range n {
		hostPriv, hostSigner := newEd25519(t)
		node, err := rt.Start(ctx, runtime.NodeSpec{
			Name: fmt.Sprintf("host%d", i+1), Role: "sshhost", Image: img,
			Cmd:  []string{"sh", "-c", sshdPrelude},
			Env:  []string{"SB_HOST_KEY=" + string(pemKey(t, hostPriv)), "SB_AUTHORIZED_KEY=" + authorized},
			Caps: []string{runtime.CapNetAdmin},
		})
		if err != nil {
			t.Fatal(err)
		}
		addr := node.Addr().String()
		lab.hosts = append(lab.hosts, sshrt.Host{Name: fmt.Sprintf("n%d", i+1), Address: addr, Port: 22, User: "root"})
		lab.keys = append(lab.keys, hostSigner.PublicKey())
		known.WriteString(knownhosts.Line([]string{addr}, hostSigner.PublicKey()) + "\n")
	}
	lab.known = filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(lab.known, []byte(known.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, h := range lab.hosts {
		lab.waitSSH(t, h)
	}
	return lab
}

// options are runtime options for the lab: key auth, host keys verified.
func (l *sshLab) options() sshrt.Options {
	return sshrt.Options{Hosts: l.hosts, Auth: sshrt.Auth{Key: l.keyFile}, KnownHosts: []string{l.known}}
}

// dial connects to h with the lab's key, verifying its host key.
func (l *sshLab) dial(h sshrt.Host) (*ssh.Client, error) {
	cb, err := knownhosts.New(l.known)
	if err != nil {
		return nil, err
	}
	return ssh.Dial("tcp", net.JoinHostPort(h.Address, "22"), &ssh.ClientConfig{
		User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(l.signer)}, HostKeyCallback: cb, Timeout: 5 * time.Second,
	})
}

func (l *sshLab) waitSSH(t *testing.T, h sshrt.Host) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := l.dial(h)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sshd on %s never answered: %v", h.Address, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// run runs cmd on h over SSH and returns its output.
func (l *sshLab) run(t *testing.T, h sshrt.Host, cmd string) string {
	t.Helper()
	c, err := l.dial(h)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.CombinedOutput(cmd)
	if err != nil {
		t.Fatalf("%s on %s: %v: %s", cmd, h.Name, err, out)
	}
	return string(out)
}

// assertClean checks, over SSH, that no process, directory or iptables
// rule of ours is left on any host.
func (l *sshLab) assertClean(t *testing.T) {
	t.Helper()
	for _, h := range l.hosts {
		out := l.run(t, h, `for d in /var/lib/splitbrain /usr/local/lib/splitbrain; do [ ! -e "$d" ] || echo "LEFT $d"; done
iptables -w -S | grep SPLITBRAIN | sed 's/^/LEFT rule /'
ps -eo pid=,args= | grep -v -e sshd -e 'ps -eo' -e grep -e sed -e 'sh -c' | sed 's/^/PROC /'
true`)
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "LEFT") || (strings.HasPrefix(line, "PROC") && line != "") {
				t.Errorf("%s: %s", h.Name, line)
			}
		}
	}
}

type sshTestLog struct{ t *testing.T }

func (w sshTestLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestSSHRuntime runs etcd tests on three hosts through the SSH runtime
// only, and checks host-key verification.
func TestSSHRuntime(t *testing.T) {
	t.Parallel() // beside one other real run: see e2eRun
	lab := startSSHLab(t, 3)

	t.Run("a changed host key is refused and nothing runs", func(t *testing.T) {
		_, wrong := newEd25519(t)
		bad := filepath.Join(t.TempDir(), "known_hosts")
		var b strings.Builder
		for i, h := range lab.hosts {
			k := lab.keys[i]
			if i == 1 {
				k = wrong.PublicKey()
			}
			b.WriteString(knownhosts.Line([]string{h.Address}, k) + "\n")
		}
		os.WriteFile(bad, []byte(b.String()), 0o600)
		o := lab.options()
		o.RunID, o.KnownHosts = "wrongkey", []string{bad}
		o.Binaries = []sshrt.Binary{{Name: "x", Local: lab.keyFile, Dest: "/usr/local/bin/x"}}
		_, err := sshrt.New(context.Background(), o)
		var hk *sshrt.HostKeyError
		if !errors.As(err, &hk) || !hk.Changed() || hk.Host != "n2" {
			t.Fatalf("err = %v, want a changed-key error for n2", err)
		}
		msg := err.Error()
		t.Logf("refused: %s", msg)
		if strings.Contains(msg, "\n") || !strings.Contains(msg, "CHANGED") || !strings.Contains(msg, "ssh-keygen -R") {
			t.Fatalf("not a one-line error naming the fix: %q", msg)
		}
		lab.assertClean(t)
	})

	t.Run("an unknown host is refused", func(t *testing.T) {
		empty := filepath.Join(t.TempDir(), "known_hosts")
		os.WriteFile(empty, nil, 0o600)
		o := lab.options()
		o.RunID, o.KnownHosts = "unknown", []string{empty}
		_, err := sshrt.New(context.Background(), o)
		var hk *sshrt.HostKeyError
		if !errors.As(err, &hk) || hk.Changed() || !strings.Contains(err.Error(), "ssh-keyscan") {
			t.Fatalf("err = %v, want an unknown-key error naming ssh-keyscan", err)
		}
	})

	t.Run("a refused host ends a run with a clean error", func(t *testing.T) {
		cfg := harness.DefaultConfig()
		cfg.Target, cfg.TimeLimit, cfg.ResultsDir = "etcd", time.Second, t.TempDir()
		o := lab.options()
		o.KnownHosts = []string{filepath.Join(t.TempDir(), "missing")}
		deps, err := sshDeps(cfg, o, slog.New(slog.DiscardHandler), sshTestLog{t})
		if err != nil {
			t.Fatal(err)
		}
		out, err := harness.Run(context.Background(), cfg, deps)
		if err == nil || !strings.Contains(err.Error(), "--known-hosts FILE") || strings.Contains(err.Error(), "panic") {
			t.Fatalf("err = %v", err)
		}
		if out == nil || out.Results.Valid != checkers.Unknown {
			t.Fatalf("outcome %+v", out)
		}
		lab.assertClean(t)
	})

	t.Run("insecure-ignore-host-keys connects and warns", func(t *testing.T) {
		var logb bytes.Buffer
		o := lab.options()
		o.RunID, o.KnownHosts, o.InsecureIgnoreHostKeys = "insecure", nil, true
		o.Log = slog.New(slog.NewTextHandler(&logb, nil))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rt, err := sshrt.New(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		n, err := rt.Start(ctx, runtime.NodeSpec{Name: "n1", Role: "x", Cmd: []string{"sleep", "300"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Signal(ctx, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		if err := rt.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(logb.String(), "INSECURE") {
			t.Fatalf("no warning logged: %q", logb.String())
		}
		lab.assertClean(t)
	})

	etcdRun := func(t *testing.T, workload string, pauseTargets nemesis.Weights, seed uint64) *harness.Outcome {
		t.Helper()
		cfg := harness.DefaultConfig()
		cfg.Target, cfg.Workload, cfg.Nemesis = "etcd", workload, "pause"
		cfg.TimeLimit, cfg.Concurrency, cfg.Keys = 20*time.Second, 4, 1
		cfg.Work = time.Second // a paused holder is caught before its write (e2eRun's comment)
		nemesis.SpecOf[*nemesis.PauseSpec](cfg.Faults).Targets, cfg.Seed = pauseTargets, seed
		cfg.ResultsDir = t.TempDir()
		log := slog.New(slog.NewTextHandler(sshTestLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
		deps, err := sshDeps(cfg, lab.options(), log, sshTestLog{t})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		out, err := harness.Run(context.Background(), cfg, deps)
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		r := out.Results
		s, _ := r.Checkers["summary"].Details.(*checkers.SummaryDetails)
		if s == nil {
			t.Fatalf("no summary: %+v", r.Checkers)
		}
		t.Logf("%s: valid %s in %v (phases %v); ops %d (ok %d, fail %d, info %d), lost updates %d, rejections %d, faults %d, etcd %s",
			workload, r.Valid, time.Since(start).Round(time.Millisecond), r.Phases, s.Ops, s.OK, s.Fail, s.Info, s.LostUpdates, s.Rejections, len(r.Faults), r.Versions["etcd"])
		if v := r.Versions["etcd"]; !strings.HasPrefix(v, "3.6.") {
			t.Errorf("etcd version %q not recorded as 3.6.x", v)
		}
		for _, f := range []string{"logs/n1.log", "logs/store.log", "logs/c1.log", "history.jsonl"} {
			if st, err := os.Stat(filepath.Join(out.Dir, f)); err != nil || (f == "logs/n1.log" && st.Size() == 0) {
				t.Errorf("%s: %v", f, err)
			}
		}
		lab.assertClean(t)
		return out
	}

	t.Run("etcd fenced under pause is valid", func(t *testing.T) {
		out := etcdRun(t, "fenced-counter", nemesis.Weights{nemesis.GroupHolder: 3, nemesis.GroupNode: 1}, 11)
		if out.Results.Valid != checkers.Valid {
			t.Fatalf("valid %s, errors %v", out.Results.Valid, out.Results.Errors)
		}
		if len(out.Results.Errors) > 0 {
			t.Fatalf("harness errors: %v", out.Results.Errors)
		}
		if len(out.Results.Faults) == 0 {
			t.Fatal("no fault injected")
		}
	})

	t.Run("etcd unfenced under holder pauses is invalid", func(t *testing.T) {
		out := etcdRun(t, "unfenced-counter", nemesis.Weights{nemesis.GroupHolder: 1}, 4)
		if out.Results.Valid != checkers.Invalid {
			t.Fatalf("valid %s, errors %v", out.Results.Valid, out.Results.Errors)
		}
		if s := out.Results.Checkers["summary"].Details.(*checkers.SummaryDetails); s.LostUpdates < 1 {
			t.Fatalf("invalid without lost updates: %d", s.LostUpdates)
		}
	})
}
