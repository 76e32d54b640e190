package ssh

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/splitbrain/splitbrain/runtime"
)

// ErrHostKey is wrapped by every host-key verification failure.
var ErrHostKey = errors.New("host key verification failed")

// HostKeyError is a host key that known_hosts does not vouch for: unknown,
// changed or revoked. Its message is one line naming the fix.
type HostKeyError struct {
	// Host is the host's name, Addr the address dialled (host:port).
	Host, Addr string
	// Key is the key the host presented.
	Key ssh.PublicKey
	// Known are the keys known_hosts has for the address (none: unknown).
	Known []knownhosts.KnownKey
	// Revoked is set when the key is marked @revoked.
	Revoked *knownhosts.KnownKey
	// Files are the known_hosts files consulted.
	Files []string
}

// Changed reports whether known_hosts has a different key for the host.
func (e *HostKeyError) Changed() bool { return len(e.Known) > 0 }

func (e *HostKeyError) Error() string {
	fp := ssh.FingerprintSHA256(e.Key) + " (" + e.Key.Type() + ")"
	host, port, _ := net.SplitHostPort(e.Addr)
	files := strings.Join(e.Files, ", ")
	first := "~/.ssh/known_hosts"
	if len(e.Files) > 0 {
		first = e.Files[0]
	}
	switch {
	case e.Revoked != nil:
		return fmt.Sprintf("ssh %s (%s): host key %s is REVOKED in %s:%d; the host must get a new key before it can be used",
			e.Host, e.Addr, fp, e.Revoked.Filename, e.Revoked.Line)
	case e.Changed():
		k := e.Known[0]
		return fmt.Sprintf("ssh %s (%s): host key CHANGED: it presented %s but %s:%d has another key — someone may be intercepting the connection; if the host was reinstalled, verify the new key and replace the entry (ssh-keygen -R %s -f %s, then ssh-keyscan -p %s %s >> %s)",
			e.Host, e.Addr, fp, k.Filename, k.Line, runtime.ShellQuote(knownhosts.Normalize(e.Addr)), runtime.ShellQuote(k.Filename), port, runtime.ShellQuote(host), runtime.ShellQuote(k.Filename))
	default:
		return fmt.Sprintf("ssh %s (%s): host key %s is not in %s; verify its fingerprint and add it (ssh-keyscan -p %s %s >> %s), or pass --known-hosts FILE",
			e.Host, e.Addr, fp, files, port, runtime.ShellQuote(host), runtime.ShellQuote(first))
	}
}

// Unwrap makes errors.Is(err, ErrHostKey) hold.
func (e *HostKeyError) Unwrap() error { return ErrHostKey }

// hostKeys verifies host keys against known_hosts files.
type hostKeys struct {
	files    []string
	cb       ssh.HostKeyCallback
	insecure bool
}

// DefaultKnownHosts is ~/.ssh/known_hosts.
func DefaultKnownHosts() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ".ssh/known_hosts"
	}
	return filepath.Join(home, ".ssh", "known_hosts")
}

func newHostKeys(files []string, insecure bool) (*hostKeys, error) {
	if insecure {
		return &hostKeys{insecure: true}, nil
	}
	if len(files) == 0 {
		files = []string{DefaultKnownHosts()}
	}
	for i, f := range files {
		files[i] = expandHome(f)
		if _, err := os.Stat(files[i]); err != nil {
			return nil, fmt.Errorf("known_hosts file %s: %w (create it with ssh-keyscan HOST >> %s after checking the fingerprints, or pass --known-hosts FILE)", files[i], err, files[i])
		}
	}
	cb, err := knownhosts.New(files...)
	if err != nil {
		return nil, fmt.Errorf("read known_hosts %s: %w", strings.Join(files, ", "), err)
	}
	return &hostKeys{files: files, cb: cb}, nil
}

