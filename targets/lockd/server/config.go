package server

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// Version is the lockd version reported by GET /v1/status.
const Version = "0.1.0"

// Peer is one member of the static cluster configuration.
type Peer struct {
	// ID is the node's Raft server ID ("n1").
	ID string
	// Addr is the node's Raft address as the other nodes reach it
	// ("10.0.0.11:7001").
	Addr string
}

// Config configures one lockd node. Start from [DefaultConfig]; the zero
// value is not valid.
type Config struct {
	// ID is this node's Raft server ID; it must appear in Peers.
	ID string
	// RaftAddr is the address the Raft TCP transport listens on. Empty
	// means this node's address in Peers.
	RaftAddr string
	// HTTPAddr is the address the HTTP API listens on (":7002").
	HTTPAddr string
	// HTTPAdvertise is the HTTP address other nodes hand to clients when
	// they redirect them here. Empty means HTTPAddr if it names a host,
	// otherwise the host of this node's Peers address with HTTPAddr's port.
	HTTPAdvertise string
	// Peers is the full static cluster configuration, this node included.
	// Every node bootstraps with it when it has no Raft state yet.
	Peers []Peer
	// DataDir holds the Raft log, stable store and snapshots.
	DataDir string

	// MaxTTL is the longest lease a client may ask for. A new leader waits
	// it out (plus LeaseMargin) before it frees locks it inherited.
	MaxTTL time.Duration
	// DefaultTTL is the lease granted when a request names none.
	DefaultTTL time.Duration
	// LeaseMargin is added to the wait-out window of a new leader, to
	// cover clock-rate drift and election latency.
	LeaseMargin time.Duration
	// LockDelay keeps a lock ungrantable for this long after its lease
	// lapsed without a release (0 = off).
	LockDelay time.Duration
	// MaxWait caps the server-side wait an acquire request may ask for.
	MaxWait time.Duration
	// ApplyTimeout bounds how long a command may take to commit.
	ApplyTimeout time.Duration
	// ExpiryInterval is how often the leader checks lease deadlines.
	ExpiryInterval time.Duration

	// HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout and
	// CommitTimeout are passed to Raft (see raft.Config).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// SnapshotInterval and SnapshotThreshold control how often Raft
	// snapshots the lock state; SnapshotRetain is how many are kept.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	SnapshotRetain    int

	// Clock measures lease deadlines; nil means the system's monotonic
	// clock. Tests inject a controllable one.
	Clock Clock

	// NoSync turns off fsync in the Raft log and stable store
	// (hashicorp/raft-boltdb's NoSync): a node acknowledges entries it has
	// only handed to the kernel. Snapshots are still fsynced.
	NoSync bool
}

// DefaultConfig returns a Config with every tunable set to its default;
// ID, Peers and usually DataDir still have to be filled in.
func DefaultConfig() Config {
	rc := raft.DefaultConfig()
	return Config{
		HTTPAddr:           ":7002",
		DataDir:            "lockd-data",
		MaxTTL:             60 * time.Second,
		DefaultTTL:         10 * time.Second,
		LeaseMargin:        time.Second,
		MaxWait:            10 * time.Second,
		ApplyTimeout:       3 * time.Second,
		ExpiryInterval:     50 * time.Millisecond,
		HeartbeatTimeout:   rc.HeartbeatTimeout,
		ElectionTimeout:    rc.ElectionTimeout,
		LeaderLeaseTimeout: rc.LeaderLeaseTimeout,
		CommitTimeout:      rc.CommitTimeout,
		SnapshotInterval:   rc.SnapshotInterval,
		SnapshotThreshold:  rc.SnapshotThreshold,
		SnapshotRetain:     2,
	}
}

