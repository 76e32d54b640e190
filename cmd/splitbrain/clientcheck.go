package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/external"
)

// miniredisVersion is the in-process Redis client-check runs (go.mod pins
// it).
var miniredisVersion = targets.ModuleVersion("github.com/alicebob/miniredis/v2")

// redisMasters is how many in-process Redis servers stand in for each
// Redis-protocol backend.
var redisMasters = map[string]int{"redis": 1, "redlock": 5}

func newClientCheckCmd(g *globalFlags) *cobra.Command {
	var (
		backend   string
		endpoints []string
		ttl       time.Duration
		dir       string
		opts      []string
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "client-check [flags] -- CMD [ARGS...]",
		Short: "Check a lock client adapter against the client protocol, without Docker",
		Long: "client-check runs your adapter (docs/client-protocol.md) twice against a lock service and names every\n" +
			"protocol mistake in plain words: the handshake, busy between two instances on one key, release and\n" +
			"re-acquire, tokens growing, not_owner after expiry, deadlines, close. For the Redis-protocol backends\n" +
			"(redis, redlock) the service is an in-process Redis (miniredis; five of them for redlock) whose clock\n" +
			"client-check moves to expire leases; for any other backend give --endpoints of a service you run on\n" +
			"loopback, and leases expire by waiting their TTL. Exit 0 when every step passes, 1 otherwise.",
		Example: "  splitbrain client-check -- python3 targets/redis/redispy/redis_py_lock.py\n" +
			"  splitbrain client-check --backend etcd --endpoints 127.0.0.1:2379 -- ./my-etcd-adapter",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return &usageError{errors.New("give the adapter's command after --, e.g. client-check -- python3 my_lock.py")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := g.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			options, err := parseKV(opts)
			if err != nil {
				return &usageError{err}
			}
			if err := checkClientCheckInput(backend, endpoints, ttl, dir, args[0]); err != nil {
				return err
			}
			svc, stop, err := checkService(backend, endpoints)
			if err != nil {
				return err
			}
			defer stop()
			command := args[0]
			if len(args) > 1 {
				command = runtime.ShellLine(args)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Minute)
			defer cancel()
			rep := external.Check(ctx, svc, external.CheckOptions{Command: command, Dir: dir, TTL: ttl, Options: options, Log: log.With("component", "adapter")})
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				rep.Write(cmd.OutOrStdout())
			}
			if rep.Failed() > 0 {
				return &exitError{code: exitInvalid}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&backend, "backend", "redis", "the lock service the adapter is told it talks to (its hello's backend)")
	f.StringSliceVar(&endpoints, "endpoints", nil, "addresses of a lock service you run (default for redis and redlock: in-process Redis)")
	f.DurationVar(&ttl, "ttl", 2*time.Second, "lease TTL the adapter is asked for")
	f.StringVar(&dir, "dir", "", "the adapter's working directory (default: this one)")
	f.StringArrayVar(&opts, "recipe-opt", nil, "option key=value sent in hello (repeatable)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// checkClientCheckInput refuses client-check's bad input before the
// adapter or any service starts: an unknown backend, a malformed endpoint,
// a TTL that is not positive, a working directory or an adapter program
// that is not there.
func checkClientCheckInput(backend string, endpoints []string, ttl time.Duration, dir, prog string) error {
	if _, err := targets.Lookup(backend); err != nil {
		return &usageError{fmt.Errorf("--backend: %w", err)}
	}
	for _, ep := range endpoints {
		host, port, err := net.SplitHostPort(ep)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return &usageError{fmt.Errorf("--endpoints %q: want host:port, e.g. 127.0.0.1:2379", ep)}
		}
	}
	if ttl <= 0 {
		return &usageError{fmt.Errorf("--ttl must be positive, got %v (e.g. 2s)", ttl)}
	}
	if dir != "" {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return &usageError{fmt.Errorf("--dir %s: no such directory (the adapter's working directory; leave it out for this one)", dir)}
		}
	}
	path := prog
	if strings.Contains(prog, "/") && !filepath.IsAbs(prog) && dir != "" {
		path = filepath.Join(dir, prog)
	}
	if strings.Contains(prog, "/") {
		if fi, err := os.Stat(path); err != nil || fi.IsDir() {
			return &usageError{fmt.Errorf("adapter program %s: no such file (the command after -- runs in --dir, default this directory)", path)}
		}
	} else if _, err := exec.LookPath(prog); err != nil {
		return &usageError{fmt.Errorf("adapter program %s: not found on PATH (install it, or give its path)", prog)}
	}
	return nil
}

// checkService is the lock service client-check runs against: in-process
// Redis servers for the Redis-protocol backends, else the user's
// endpoints.
func checkService(backend string, endpoints []string) (external.Service, func(), error) {
	if len(endpoints) > 0 {
		return external.Service{
			Backend: backend, Endpoints: endpoints,
			Describe: fmt.Sprintf("%s at %s (leases expire by waiting their TTL)", backend, strings.Join(endpoints, ", ")),
			Expire: func(ctx context.Context, ttl time.Duration) error {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(ttl + time.Second):
					return nil
				}
			},
		}, func() {}, nil
	}
	n, ok := redisMasters[backend]
	if !ok {
		return external.Service{}, nil, &usageError{fmt.Errorf("--backend %s: give --endpoints of a %s you run on loopback (client-check brings its own service only for redis and redlock)", backend, backend)}
	}
	var servers []*miniredis.Miniredis
	stop := func() {
		for _, m := range servers {
			m.Close()
		}
	}
	for range n {
		m := miniredis.NewMiniRedis()
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			stop()
			return external.Service{}, nil, fmt.Errorf("start an in-process Redis: %w", err)
		}
		servers = append(servers, m)
		endpoints = append(endpoints, m.Addr())
	}
	return external.Service{
		Backend: backend, Endpoints: endpoints,
		Describe: fmt.Sprintf("%d in-process Redis (miniredis %s) at %s; leases expire when client-check moves its clock", n, miniredisVersion, strings.Join(endpoints, ", ")),
		Expire: func(_ context.Context, ttl time.Duration) error {
			for _, m := range servers {
				m.FastForward(ttl + 100*time.Millisecond)
			}
			return nil
		},
		Advance: func(_ context.Context, d time.Duration) error {
			for _, m := range servers {
				m.FastForward(d)
			}
			return nil
		},
	}, stop, nil
}