// callback verifies the key of the host called name.
func (k *hostKeys) callback(name string) ssh.HostKeyCallback {
	if k.insecure {
		return ssh.InsecureIgnoreHostKey()
	}
	return func(addr string, remote net.Addr, key ssh.PublicKey) error {
		err := k.cb(addr, remote, key)
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &ke):
			return &HostKeyError{Host: name, Addr: addr, Key: key, Known: ke.Want, Files: k.files}
		case errors.As(err, &re):
			r := re.Revoked
			return &HostKeyError{Host: name, Addr: addr, Key: key, Revoked: &r, Files: k.files}
		default:
			return fmt.Errorf("ssh %s (%s): check host key: %w", name, addr, err)
		}
	}
}

// algorithms returns the host key algorithms known_hosts has keys of for
// addr, so that the server is asked for a key we can check (otherwise it
// may offer an RSA key while known_hosts holds its Ed25519 one, and the
// check fails as a mismatch). Nil means the defaults.
func (k *hostKeys) algorithms(addr string) []string {
	if k.insecure {
		return nil
	}
	// Ask the database about a key it cannot know: the error lists the
	// keys it has for addr.
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil
	}
	probe, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil
	}
	var ke *knownhosts.KeyError
	if err := k.cb(addr, &net.TCPAddr{IP: net.IPv4zero}, probe); !errors.As(err, &ke) {
		return nil
	}
	var out []string
	add := func(algos ...string) {
		for _, a := range algos {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	for _, kk := range ke.Want {
		switch t := kk.Key.Type(); t {
		case ssh.KeyAlgoRSA:
			add(ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA)
		default:
			add(t)
		}
	}
	return out
}

func expandHome(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return p
}

// authMethods turns a resolved Auth into SSH methods; closers are the
// agent connections to close with the runtime.
func authMethods(a Auth) (methods []ssh.AuthMethod, closers []io.Closer, err error) {
	var signers []func() ([]ssh.Signer, error)
	if a.Key != "" {
		path := expandHome(a.Key)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("read ssh key: %w", err)
		}
		s, err := ssh.ParsePrivateKey(b)
		var pm *ssh.PassphraseMissingError
		if errors.As(err, &pm) {
			return nil, nil, fmt.Errorf("ssh key %s is passphrase-protected: load it into ssh-agent (ssh-add %s) and run again", path, runtime.ShellQuote(path))
		}
		if err != nil {
			return nil, nil, fmt.Errorf("parse ssh key %s: %w", path, err)
		}
		signers = append(signers, func() ([]ssh.Signer, error) { return []ssh.Signer{s}, nil })
	}
	if a.Agent {
		sock := os.Getenv("SSH_AUTH_SOCK")
		if sock == "" {
			return nil, nil, errors.New("ssh agent auth asked for but SSH_AUTH_SOCK is not set (start ssh-agent and ssh-add your key, or pass --ssh-key)")
		}
		conn, err := net.Dial("unix", sock)
		if err != nil {
			return nil, nil, fmt.Errorf("connect to ssh-agent at %s: %w", sock, err)
		}
		closers = append(closers, conn)
		signers = append(signers, agent.NewClient(conn).Signers)
	}
	if len(signers) > 0 {
		methods = append(methods, ssh.PublicKeysCallback(func() ([]ssh.Signer, error) {
			var all []ssh.Signer
			for _, f := range signers {
				s, err := f()
				if err != nil {
					return nil, err
				}
				all = append(all, s...)
			}
			return all, nil
		}))
	}
	pw := a.Password
	if a.PasswordEnv != "" {
		v, ok := os.LookupEnv(a.PasswordEnv)
		if !ok {
			closeAll(closers)
			return nil, nil, fmt.Errorf("ssh password: environment variable %s is not set", a.PasswordEnv)
		}
		pw = v
	}
	if pw != "" {
		methods = append(methods, ssh.Password(pw),
			ssh.KeyboardInteractive(func(_, _ string, questions []string, _ []bool) ([]string, error) {
				out := make([]string, len(questions))
				for i := range out {
					out[i] = pw
				}
				return out, nil
			}))
	}
	if len(methods) == 0 {
		return nil, nil, errors.New("no ssh authentication method (pass --ssh-key FILE, start ssh-agent, or set auth in the hosts file)")
	}
	return methods, closers, nil
}

func closeAll(cs []io.Closer) {
	for _, c := range cs {
		c.Close()
	}
}

