package ssh

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// testServer is an SSH server on loopback that runs exec requests with
// this machine's sh, as a stand-in for a host's sshd: the runtime's real
// protocol, host-key checks and scripts run against it. PATH starts with a
// directory of stubs (iptables, sudo, id) so that no test touches this
// machine's firewall, and a user other than root looks unprivileged.
type testServer struct {
	t        *testing.T
	addr     string
	hostKey  ssh.Signer
	clientPK ssh.PublicKey
	password string
	stubs    string

	mu    sync.Mutex
	cmds  []string
	users []string
}

func newKey(t *testing.T) (ssh.Signer, ed25519.PrivateKey) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s, priv
}

// writeKey writes priv as an OpenSSH private key file (encrypted with
// passphrase when not empty).
func writeKey(t *testing.T, priv ed25519.PrivateKey, passphrase string) string {
	t.Helper()
	var (
		blk *pem.Block
		err error
	)
	if passphrase == "" {
		blk, err = ssh.MarshalPrivateKey(priv, "test")
	} else {
		blk, err = ssh.MarshalPrivateKeyWithPassphrase(priv, "test", []byte(passphrase))
	}
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "id_ed25519")
	if err := os.WriteFile(p, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const stubIptables = `#!/bin/sh
echo "iptables $*" >> "$STUB_LOG"
case "$*" in *" -S"*) exit 0;; *" -D "*) exit 1;; esac
exit 0
`

const stubSudo = `#!/bin/sh
[ "$1" = -n ] && shift
[ "$1" = -- ] && shift
echo "sudo $1" >> "$STUB_LOG"
exec "$@"
`

const stubID = `#!/bin/sh
if [ "$1" = -u ] && [ "$FAKE_USER" != root ]; then echo 1000; exit 0; fi
exec /usr/bin/id "$@"
`

// startServer serves on 127.0.0.1 with a fresh host key, accepting
// clientPK or password.
func startServer(t *testing.T, clientPK ssh.PublicKey, password string) *testServer {
	t.Helper()
	hk, _ := newKey(t)
	s := &testServer{t: t, hostKey: hk, clientPK: clientPK, password: password, stubs: t.TempDir()}
	for name, body := range map[string]string{"iptables": stubIptables, "sudo": stubSudo, "id": stubID} {
		if err := os.WriteFile(filepath.Join(s.stubs, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(c ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if s.clientPK != nil && string(key.Marshal()) == string(s.clientPK.Marshal()) {
				return &ssh.Permissions{}, nil
			}
			return nil, errors.New("unknown key")
		},
		PasswordCallback: func(c ssh.ConnMetadata, pw []byte) (*ssh.Permissions, error) {
			if s.password != "" && string(pw) == s.password {
				return &ssh.Permissions{}, nil
			}
			return nil, errors.New("wrong password")
		},
	}
	cfg.AddHostKey(hk)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c, cfg)
		}
	}()
	return s
}

func (s *testServer) port() int { return ln2port(s.addr) }

func ln2port(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := parsePort(p)
	return n
}

// knownHosts writes a known_hosts file vouching for key at the server's
// address.
func (s *testServer) knownHosts(t *testing.T, key ssh.PublicKey) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "known_hosts")
	line := knownhosts.Line([]string{knownhosts.Normalize(s.addr)}, key)
	if err := os.WriteFile(p, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (s *testServer) commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.cmds...)
}

func (s *testServer) stubLog() string {
	b, _ := os.ReadFile(filepath.Join(s.stubs, "log"))
	return string(b)
}

func (s *testServer) serve(c net.Conn, cfg *ssh.ServerConfig) {
	sc, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		c.Close()
		return
	}
	s.mu.Lock()
	s.users = append(s.users, sc.User())
	s.mu.Unlock()
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		go s.session(sc.User(), ch, creqs)
	}
}

func (s *testServer) session(user string, ch ssh.Channel, reqs <-chan *ssh.Request) {
	var (
		cmd  *exec.Cmd
		done = make(chan struct{})
	)
	for req := range reqs {
		switch req.Type {
		case "exec":
			var p struct{ Command string }
			if err := ssh.Unmarshal(req.Payload, &p); err != nil || cmd != nil {
				req.Reply(false, nil)
				continue
			}
			s.mu.Lock()
			s.cmds = append(s.cmds, p.Command)
			s.mu.Unlock()
			cmd = exec.Command("sh", "-c", p.Command)
			cmd.Env = append(os.Environ(), "PATH="+s.stubs+":"+os.Getenv("PATH"), "STUB_LOG="+filepath.Join(s.stubs, "log"), "FAKE_USER="+user)
			cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			stdin, _ := cmd.StdinPipe()
			if err := cmd.Start(); err != nil {
				req.Reply(false, nil)
				ch.Close()
				return
			}
			req.Reply(true, nil)
			go func() {
				_, _ = ioCopy(stdin, ch)
				stdin.Close()
			}()
			go func() {
				err := cmd.Wait()
				code := 0
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
						sig := strings.TrimPrefix(ws.Signal().String(), "SIG")
						_, _ = ch.SendRequest("exit-signal", false, ssh.Marshal(struct {
							Signal     string
							CoreDumped bool
							Error      string
							Lang       string
						}{Signal: strings.ToUpper(sig)}))
						ch.Close()
						close(done)
						return
					}
					code = ee.ExitCode()
				}
				_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(code)}))
				ch.Close()
				close(done)
			}()
		case "signal":
			var p struct{ Signal string }
			if cmd != nil && cmd.Process != nil && ssh.Unmarshal(req.Payload, &p) == nil && p.Signal == "KILL" {
				_ = cmd.Process.Kill()
			}
			if req.WantReply {
				req.Reply(true, nil)
			}
		default:
			if req.WantReply {
				req.Reply(req.Type == "env", nil)
			}
		}
	}
	if cmd == nil {
		ch.Close()
		return
	}
	<-done
}

func ioCopy(dst interface{ Write([]byte) (int, error) }, src interface{ Read([]byte) (int, error) }) (int64, error) {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			w, werr := dst.Write(buf[:k])
			n += int64(w)
			if werr != nil {
				return n, werr
			}
		}
		if err != nil {
			return n, err
		}
	}
}
