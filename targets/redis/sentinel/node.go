package sentinel

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/splitbrain/splitbrain/internal/clockskew"
	"github.com/splitbrain/splitbrain/targets/redis/node"
)

// NodeConfig is one node's configuration: its Redis and its Sentinel.
type NodeConfig struct {
	// Dir is the node's state directory: both configuration files (which
	// Sentinel rewrites as it learns, and rewrites in Redis's when it
	// reconfigures a node) and Redis's append-only file.
	Dir string
	// Nodes are the addresses of every node, the first primary first, and
	// Index this node's place among them: node 0 starts as the primary,
	// the others as its replicas, and every Sentinel starts knowing the
	// replicas and the other Sentinels (instead of finding them within
	// 10 s).
	Nodes []netip.Addr
	Index int
	// Persistence is the single Redis's durability setting ("none",
	// "aof-always", "aof-everysec", "aof-no").
	Persistence string
	// MinReplicas and MaxLag are min-replicas-to-write and
	// min-replicas-max-lag (seconds): a primary with fewer replicas that
	// acknowledged within MaxLag refuses writes.
	MinReplicas, MaxLag int
	// DownAfter is how long Sentinel waits for an answer before it thinks
	// an instance down (down-after-milliseconds), and FailoverTimeout its
	// failover-timeout.
	DownAfter, FailoverTimeout time.Duration
}

// DefaultNodeConfig is a node's configuration before its flags: Redis's own
// defaults for replication safety (no min-replicas), a Sentinel that
// fails over 2 s after it lost the primary.
func DefaultNodeConfig() NodeConfig {
	return NodeConfig{Dir: DataDir, Persistence: "none", MaxLag: 10, DownAfter: 2 * time.Second, FailoverTimeout: 6 * time.Second}
}

// Validate returns the first problem with c.
func (c NodeConfig) Validate() error {
	switch {
	case !filepath.IsAbs(c.Dir):
		return fmt.Errorf("--dir %q: want an absolute path", c.Dir)
	case len(c.Nodes) < 2 || slices.ContainsFunc(c.Nodes, func(a netip.Addr) bool { return !a.IsValid() }):
		return errors.New("--nodes: want every node's IP address, the first primary's first")
	case c.Index < 0 || c.Index >= len(c.Nodes):
		return fmt.Errorf("--index %d: want 0..%d", c.Index, len(c.Nodes)-1)
	case c.MinReplicas < 0 || c.MinReplicas >= len(c.Nodes):
		return fmt.Errorf("--min-replicas-to-write %d: want 0..%d", c.MinReplicas, len(c.Nodes)-1)
	case c.MaxLag < 1:
		return fmt.Errorf("--min-replicas-max-lag %d: want at least 1 (seconds)", c.MaxLag)
	case c.DownAfter < 100*time.Millisecond:
		return fmt.Errorf("--down-after %v: want at least 100ms", c.DownAfter)
	case c.FailoverTimeout < time.Second:
		return fmt.Errorf("--failover-timeout %v: want at least 1s", c.FailoverTimeout)
	}
	if _, err := node.ServerArgs(c.Persistence); err != nil {
		return err
	}
	return nil
}

// RedisConf is the node's redis.conf as first written. Sentinel rewrites
// its replicaof line when it reconfigures the node (CONFIG REWRITE).
func (c NodeConfig) RedisConf() string {
	lines := []string{
		"port " + strconv.Itoa(node.Port),
		"bind 0.0.0.0",
		"protected-mode no",
		`save ""`,
		`logfile ""`,
		"loglevel notice",
		"dir " + c.Dir,
		// A full resynchronisation streams the snapshot at once (no 5 s
		// wait for more replicas): a restarted replica serves again
		// within a second.
		"repl-diskless-sync yes",
		"repl-diskless-sync-delay 0",
		"min-replicas-to-write " + strconv.Itoa(c.MinReplicas),
		"min-replicas-max-lag " + strconv.Itoa(c.MaxLag),
	}
	switch c.Persistence {
	case "aof-always":
		lines = append(lines, "appendonly yes", "appendfsync always")
	case "aof-everysec":
		lines = append(lines, "appendonly yes", "appendfsync everysec")
	case "aof-no":
		lines = append(lines, "appendonly yes", "appendfsync no")
	default:
		lines = append(lines, "appendonly no")
	}
	if c.Index > 0 {
		lines = append(lines, fmt.Sprintf("replicaof %s %d", c.Nodes[0], node.Port))
	}
	return strings.Join(lines, "\n") + "\n"
}

