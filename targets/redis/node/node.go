// Package node runs Redis servers for the backends made of Redis nodes:
// the server's command line with its persistence setting, the LD_PRELOAD
// clock shim it runs under (so that the clock nemesis can skew Redis's own
// clock, by which it expires keys; without a control file the shim adds
// nothing), and how to ask a server for its time and whether it serves.
//
//	persistence=none        the default: no RDB, no AOF. A killed Redis
//	                        comes back empty: its locks are gone and its
//	                        INCR token counters start again at 1, so the
//	                        tokens it grants go backwards (fence order
//	                        broken; see docs/redis-persistence.md)
//	persistence=aof-always  append-only file fsynced before every reply
//	                        (appendfsync always): a grant and its token
//	                        survive a SIGKILL
//	persistence=aof-everysec the AOF written before every reply, fsynced
//	                        once a second: a kill loses nothing (the
//	                        kernel has it), a power loss the last second
//	persistence=aof-no      the AOF written before every reply, never
//	                        fsynced by Redis (the kernel writes it back
//	                        within about 30 s): a power loss loses more
package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/internal/clockskew"
	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
)

// Port is Redis's port.
const Port = 6379

// Persistence is a Redis server's durability setting (the backends that
// run Redis nodes take it); [ServerArgs] reads its value.
var Persistence = option.Enum("persistence",
	"none: a killed Redis forgets locks and token counters; aof-always: append-only file fsynced before every reply; aof-everysec: fsynced once a second; aof-no: never fsynced by Redis (appendfsync no)",
	"none", "aof-always", "aof-everysec", "aof-no")

// ClockShim is the LD_PRELOAD clock shim of Redis images: the C source
// compiled on this machine with gcc ($CC) into the path the server's
// command preloads, cached by the hash of its source, flags, compiler and
// architecture. The image's Debian release is the host's own (bookworm),
// so the library links against the same libc.
var ClockShim = images.BuiltFile("clockshim.so", clockskew.ShimPath, 0o644,
	func() []string {
		return []string{string(clockskew.ShimSource()), strings.Join(clockskew.ShimCFlags, " "), os.Getenv("CC")}
	},
	clockskew.BuildShim)

// DataDir is where a Redis with persistence keeps its append-only file (the
// Debian package's directory; kept across a restart of the node).
const DataDir = "/var/lib/redis"

// ServerArgs is the Redis server's command line, reachable on the run's
// network, with persistence (see the package comment: "", "none",
// "aof-always", "aof-everysec", "aof-no").
func ServerArgs(persistence string) ([]string, error) {
	c := []string{"redis-server", "--port", strconv.Itoa(Port), "--bind", "0.0.0.0",
		"--protected-mode", "no", "--save", "", "--loglevel", "notice"}
	switch persistence {
	case "", "none":
		return append(c, "--appendonly", "no"), nil
	case "aof-always":
		return append(c, "--appendonly", "yes", "--appendfsync", "always", "--dir", DataDir), nil
	case "aof-everysec":
		return append(c, "--appendonly", "yes", "--appendfsync", "everysec", "--dir", DataDir), nil
	case "aof-no":
		return append(c, "--appendonly", "yes", "--appendfsync", "no", "--dir", DataDir), nil
	}
	return nil, fmt.Errorf("redis: persistence=%q: want none, aof-always, aof-everysec or aof-no", persistence)
}

// WaitReady waits until the Redis server in n answers PING.
func WaitReady(ctx context.Context, n runtime.Node) error {
	return runtime.Poll(ctx, fmt.Sprintf("redis on %s never answered PING (check its log in the results directory)", n.Name()), 20*time.Second, 100*time.Millisecond,
		func(ctx context.Context) error {
			out, err := runtime.Run(ctx, n, "redis-cli", "-h", "127.0.0.1", "-p", strconv.Itoa(Port), "ping")
			if err == nil && strings.TrimSpace(string(out)) != "PONG" {
				err = fmt.Errorf("PING answered %q", out)
			}
			return err
		})
}

// ServerTime asks the Redis server in n for its time (TIME, run with
// redis-cli inside the node): the wall clock of the Redis process itself,
// skewed or not, to microseconds. It is the clock nemesis's way to verify
// a skew of Redis.
func ServerTime(ctx context.Context, n runtime.Node) (time.Time, error) {
	out, err := runtime.Run(ctx, n, "redis-cli", "-h", "127.0.0.1", "-p", strconv.Itoa(Port), "TIME")
	if err != nil {
		return time.Time{}, fmt.Errorf("redis TIME: %w", err)
	}
	return parseTime(out)
}

// parseTime reads redis-cli's TIME answer: seconds and microseconds, one
// per line.
func parseTime(out []byte) (time.Time, error) {
	f := strings.Fields(string(out))
	if len(f) != 2 {
		return time.Time{}, fmt.Errorf("redis TIME answered %q, want seconds and microseconds", out)
	}
	sec, err1 := strconv.ParseInt(f[0], 10, 64)
	usec, err2 := strconv.ParseInt(f[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil || usec < 0 || usec >= 1e6 {
		return time.Time{}, fmt.Errorf("redis TIME answered %q: %w", out, errors.Join(err, errors.New("bad number")))
	}
	return time.Unix(sec, usec*1000), nil
}

// Command is a Redis node's main process with persistence (as
// ServerArgs) under the clock shim.
func Command(persistence string) ([]string, error) {
	c, err := ServerArgs(persistence)
	if err != nil {
		return nil, err
	}
	return clockskew.PreloadCommand(c...), nil
}
