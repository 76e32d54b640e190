package zookeeper

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/splitbrain/splitbrain/targets"
)

// Server settings: the member's ports, its Java, and the timing that fault
// tests want (see ServerConfig).
const (
	ClientPort   = 2181
	QuorumPort   = 2888
	ElectionPort = 3888
	// Java is the JVM of the zookeeper image (Debian's alternatives link to
	// the headless OpenJDK 17).
	Java = "/usr/bin/java"
	// Jar is ZooKeeper's server and client jar from Debian's
	// libzookeeper-java; its manifest's Class-Path names its dependencies.
	Jar = "/usr/share/java/zookeeper.jar"
	// LogJar is the SLF4J binding that sends the server's log to stderr
	// (without one SLF4J drops every line).
	LogJar = "/usr/share/java/slf4j-simple.jar"
	// MainClass starts a replicated member.
	MainClass = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
)

// FourLetterWords are the four-letter words members answer: the health
// probe's srvr and ruok; cons, whose connection times (est=, lresp=) are
// the JVM's own wall clock, which shows a clock skew from outside; mntr,
// conf and stat for people looking at a kept ensemble. ZooKeeper 3.5+
// answers only whitelisted words.
var FourLetterWords = []string{"srvr", "ruok", "mntr", "conf", "stat", "cons"}

// ServerConfig is one member's configuration: what `splitbrain zookeeper`
// writes into zoo.cfg before it becomes the JVM.
type ServerConfig struct {
	// ID is the member's number (myid), 1..255.
	ID int
	// Peers maps member numbers to addresses.
	Peers map[int]string
	// DataDir holds myid, the snapshots and the transaction log; a
	// restarted member finds them again.
	DataDir string
	// Tick is ZooKeeper's tickTime, its unit of time: followers are
	// dropped after SyncLimit ticks without the leader, the smallest
	// session timeout is MinSession.
	Tick time.Duration
	// InitLimit and SyncLimit are in ticks.
	InitLimit, SyncLimit int
	// MinSession and MaxSession bound the session timeouts clients may
	// negotiate (the lease TTL is the session timeout).
	MinSession, MaxSession time.Duration
	// HeapMB is the JVM's maximum heap.
	HeapMB int
	// JVMOpts are extra JVM options (quoted as one flag, split on spaces).
	JVMOpts string
	// Untuned drops the start-up flags (serial collector, C1 only, a
	// small initial heap): the JVM's defaults, for comparison.
	Untuned bool
	// NoForceSync turns ZooKeeper's forceSync off (the system property
	// zookeeper.forceSync=no): the member writes its transaction log
	// without fsync before it acknowledges a proposal.
	NoForceSync bool
}

// DefaultServerConfig is the timing used for fault tests: a tick of
// 200 ms, so sessions may be as short as 400 ms, and a sync limit of 10
// ticks, so a follower that loses its leader (or a leader its quorum)
// notices within 2 s. With 5 ticks (1 s) a loaded 2-core machine
// starved the JVMs into spurious elections.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		DataDir: DataDir, Tick: 200 * time.Millisecond, InitLimit: 50, SyncLimit: 10,
		MinSession: 400 * time.Millisecond, MaxSession: time.Minute, HeapMB: 256,
	}
}

// Validate returns the first problem with the configuration.
func (c ServerConfig) Validate() error {
	switch {
	case c.ID < 1 || c.ID > 255:
		return fmt.Errorf("--id %d: want 1..255", c.ID)
	case c.Peers[c.ID] == "":
		return fmt.Errorf("--peers names no member %d (this member)", c.ID)
	case !filepath.IsAbs(c.DataDir):
		return fmt.Errorf("--data-dir %q: want an absolute path", c.DataDir)
	case c.Tick < 10*time.Millisecond:
		return fmt.Errorf("--tick %v: want at least 10ms", c.Tick)
	case c.InitLimit < 1 || c.SyncLimit < 1:
		return errors.New("--init-limit and --sync-limit must be at least 1")
	case c.MinSession < 2*c.Tick || c.MaxSession < c.MinSession:
		return fmt.Errorf("session bounds %v..%v: want 2 ticks (%v) <= min <= max", c.MinSession, c.MaxSession, 2*c.Tick)
	case c.HeapMB < 32:
		return fmt.Errorf("--heap-mb %d: want at least 32", c.HeapMB)
	}
	return nil
}

// ZooCfg is the member's zoo.cfg.
func (c ServerConfig) ZooCfg() string {
	var b strings.Builder
	line := func(k string, v any) { fmt.Fprintf(&b, "%s=%v\n", k, v) }
	line("tickTime", c.Tick.Milliseconds())
	line("initLimit", c.InitLimit)
	line("syncLimit", c.SyncLimit)
	line("minSessionTimeout", c.MinSession.Milliseconds())
	line("maxSessionTimeout", c.MaxSession.Milliseconds())
	line("dataDir", c.DataDir)
	line("clientPort", ClientPort)
	// Listen on every address: the member's address is the container's.
	line("clientPortAddress", "0.0.0.0")
	line("quorumListenOnAllIPs", true)
	line("4lw.commands.whitelist", strings.Join(FourLetterWords, ","))
	// No admin server (Jetty costs start time); the health probe uses
	// the four-letter words.
	line("admin.enableServer", false)
	line("standaloneEnabled", false)
	line("reconfigEnabled", false)
	ids := make([]int, 0, len(c.Peers))
	for id := range c.Peers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		fmt.Fprintf(&b, "server.%d=%s:%d:%d;%d\n", id, c.Peers[id], QuorumPort, ElectionPort, ClientPort)
	}
	return b.String()
}