// SentinelConf is the node's sentinel.conf as first written; Sentinel adds
// what it learns (its id, the replicas and Sentinels it found, the
// current epoch and primary) and keeps it across restarts.
func (c NodeConfig) SentinelConf() string {
	lines := []string{
		"port " + strconv.Itoa(SentinelPort),
		"bind 0.0.0.0",
		"protected-mode no",
		`logfile ""`,
		"dir " + c.Dir,
		"sentinel resolve-hostnames no",
		"sentinel myid " + sentinelID(c.Index),
		fmt.Sprintf("sentinel monitor %s %s %d %d", MasterName, c.Nodes[0], node.Port, Quorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", MasterName, c.DownAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s %d", MasterName, c.FailoverTimeout.Milliseconds()),
		fmt.Sprintf("sentinel parallel-syncs %s 1", MasterName),
	}
	for i, a := range c.Nodes {
		if i > 0 {
			lines = append(lines, fmt.Sprintf("sentinel known-replica %s %s %d", MasterName, a, node.Port))
		}
		if i != c.Index {
			lines = append(lines, fmt.Sprintf("sentinel known-sentinel %s %s %d %s", MasterName, a, SentinelPort, sentinelID(i)))
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// sentinelID is the Sentinel id of node i (40 hex digits, as Sentinel's
// own): fixed, so that each Sentinel's configuration can name the others.
func sentinelID(i int) string { return fmt.Sprintf("%040x", i+1) }

// Config files in the state directory.
const (
	redisConfFile    = "redis.conf"
	sentinelConfFile = "sentinel.conf"
)

// Prepare writes both configuration files when the state directory has
// none (the node's first start); a restarted node keeps what Redis and
// Sentinel rewrote.
func (c NodeConfig) Prepare(log *slog.Logger) error {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	for name, body := range map[string]string{redisConfFile: c.RedisConf(), sentinelConfFile: c.SentinelConf()} {
		path := filepath.Join(c.Dir, name)
		if _, err := os.Stat(path); err == nil {
			log.Info("keeping the configuration of an earlier start", "file", path)
			continue
		}
		// Written whole or not at all: a kill mid-write must not leave
		// half a file the next start would keep.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

// Run starts the node's Sentinel and replaces the calling process with
// Redis under the clock shim: Redis is the node's main process (the clock
// nemesis skews it), its Sentinel a child that dies with the node.
func (c NodeConfig) Run(log *slog.Logger) error {
	s := exec.Command("redis-sentinel", filepath.Join(c.Dir, sentinelConfFile))
	s.Stdout, s.Stderr = os.Stdout, os.Stderr
	if err := s.Start(); err != nil {
		return fmt.Errorf("start redis-sentinel: %w", err)
	}
	argv := clockskew.PreloadCommand("redis-server", filepath.Join(c.Dir, redisConfFile))
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("exec %s: %w", argv[0], err)
	}
	log.Info("exec redis-server", "argv", argv, "sentinel_pid", s.Process.Pid)
	if err := syscall.Exec(path, argv, os.Environ()); err != nil {
		return fmt.Errorf("exec %s: %w", argv[0], err)
	}
	return nil
}

// addrsFlag parses a comma-separated list of IP addresses.
type addrsFlag struct{ as *[]netip.Addr }

func (f addrsFlag) String() string {
	if f.as == nil {
		return ""
	}
	out := make([]string, len(*f.as))
	for i, a := range *f.as {
		out[i] = a.String()
	}
	return strings.Join(out, ",")
}

func (f addrsFlag) Set(v string) error {
	var as []netip.Addr
	for _, s := range strings.Split(v, ",") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("want IP addresses: %w", err)
		}
		as = append(as, a)
	}
	*f.as = as
	return nil
}

// NodeFlags registers the node program's flags on fs and returns the
// check of their values and the program: Prepare, then Run.
func NodeFlags(fs *flag.FlagSet) (func() error, func(context.Context, *slog.Logger) error) {
	c := DefaultNodeConfig()
	fs.StringVar(&c.Dir, "dir", c.Dir, "state directory (configuration files written on the first start, kept across restarts)")
	fs.Var(addrsFlag{&c.Nodes}, "nodes", "every node's IP address, comma-separated, the first primary's first")
	fs.IntVar(&c.Index, "index", 0, "this node's place in --nodes (0: the first primary)")
	fs.StringVar(&c.Persistence, "persistence", c.Persistence, "none, aof-always, aof-everysec or aof-no")
	fs.IntVar(&c.MinReplicas, "min-replicas-to-write", c.MinReplicas, "replicas a primary needs to accept writes")
	fs.IntVar(&c.MaxLag, "min-replicas-max-lag", c.MaxLag, "seconds since a replica's last acknowledgement for it to count")
	fs.DurationVar(&c.DownAfter, "down-after", c.DownAfter, "Sentinel's down-after-milliseconds")
	fs.DurationVar(&c.FailoverTimeout, "failover-timeout", c.FailoverTimeout, "Sentinel's failover-timeout")
	return func() error { return c.Validate() }, func(_ context.Context, log *slog.Logger) error {
		if err := c.Prepare(log); err != nil {
			return err
		}
		return c.Run(log)
	}
}

// Command is the node program's command line for c (the splitbrain binary
// at self).
func (c NodeConfig) Command(self string) []string {
	addrs := make([]string, len(c.Nodes))
	for i, a := range c.Nodes {
		addrs[i] = a.String()
	}
	cmd := []string{self, ProgramName, "--dir", c.Dir, "--nodes", strings.Join(addrs, ","), "--index", strconv.Itoa(c.Index),
		"--persistence", c.Persistence,
		"--min-replicas-to-write", strconv.Itoa(c.MinReplicas),
		"--min-replicas-max-lag", strconv.Itoa(c.MaxLag),
		"--down-after", c.DownAfter.String(), "--failover-timeout", c.FailoverTimeout.String()}
	return cmd
}