// DefaultAuth is what is tried when nothing is configured: the agent when
// SSH_AUTH_SOCK is set, else the first of ~/.ssh/id_ed25519, id_ecdsa and
// id_rsa that exists.
func DefaultAuth() Auth {
	if os.Getenv("SSH_AUTH_SOCK") != "" {
		return Auth{Agent: true}
	}
	home, _ := os.UserHomeDir()
	for _, n := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
		p := filepath.Join(home, ".ssh", n)
		if _, err := os.Stat(p); err == nil {
			return Auth{Key: p}
		}
	}
	return Auth{}
}

// conn is one host's SSH connection, shared by every node on it: each
// command is a session on it. It is dialled again when it broke.
type conn struct {
	name   string
	addr   string // host:port dialled
	user   string
	cfg    *ssh.ClientConfig
	dialTO time.Duration
	log    *slog.Logger

	mu     sync.Mutex
	client *ssh.Client
	closed bool
}

func (c *conn) get(ctx context.Context) (*ssh.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("ssh %s: connection closed", c.name)
	}
	if c.client != nil {
		return c.client, nil
	}
	cl, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	c.client = cl
	go func() {
		err := cl.Wait()
		c.mu.Lock()
		if c.client == cl {
			c.client = nil
		}
		closed := c.closed
		c.mu.Unlock()
		if !closed {
			c.log.Debug("ssh connection ended", "host", c.name, "err", err)
		}
	}()
	go c.keepalive(cl)
	return cl, nil
}

func (c *conn) dial(ctx context.Context) (*ssh.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, c.dialTO)
	defer cancel()
	var d net.Dialer
	tcp, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, fmt.Errorf("ssh %s: dial %s: %w", c.name, c.addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = tcp.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { tcp.Close() })
	sc, chans, reqs, err := ssh.NewClientConn(tcp, c.addr, c.cfg)
	stop()
	if err != nil {
		tcp.Close()
		var hk *HostKeyError
		if errors.As(err, &hk) {
			return nil, hk
		}
		if strings.Contains(err.Error(), "unable to authenticate") {
			return nil, fmt.Errorf("ssh %s (%s): authentication as %s failed (check --ssh-key, ssh-agent, the password, and the host's ~%s/.ssh/authorized_keys): %w", c.name, c.addr, c.user, c.user, err)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("ssh %s (%s): handshake: %w", c.name, c.addr, ctx.Err())
		}
		return nil, fmt.Errorf("ssh %s (%s): handshake: %w", c.name, c.addr, err)
	}
	_ = tcp.SetDeadline(time.Time{})
	c.log.Debug("ssh connected", "host", c.name, "addr", c.addr, "user", c.user)
	return ssh.NewClient(sc, chans, reqs), nil
}

// keepalive pings the server; a connection that stops answering is closed
// (and dialled again on next use).
func (c *conn) keepalive(cl *ssh.Client) {
	t := time.NewTicker(15 * time.Second)
	defer t.Stop()
	for range t.C {
		done := make(chan error, 1)
		go func() {
			_, _, err := cl.SendRequest("keepalive@openssh.com", true, nil)
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				return // the connection ended; get dials again
			}
		case <-time.After(30 * time.Second):
			c.log.Warn("ssh connection not answering; closing it", "host", c.name)
			cl.Close()
			return
		}
	}
}

func (c *conn) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.client != nil {
		err := c.client.Close()
		c.client = nil
		return err
	}
	return nil
}