// Argv is the JVM's command line.
func (c ServerConfig) Argv() []string {
	argv := []string{Java, fmt.Sprintf("-Xmx%dm", c.HeapMB)}
	if !c.Untuned {
		// Start fast and small: the serial collector, C1 only, no perf
		// data file, the JDK's class-data archive.
		argv = append(argv, "-Xms32m", "-Xss512k",
			"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData", "-Xshare:auto")
	}
	argv = append(argv, "-Djava.net.preferIPv4Stack=true",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
		"-Dorg.slf4j.simpleLogger.showDateTime=true",
		"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
		"-Dzookeeper.jmx.log4j.disable=true",
		// Elections resend their votes at most every second (the default
		// backs off to a minute), so an ensemble whose members start, or
		// come back from a partition, at different times elects quickly.
		"-Dzookeeper.fastleader.maxNotificationInterval=1000")
	if c.NoForceSync {
		argv = append(argv, "-Dzookeeper.forceSync=no")
	}
	argv = append(argv, strings.Fields(c.JVMOpts)...)
	return append(argv, "-cp", Jar+":"+LogJar, MainClass, c.cfgPath())
}

func (c ServerConfig) cfgPath() string { return filepath.Join(c.DataDir, "zoo.cfg") }

// Prepare writes myid and zoo.cfg into the data directory (creating it);
// the snapshots and logs already there stay.
func (c ServerConfig) Prepare() error {
	if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
		return fmt.Errorf("zookeeper data dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(c.DataDir, "myid"), []byte(strconv.Itoa(c.ID)+"\n"), 0o644); err != nil {
		return fmt.Errorf("zookeeper myid: %w", err)
	}
	if err := os.WriteFile(c.cfgPath(), []byte(c.ZooCfg()), 0o644); err != nil {
		return fmt.Errorf("zookeeper zoo.cfg: %w", err)
	}
	return nil
}

// peersFlag parses --peers 1=10.0.0.2,2=10.0.0.3.
type peersFlag map[int]string

func (p peersFlag) String() string {
	var out []string
	for id, a := range p {
		out = append(out, fmt.Sprintf("%d=%s", id, a))
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func (p peersFlag) Set(s string) error {
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		id, err := strconv.Atoi(k)
		if !ok || err != nil || v == "" {
			return fmt.Errorf("peer %q: want ID=ADDRESS", kv)
		}
		p[id] = v
	}
	return nil
}

// ServerProgram is a member's main process, `splitbrain zookeeper --id N
// --peers ...`: it writes the member's configuration and replaces itself
// with the JVM (exec), so ZooKeeper is PID 1 of its node — a pause stops
// it, a kill kills it, and the clock nemesis skews it through the vDSO.
var ServerProgram = targets.Program{
	Name:  "zookeeper",
	Short: "ZooKeeper member: write its configuration, then exec the JVM (runs inside zookeeper nodes)",
	Flags: func(fs *flag.FlagSet) (func() error, func(context.Context, *slog.Logger) error) {
		c := DefaultServerConfig()
		c.Peers = map[int]string{}
		fs.IntVar(&c.ID, "id", 0, "this member's number (myid)")
		fs.Var(peersFlag(c.Peers), "peers", "every member as ID=ADDRESS, comma-separated")
		fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "data directory (myid, snapshots, transaction log, zoo.cfg)")
		fs.DurationVar(&c.Tick, "tick", c.Tick, "tickTime")
		fs.IntVar(&c.InitLimit, "init-limit", c.InitLimit, "initLimit, in ticks")
		fs.IntVar(&c.SyncLimit, "sync-limit", c.SyncLimit, "syncLimit, in ticks")
		fs.DurationVar(&c.MinSession, "min-session", c.MinSession, "minSessionTimeout")
		fs.DurationVar(&c.MaxSession, "max-session", c.MaxSession, "maxSessionTimeout")
		fs.IntVar(&c.HeapMB, "heap-mb", c.HeapMB, "JVM maximum heap, MiB")
		fs.StringVar(&c.JVMOpts, "jvm-opts", "", "extra JVM options, space-separated")
		fs.BoolVar(&c.Untuned, "untuned", false, "leave the JVM's start-up defaults (no serial collector, full JIT, default initial heap)")
		fs.BoolVar(&c.NoForceSync, "no-force-sync", false, "write the transaction log without fsync (zookeeper.forceSync=no)")
		// Closures, not method values: c is read after parsing.
		return func() error { return c.Validate() }, func(_ context.Context, log *slog.Logger) error {
			if err := c.Prepare(); err != nil {
				return err
			}
			argv := c.Argv()
			log.Info("exec zookeeper", "argv", argv)
			if err := syscall.Exec(argv[0], argv, os.Environ()); err != nil {
				return fmt.Errorf("exec %s: %w", argv[0], err)
			}
			return nil
		}
	},
}
