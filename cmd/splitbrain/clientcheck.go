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

	"github.com/spf13/cobra"

	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/external"
)

func newClientCheckCmd(g *globalFlags) *cobra.Command {
	var (
		backend   string
		endpoints []string
		ttl       time.Duration
		dir       string
		opts      []string
		asJSON    bool
		recipe    string
	)
	cmd := &cobra.Command{
		Use:   "client-check [flags] {-- CMD [ARGS...] | --recipe KIND}",
		Short: "Check a lock client adapter against the client protocol, without Docker",
		Long: "client-check runs your adapter (docs/client-protocol.md) twice against a lock service and names every\n" +
			"protocol mistake in plain words: the handshake, busy between two instances on one key, release and\n" +
			"re-acquire, tokens growing, not_owner after expiry, deadlines, close. For the Redis-protocol backends\n" +
			"(redis, redlock) the service is an in-process Redis (miniredis; five of them for redlock) whose clock\n" +
			"client-check moves to expire leases; for any other backend give --endpoints of a service you run on\n" +
			"loopback, and leases expire by waiting their TTL. --recipe KIND checks a shipped Go recipe instead,\n" +
			"served over the same protocol by this binary (the hidden `splitbrain adapter KIND`): the built-in\n" +
			"clients are held to the contract a user's adapter is. Exit 0 when every step passes, 1 otherwise.",
		Example: "  splitbrain client-check -- python3 targets/redis/redispy/redis_py_lock.py\n" +
			"  splitbrain client-check --backend etcd --endpoints 127.0.0.1:2379 -- ./my-etcd-adapter\n" +
			"  splitbrain client-check --recipe redsync --backend redlock",
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case recipe != "" && len(args) > 0:
				return &usageError{errors.New("give either --recipe or the adapter's command after --, not both")}
			case recipe == "" && len(args) == 0:
				return &usageError{errors.New("give the adapter's command after --, e.g. client-check -- python3 my_lock.py (or --recipe KIND for a shipped one)")}
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
			if recipe != "" {
				if args, err = recipeAdapter(recipe, &backend, cmd.Flags().Changed("backend")); err != nil {
					return err
				}
			}
			if err := checkClientCheckInput(backend, endpoints, ttl, dir, args[0]); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Minute)
			defer cancel()
			b, _ := targets.Lookup(backend) // checked above
			svc, stop, err := external.ServiceFor(ctx, b, endpoints)
			if errors.Is(err, external.ErrNoLocal) {
				return &usageError{fmt.Errorf("--backend %s: give --endpoints of the %s you run on loopback (client-check brings its own service only for %s)", backend, backend, strings.Join(localBackends(), ", "))}
			}
			if err != nil {
				return err
			}
			defer stop()
			command := args[0]
			if len(args) > 1 {
				command = runtime.ShellLine(args)
			}
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
	f.StringVar(&recipe, "recipe", "", "check a shipped Go recipe (a lock client built in), served over the protocol, instead of an adapter; --backend defaults to the first it serves")
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

// recipeAdapter is the command line of this binary serving the shipped
// Go recipe kind over the client protocol; it sets *backend to the first
// backend the recipe serves unless the user gave one.
func recipeAdapter(kind string, backend *string, backendGiven bool) ([]string, error) {
	r, err := targets.LookupRecipe(kind)
	if err != nil {
		return nil, &usageError{fmt.Errorf("--recipe: %w", err)}
	}
	if r.New == nil {
		return nil, &usageError{fmt.Errorf("--recipe %s runs an adapter process of its own (%s): check it with client-check -- %s, in the folder that holds it", kind, r.Adapter, r.Adapter)}
	}
	if !backendGiven {
		*backend = r.Backends[0]
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("--recipe: where this binary is: %w", err)
	}
	return []string{self, "adapter", kind}, nil
}

// localBackends names the backends client-check can run in process.
func localBackends() []string {
	var out []string
	for _, b := range targets.Backends() {
		if b.Local != nil {
			out = append(out, b.Name)
		}
	}
	return out
}

// newAdapterCmd is the hidden `splitbrain adapter KIND`: a shipped Go
// recipe speaking the client protocol on stdin and stdout.
func newAdapterCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:    "adapter KIND",
		Short:  "Serve a shipped Go lock recipe over the client protocol on stdin/stdout (client-check --recipe runs it)",
		Hidden: true,
		Args:   exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := g.logger(os.Stderr)
			if err != nil {
				return err
			}
			r, err := targets.LookupRecipe(args[0])
			if err != nil {
				return &usageError{err}
			}
			return external.Serve(cmd.Context(), r, os.Stdin, os.Stdout, log)
		},
	}
}
