package kubernetes

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/splitbrain/splitbrain/targets"
)

// SecurePort is the API servers' HTTPS port.
const SecurePort = 6443

// StateDir is where an API server keeps its files: the service-account
// signing key, the token file and the self-signed serving certificate
// (--cert-dir). A restarted node finds them again.
const StateDir = "/var/lib/kube-apiserver"

// Token is the bearer token of the one user of the static token file
// (--token-auth-file), whom --authorization-mode=AlwaysAllow lets do
// anything: the clients and the probe send it.
const Token = "splitbrain-test-token"

// ServiceClusterIPRange is the API server's --service-cluster-ip-range,
// which it needs to start; no Service is used.
const ServiceClusterIPRange = "10.96.0.0/16"

// ProgramName is the API server nodes' main process, `splitbrain
// kube-apiserver --etcd-servers URL,...`.
const ProgramName = "kube-apiserver"

// APIServerConfig is one API server's configuration.
type APIServerConfig struct {
	// EtcdServers are the etcd members' client URLs.
	EtcdServers []string
	// Dir is the state directory (StateDir).
	Dir string
	// Port is the secure port (SecurePort).
	Port int
}

// Validate says what is wrong with c, if anything.
func (c APIServerConfig) Validate() error {
	switch {
	case len(c.EtcdServers) == 0:
		return errors.New("--etcd-servers: want the etcd members' client URLs, comma-separated")
	case !filepath.IsAbs(c.Dir):
		return fmt.Errorf("--dir %q: want an absolute path", c.Dir)
	case c.Port < 1 || c.Port > 65535:
		return fmt.Errorf("--port %d: want 1-65535", c.Port)
	}
	for _, u := range c.EtcdServers {
		if !strings.HasPrefix(u, "http://") {
			return fmt.Errorf("--etcd-servers: %q: want http://HOST:PORT", u)
		}
	}
	return nil
}

func (c APIServerConfig) keyPath() string    { return filepath.Join(c.Dir, "service-account.key") }
func (c APIServerConfig) tokensPath() string { return filepath.Join(c.Dir, "tokens.csv") }

// Argv is the kube-apiserver command line: etcd as its store, a
// self-signed serving certificate in the state directory, the
// service-account key pair and issuer it needs to start, the static token
// file and AlwaysAllow (a test cluster's one user may do anything), and no
// endpoint reconciler (nothing uses the kubernetes Service, and without it
// the API servers write nothing to etcd on their own but their own
// leases).
func (c APIServerConfig) Argv() []string {
	return []string{APIServerBinary,
		"--etcd-servers", strings.Join(c.EtcdServers, ","),
		"--secure-port", strconv.Itoa(c.Port),
		"--bind-address", "0.0.0.0",
		"--cert-dir", c.Dir,
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", c.keyPath(),
		"--service-account-signing-key-file", c.keyPath(),
		"--token-auth-file", c.tokensPath(),
		"--authorization-mode", "AlwaysAllow",
		"--service-cluster-ip-range", ServiceClusterIPRange,
		"--endpoint-reconciler-type", "none",
		"--profiling=false",
		"--v", "1",
	}
}

// Prepare writes the service-account signing key (once: a restarted node
// keeps its own) and the token file into the state directory.
func (c APIServerConfig) Prepare() error {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return fmt.Errorf("kube-apiserver state dir: %w", err)
	}
	if _, err := os.Stat(c.keyPath()); errors.Is(err, fs.ErrNotExist) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return fmt.Errorf("service-account key: %w", err)
		}
		der, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return fmt.Errorf("service-account key: %w", err)
		}
		if err := os.WriteFile(c.keyPath(), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			return fmt.Errorf("service-account key: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("service-account key: %w", err)
	}
	line := Token + ",splitbrain,splitbrain,system:masters\n"
	if err := os.WriteFile(c.tokensPath(), []byte(line), 0o600); err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	return nil
}

// csvFlag parses a comma-separated list.
type csvFlag []string

func (f *csvFlag) String() string { return strings.Join(*f, ",") }
func (f *csvFlag) Set(s string) error {
	*f = strings.Split(s, ",")
	return nil
}

// APIServerProgram is an API server node's main process: it writes the
// server's keys and token file, then replaces itself with kube-apiserver
// (exec), so the API server is PID 1 of its node — a pause stops it, a
// kill kills it, and the clock nemesis skews it through the vDSO.
var APIServerProgram = targets.Program{
	Name:  ProgramName,
	Short: "a Kubernetes API server: write its keys and token file, then exec kube-apiserver (runs inside kubernetes nodes)",
	Flags: func(fs *flag.FlagSet) (func() error, func(context.Context, *slog.Logger) error) {
		c := APIServerConfig{Dir: StateDir, Port: SecurePort}
		fs.Var((*csvFlag)(&c.EtcdServers), "etcd-servers", "the etcd members' client URLs, comma-separated")
		fs.StringVar(&c.Dir, "dir", c.Dir, "state directory (keys, token file, serving certificate)")
		fs.IntVar(&c.Port, "port", c.Port, "secure port")
		return func() error { return c.Validate() }, func(_ context.Context, log *slog.Logger) error {
			if err := c.Prepare(); err != nil {
				return err
			}
			argv := c.Argv()
			log.Info("exec kube-apiserver", "argv", argv)
			if err := syscall.Exec(argv[0], argv, os.Environ()); err != nil {
				return fmt.Errorf("exec %s: %w", argv[0], err)
			}
			return nil
		}
	},
}