// RegisterFlags binds c's fields to flags on fs, using c's current values
// as the defaults. Call [Config.Validate] after parsing.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ID, "id", c.ID, "this node's Raft server ID (must appear in --peers)")
	fs.StringVar(&c.RaftAddr, "raft-addr", c.RaftAddr, "Raft TCP listen address (default: this node's --peers address)")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP API listen address")
	fs.StringVar(&c.HTTPAdvertise, "http-advertise", c.HTTPAdvertise, "HTTP address given to redirected clients (default: derived from --http-addr and --peers)")
	fs.Var((*peerList)(&c.Peers), "peers", "static cluster members as id=host:port,... (this node included)")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for the Raft log, stable store and snapshots")
	fs.DurationVar(&c.MaxTTL, "max-ttl", c.MaxTTL, "longest lease a client may ask for")
	fs.DurationVar(&c.DefaultTTL, "default-ttl", c.DefaultTTL, "lease granted when a request names none")
	fs.DurationVar(&c.LeaseMargin, "lease-margin", c.LeaseMargin, "extra time a new leader waits beyond --max-ttl before freeing inherited locks")
	fs.DurationVar(&c.LockDelay, "lock-delay", c.LockDelay, "how long a lock stays ungrantable after its lease lapsed unreleased (0 = off)")
	fs.DurationVar(&c.MaxWait, "max-wait", c.MaxWait, "cap on the server-side wait of an acquire request")
	fs.DurationVar(&c.ApplyTimeout, "apply-timeout", c.ApplyTimeout, "how long a command may take to commit")
	fs.DurationVar(&c.ExpiryInterval, "expiry-interval", c.ExpiryInterval, "how often the leader checks lease deadlines")
	fs.DurationVar(&c.HeartbeatTimeout, "heartbeat-timeout", c.HeartbeatTimeout, "Raft heartbeat timeout")
	fs.DurationVar(&c.ElectionTimeout, "election-timeout", c.ElectionTimeout, "Raft election timeout")
	fs.DurationVar(&c.LeaderLeaseTimeout, "leader-lease-timeout", c.LeaderLeaseTimeout, "Raft leader lease timeout (step down after this long without a quorum)")
	fs.DurationVar(&c.CommitTimeout, "commit-timeout", c.CommitTimeout, "Raft commit timeout")
	fs.DurationVar(&c.SnapshotInterval, "snapshot-interval", c.SnapshotInterval, "how often Raft checks whether to snapshot")
	fs.Uint64Var(&c.SnapshotThreshold, "snapshot-threshold", c.SnapshotThreshold, "log entries between snapshots")
	fs.IntVar(&c.SnapshotRetain, "snapshot-retain", c.SnapshotRetain, "snapshots to keep")
	fs.BoolVar(&c.NoSync, "no-sync", c.NoSync, "write the Raft log without fsync (a power loss may lose acknowledged entries)")
}