// session opens a session, waiting while the server refuses for lack of
// sessions (sshd's MaxSessions) until ctx is done.
func (c *conn) session(ctx context.Context) (*ssh.Session, error) {
	var last error
	for attempt := 0; ; attempt++ {
		cl, err := c.get(ctx)
		if err != nil {
			return nil, err
		}
		s, err := cl.NewSession()
		if err == nil {
			return s, nil
		}
		last = err
		var oe *ssh.OpenChannelError
		switch {
		case errors.As(err, &oe) && (oe.Reason == ssh.Prohibited || oe.Reason == ssh.ResourceShortage):
			// too many sessions at once: wait for one to end
		case errors.Is(err, io.EOF) && attempt == 0:
			// the connection just broke: dial again
			c.mu.Lock()
			if c.client == cl {
				c.client = nil
			}
			c.mu.Unlock()
			cl.Close()
			continue
		default:
			return nil, fmt.Errorf("ssh %s: open session: %w", c.name, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("ssh %s: open session (the server refuses more sessions; raise MaxSessions in its sshd_config?): %w: %w", c.name, ctx.Err(), last)
		case <-time.After(time.Duration(min(attempt+1, 10)) * 20 * time.Millisecond):
		}
	}
}

// run runs the command line cmd in a new session, with stdin (may be nil)
// and output to stdout and stderr, until it ends or ctx is done (then the
// remote command is sent SIGKILL and the session closed). It returns the
// exit code; -1 with an error when there is none.
func (c *conn) run(ctx context.Context, cmd string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	s, err := c.session(ctx)
	if err != nil {
		return -1, err
	}
	defer s.Close()
	// The session's copies write through guards, switched off when run
	// returns early: a caller's buffer is never written after that.
	gout, gerr := &guardWriter{w: stdout}, &guardWriter{w: stderr}
	s.Stdin = stdin
	if stdout != nil {
		s.Stdout = gout
	}
	if stderr != nil {
		s.Stderr = gerr
	}
	if err := s.Start(cmd); err != nil {
		return -1, fmt.Errorf("ssh %s: start %s: %w", c.name, abbrev(cmd), err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = s.Signal(ssh.SIGKILL)
		s.Close()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
		gout.off()
		gerr.off()
		return -1, fmt.Errorf("ssh %s: %s: %w", c.name, abbrev(cmd), ctx.Err())
	}
	if err == nil {
		return 0, nil
	}
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		if sig := ee.Signal(); sig != "" {
			return 128 + signalNumber(sig), nil
		}
		return ee.ExitStatus(), nil
	}
	return -1, fmt.Errorf("ssh %s: %s: %w", c.name, abbrev(cmd), err)
}

// guardWriter passes writes on until it is switched off, then drops them.
type guardWriter struct {
	mu   sync.Mutex
	w    io.Writer
	dead bool
}

func (g *guardWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dead {
		return len(p), nil
	}
	return g.w.Write(p)
}

func (g *guardWriter) off() {
	g.mu.Lock()
	g.dead = true
	g.mu.Unlock()
}

// abbrev shortens a command line for messages (scripts are long).
func abbrev(cmd string) string {
	cmd = strings.ReplaceAll(cmd, "\n", "; ")
	if len(cmd) > 120 {
		return cmd[:117] + "..."
	}
	return cmd
}

func signalNumber(name string) int {
	switch name {
	case "KILL":
		return 9
	case "TERM":
		return 15
	case "INT":
		return 2
	case "HUP":
		return 1
	case "ABRT":
		return 6
	case "SEGV":
		return 11
	case "PIPE":
		return 13
	}
	return 0
}

// output runs argv and returns its stdout; a non-zero exit is an error
// wrapping runtime.ErrExit with stderr.
func (c *conn) output(ctx context.Context, argv []string, stdin io.Reader) ([]byte, error) {
	var out, errb bytes.Buffer
	code, err := c.run(ctx, runtime.ShellLine(argv), stdin, &out, &errb)
	if err != nil {
		return out.Bytes(), err
	}
	if code != 0 {
		return out.Bytes(), fmt.Errorf("ssh %s: %s: exit %d: %w: %s", c.name, abbrev(runtime.ShellLine(argv)), code, runtime.ErrExit, strings.TrimSpace(tailString(errb.String(), 800)))
	}
	return out.Bytes(), nil
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// hashingReader hashes what is read through it.
type hashingReader struct {
	r io.Reader
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
	n int64
}

func newHashingReader(r io.Reader) *hashingReader { return &hashingReader{r: r, h: sha256.New()} }

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	h.n += int64(n)
	return n, err
}

func (h *hashingReader) sum() string { return hex.EncodeToString(h.h.Sum(nil)) }

// modeString is a file mode as chmod takes it.
func modeString(mode os.FileMode) string { return "0" + strconv.FormatUint(uint64(mode.Perm()), 8) }
