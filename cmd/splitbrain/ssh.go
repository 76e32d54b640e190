package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
	sshrt "github.com/splitbrain/splitbrain/runtime/ssh"
	"github.com/splitbrain/splitbrain/targets"
)

// sshFlags select and configure the SSH runtime (docs/ssh.md): with
// --nodes-file or --nodes a run goes to real hosts instead of Docker.
type sshFlags struct {
	nodesFile   string
	nodes       string
	key         string
	knownHosts  []string
	passwordEnv string
	insecure    bool
}

// register adds the flags to cmd.
func (s *sshFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&s.nodesFile, "nodes-file", "", "run on the hosts of this YAML file over SSH instead of Docker (see docs/ssh.md)")
	f.StringVar(&s.nodes, "nodes", "", "run over SSH on these hosts: comma-separated [user@]host[:port] (user root by default); node n<i> runs on the i-th")
	f.StringVar(&s.key, "ssh-key", "", "SSH private key file (default: ssh-agent when SSH_AUTH_SOCK is set, else ~/.ssh/id_ed25519, id_ecdsa or id_rsa)")
	f.StringArrayVar(&s.knownHosts, "known-hosts", nil, "known_hosts file host keys are verified against (repeatable; default ~/.ssh/known_hosts)")
	f.StringVar(&s.passwordEnv, "ssh-password-env", "", "environment variable holding the SSH password (password authentication)")
	f.BoolVar(&s.insecure, "insecure-ignore-host-keys", false, "accept any host key: only for throwaway hosts on a network you trust")
}

// enabled reports whether the run goes over SSH.
func (s *sshFlags) enabled() bool { return s.nodesFile != "" || s.nodes != "" }

// options turns the flags into runtime options (without the run's id,
// binaries and log); problems are bad input.
func (s *sshFlags) options() (sshrt.Options, error) {
	var (
		hosts []sshrt.Host
		err   error
	)
	switch {
	case s.nodesFile != "" && s.nodes != "":
		return sshrt.Options{}, harness.BadInput("--nodes-file and --nodes exclude each other")
	case s.insecure && len(s.knownHosts) > 0:
		return sshrt.Options{}, harness.BadInput("--insecure-ignore-host-keys and --known-hosts exclude each other")
	case s.nodesFile != "":
		hosts, err = sshrt.LoadHostsFile(s.nodesFile)
	default:
		hosts, err = sshrt.ParseNodeList(s.nodes)
	}
	if err != nil {
		return sshrt.Options{}, &harness.InputError{Err: err}
	}
	auth := sshrt.Auth{Key: s.key, PasswordEnv: s.passwordEnv}
	if auth.Key != "" || auth.PasswordEnv != "" {
		auth.Agent = os.Getenv("SSH_AUTH_SOCK") != ""
	}
	return sshrt.Options{Hosts: hosts, Auth: auth, KnownHosts: s.knownHosts, InsecureIgnoreHostKeys: s.insecure}, nil
}

// deps wires the harness to the flags' hosts, like dockerDeps to the
// Docker engine (the close function is there for symmetry: connections
// belong to each run's runtime).
func (s *sshFlags) deps(cfg harness.Config, log *slog.Logger, progress io.Writer) (harness.Deps, func(), error) {
	opts, err := s.options()
	if err != nil {
		return harness.Deps{}, nil, err
	}
	deps, err := sshDeps(cfg, opts, log, progress)
	if err != nil {
		return harness.Deps{}, nil, err
	}
	return deps, func() {}, nil
}

// sshDeps wires the harness to hosts over SSH: no images; the static
// binaries the run's roles need (built and cached like the images' ones)
// are uploaded to every host when the runtime is created.
func sshDeps(cfg harness.Config, opts sshrt.Options, log *slog.Logger, progress io.Writer) (harness.Deps, error) {
	backend, err := targets.Lookup(cfg.Target)
	if err != nil {
		return harness.Deps{}, &harness.InputError{Err: err}
	}
	roles := append([]string{runtime.RoleStore, runtime.RoleClient}, backend.RoleNames()...)
	b := images.NewBuilder(nil, log)
	b.Progress = progress
	// The backend's data directories are kept per node on the hosts.
	opts.StateDirs = append(opts.StateDirs, backend.StateDirs()...)
	for _, r := range backend.Roles {
		if r.HostSetup != "" {
			if opts.HostSetup == nil {
				opts.HostSetup = map[string]string{}
			}
			opts.HostSetup[r.Name] = r.HostSetup
		}
	}
	return harness.Deps{
		NewRuntime: func(ctx context.Context, runID string, keep bool, log *slog.Logger) (runtime.Runtime, error) {
			arts, err := b.Artifacts(ctx, roles)
			if err != nil {
				return nil, err
			}
			o := opts
			o.RunID, o.Keep, o.Log = runID, keep, log
			o.Binaries = nil
			for _, a := range arts {
				o.Binaries = append(o.Binaries, sshrt.Binary{Name: a.Name, Local: a.Path, Dest: a.Dest, Mode: os.FileMode(a.Mode)})
			}
			rt, err := sshrt.New(ctx, o)
			if err != nil {
				return nil, err // not a typed nil in the interface
			}
			return rt, nil
		},
		Log: log,
	}, nil
}

// sshClean removes what runs left on the hosts of the flags (runID empty:
// every run), for `splitbrain clean`.
func sshClean(ctx context.Context, s *sshFlags, runID string, log *slog.Logger) error {
	if !s.enabled() {
		return errors.New("no hosts: pass --nodes-file or --nodes")
	}
	opts, err := s.options()
	if err != nil {
		return err
	}
	opts.Log = log
	return sshrt.Clean(ctx, opts, runID)
}