// ParseFlags parses lockd's command-line flags (see [Config.RegisterFlags])
// over [DefaultConfig] and validates the result. Usage text is not printed;
// -h yields flag.ErrHelp.
func ParseFlags(args []string) (Config, error) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("lockd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return Config{}, fmt.Errorf("lockd flags: %w", err)
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("lockd flags: unexpected arguments %q", fs.Args())
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Validate reports every problem with c, one per line, or nil.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if c.ID == "" {
		bad("--id is required")
	} else if strings.ContainsAny(c.ID, "=, \t") {
		bad("--id %q must not contain '=', ',' or spaces", c.ID)
	}
	if len(c.Peers) == 0 {
		bad("--peers is required (id=host:port,...)")
	}
	ids, addrs := map[string]bool{}, map[string]bool{}
	self := false
	for _, p := range c.Peers {
		switch {
		case p.ID == "":
			bad("--peers: entry %q has no id", p.Addr)
		case ids[p.ID]:
			bad("--peers: id %q appears twice", p.ID)
		}
		ids[p.ID] = true
		if err := checkHostPort(p.Addr, true); err != nil {
			bad("--peers: %s: %w", p.ID, err)
		} else if addrs[p.Addr] {
			bad("--peers: address %q appears twice", p.Addr)
		}
		addrs[p.Addr] = true
		if p.ID == c.ID {
			self = true
		}
	}
	if c.ID != "" && len(c.Peers) > 0 && !self {
		bad("--id %q is not one of --peers", c.ID)
	}
	if c.RaftAddr != "" {
		if err := checkHostPort(c.RaftAddr, false); err != nil {
			bad("--raft-addr: %w", err)
		}
	}
	if err := checkHostPort(c.HTTPAddr, false); err != nil {
		bad("--http-addr: %w", err)
	}
	if c.HTTPAdvertise != "" {
		if err := checkHostPort(c.HTTPAdvertise, true); err != nil {
			bad("--http-advertise: %w", err)
		}
	}
	if c.DataDir == "" {
		bad("--data-dir is required")
	}
	if c.MaxTTL <= 0 {
		bad("--max-ttl must be positive, got %v", c.MaxTTL)
	}
	if c.DefaultTTL <= 0 || c.DefaultTTL > c.MaxTTL {
		bad("--default-ttl must be in (0, --max-ttl=%v], got %v", c.MaxTTL, c.DefaultTTL)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--lease-margin", c.LeaseMargin}, {"--lock-delay", c.LockDelay}, {"--max-wait", c.MaxWait}} {
		if d.v < 0 {
			bad("%s must not be negative, got %v", d.name, d.v)
		}
	}
	if c.ApplyTimeout <= 0 {
		bad("--apply-timeout must be positive, got %v", c.ApplyTimeout)
	}
	if c.ExpiryInterval <= 0 {
		bad("--expiry-interval must be positive, got %v", c.ExpiryInterval)
	}
	if c.SnapshotRetain < 1 {
		bad("--snapshot-retain must be at least 1, got %d", c.SnapshotRetain)
	}
	if c.ID != "" {
		if err := raft.ValidateConfig(c.raftConfig()); err != nil {
			bad("raft timing: %w", err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("invalid lockd config:\n%w", errors.Join(errs...))
}

// raftConfig is the Raft configuration c asks for, without NotifyCh and
// Logger.
func (c Config) raftConfig() *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.ID)
	rc.HeartbeatTimeout = c.HeartbeatTimeout
	rc.ElectionTimeout = c.ElectionTimeout
	rc.LeaderLeaseTimeout = c.LeaderLeaseTimeout
	rc.CommitTimeout = c.CommitTimeout
	rc.SnapshotInterval = c.SnapshotInterval
	rc.SnapshotThreshold = c.SnapshotThreshold
	return rc
}

// selfPeer is this node's entry in Peers.
func (c Config) selfPeer() Peer {
	for _, p := range c.Peers {
		if p.ID == c.ID {
			return p
		}
	}
	return Peer{}
}

// raftBind is the address the Raft transport listens on.
func (c Config) raftBind() string {
	if c.RaftAddr != "" {
		return c.RaftAddr
	}
	return c.selfPeer().Addr
}

// httpAdvertise is the HTTP address redirected clients are sent to.
func (c Config) httpAdvertise() string {
	if c.HTTPAdvertise != "" {
		return c.HTTPAdvertise
	}
	host, port, err := net.SplitHostPort(c.HTTPAddr)
	if err != nil {
		return c.HTTPAddr
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return c.HTTPAddr
	}
	peerHost, _, err := net.SplitHostPort(c.selfPeer().Addr)
	if err != nil {
		return c.HTTPAddr
	}
	return net.JoinHostPort(peerHost, port)
}

// raftConfiguration is the bootstrap configuration built from Peers.
func (c Config) raftConfiguration() raft.Configuration {
	var conf raft.Configuration
	for _, p := range c.Peers {
		conf.Servers = append(conf.Servers, raft.Server{
			Suffrage: raft.Voter,
			ID:       raft.ServerID(p.ID),
			Address:  raft.ServerAddress(p.Addr),
		})
	}
	return conf
}

// checkHostPort checks that s is host:port with a numeric port; needHost
// also requires a host.
func checkHostPort(s string, needHost bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", s, err)
	}
	if needHost && host == "" {
		return fmt.Errorf("%q has no host", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q has a bad port", s)
	}
	return nil
}

// peerList is the flag.Value behind --peers.
type peerList []Peer

var _ flag.Value = (*peerList)(nil)

func (l *peerList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, p := range *l {
		parts[i] = p.ID + "=" + p.Addr
	}
	return strings.Join(parts, ",")
}

func (l *peerList) Set(s string) error {
	peers, err := parsePeers(s)
	if err != nil {
		return err
	}
	*l = peers
	return nil
}

// parsePeers parses "n1=10.0.0.11:7001,n2=10.0.0.12:7001".
func parsePeers(s string) ([]Peer, error) {
	var peers []Peer
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, addr, ok := strings.Cut(part, "=")
		id, addr = strings.TrimSpace(id), strings.TrimSpace(addr)
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("peer %q is not id=host:port", part)
		}
		peers = append(peers, Peer{ID: id, Addr: addr})
	}
	if len(peers) == 0 {
		return nil, errors.New("no peers given")
	}
	return peers, nil
}
