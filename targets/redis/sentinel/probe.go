package sentinel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/redis/node"
	"github.com/splitbrain/splitbrain/targets/redis/setnx"
)

// Status is what the health probe says of one node: its Redis's view of
// itself and its Sentinel's view of the primary.
type Status struct {
	// Role is Redis's role: "master" (the primary) or "slave".
	Role string `json:"role"`
	// Primary is a replica's primary (host:port) and LinkUp whether its
	// replication link is up.
	Primary string `json:"primary,omitempty"`
	LinkUp  bool   `json:"link_up,omitempty"`
	// Replicas is a primary's connected replicas.
	Replicas int `json:"replicas"`
	// Offset is the replication offset (master_repl_offset).
	Offset int64 `json:"offset"`
	// Version is redis_version and RunID the server's run_id (a restart
	// changes it).
	Version string `json:"version"`
	RunID   string `json:"run_id"`
	// Sentinel is the node's Sentinel's view of the primary, or
	// SentinelError why it gave none.
	Sentinel      *View  `json:"sentinel,omitempty"`
	SentinelError string `json:"sentinel_error,omitempty"`
}

// View is one Sentinel's view of the primary (SENTINEL MASTER).
type View struct {
	// Primary is the primary's address (ip:port).
	Primary string `json:"primary"`
	// Epoch is the configuration epoch of that choice: every failover
	// raises it.
	Epoch uint64 `json:"epoch"`
	// Sentinels and Replicas are the Sentinels (itself included) and
	// replicas it knows.
	Sentinels int `json:"sentinels"`
	Replicas  int `json:"replicas"`
	// Flags are its flags for the primary ("master", "master,s_down", ...).
	Flags string `json:"flags"`
}

// Probe asks the Redis at endpoint and the Sentinel beside it
// (SentinelPort on the same host) for their status.
func Probe(ctx context.Context, endpoint string) (Status, error) {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return Status{}, fmt.Errorf("redis-sentinel probe: endpoint %q: %w", endpoint, err)
	}
	rdb := goredis.NewClient(setnx.ClientOptions(endpoint))
	defer rdb.Close()
	info, err := rdb.Info(ctx, "server", "replication").Result()
	if err != nil {
		return Status{}, fmt.Errorf("redis-sentinel probe: redis INFO: %w", err)
	}
	s := ParseInfo(info)
	sc := goredis.NewSentinelClient(sentinelOptions(net.JoinHostPort(host, strconv.Itoa(SentinelPort))))
	defer sc.Close()
	m, err := sc.Master(ctx, MasterName).Result()
	if err != nil {
		s.SentinelError = err.Error()
		return s, nil
	}
	v, err := parseView(m)
	if err != nil {
		s.SentinelError = err.Error()
		return s, nil
	}
	s.Sentinel = &v
	return s, nil
}

// sentinelOptions are the settings of a client of the Sentinel at addr.
func sentinelOptions(addr string) *goredis.Options {
	return &goredis.Options{Addr: addr, DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, MaxRetries: -1}
}

// ParseInfo reads the fields of Status from Redis's INFO answer.
func ParseInfo(info string) Status {
	var s Status
	kv := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			kv[k] = v
		}
	}
	s.Role, s.Version, s.RunID = kv["role"], kv["redis_version"], kv["run_id"]
	if s.Role == "slave" {
		s.Primary = net.JoinHostPort(kv["master_host"], kv["master_port"])
		s.LinkUp = kv["master_link_status"] == "up"
		s.Offset, _ = strconv.ParseInt(kv["slave_repl_offset"], 10, 64)
	} else {
		s.Offset, _ = strconv.ParseInt(kv["master_repl_offset"], 10, 64)
	}
	s.Replicas, _ = strconv.Atoi(kv["connected_slaves"])
	return s
}

func parseView(m map[string]string) (View, error) {
	if m["ip"] == "" || m["port"] == "" {
		return View{}, errors.New("SENTINEL MASTER names no primary")
	}
	v := View{Primary: net.JoinHostPort(m["ip"], m["port"]), Flags: m["flags"]}
	var err1, err2, err3 error
	v.Epoch, err1 = strconv.ParseUint(m["config-epoch"], 10, 64)
	others, err2 := strconv.Atoi(m["num-other-sentinels"])
	v.Replicas, err3 = strconv.Atoi(m["num-slaves"])
	if err := errors.Join(err1, err2, err3); err != nil {
		return View{}, fmt.Errorf("SENTINEL MASTER: %w", err)
	}
	v.Sentinels = others + 1
	return v, nil
}

// status runs the probe inside n.
func status(ctx context.Context, n runtime.Node) (Status, error) {
	return targets.ProbeJSON[Status](ctx, n, selfPath(), "probe", Name,
		"--endpoint", net.JoinHostPort("127.0.0.1", strconv.Itoa(node.Port)))
}

// Primary picks the primary from the nodes' statuses: the address the
// Sentinels name in their latest configuration epoch, if that node says it
// is the primary; else the only node that says so. During a split (an old
// primary cut off with its Sentinel) two nodes say they are primary: the
// one the newest epoch chose is the primary.
func Primary(nodes []runtime.Node, sts []Status, errs []error) (runtime.Node, error) {
	var (
		best  string
		epoch uint64
		seen  bool
	)
	for i, s := range sts {
		if errs[i] != nil || s.Sentinel == nil || strings.Contains(s.Sentinel.Flags, "o_down") {
			continue
		}
		if !seen || s.Sentinel.Epoch > epoch {
			best, epoch, seen = s.Sentinel.Primary, s.Sentinel.Epoch, true
		}
	}
	var masters []runtime.Node
	for i, s := range sts {
		if errs[i] != nil || s.Role != "master" {
			continue
		}
		if seen && Endpoint(nodes[i]) == best {
			return nodes[i], nil
		}
		masters = append(masters, nodes[i])
	}
	if len(masters) == 1 {
		return masters[0], nil
	}
	return nil, fmt.Errorf("no primary: %d nodes say they are (Sentinels' latest choice %q, epoch %d): %w",
		len(masters), best, epoch, errors.Join(append(errs, errors.New("no single primary"))...))
}

// Healthy says whether the statuses show the backend serving: one primary
// with every replica linked to it, and every Sentinel naming it and
// knowing all the others and every replica.
func Healthy(nodes []runtime.Node, sts []Status) error {
	var primary string
	for i, s := range sts {
		if s.Role == "master" {
			if primary != "" {
				return fmt.Errorf("two primaries (%s and %s)", primary, nodes[i].Name())
			}
			primary = Endpoint(nodes[i])
		}
	}
	if primary == "" {
		return errors.New("no primary")
	}
	for i, s := range sts {
		n := nodes[i].Name()
		switch {
		case s.Role == "master" && s.Replicas != len(nodes)-1:
			return fmt.Errorf("primary %s has %d replicas connected, want %d", n, s.Replicas, len(nodes)-1)
		case s.Role != "master" && (s.Primary != primary || !s.LinkUp):
			return fmt.Errorf("replica %s: primary %s, link up %v; want %s up", n, s.Primary, s.LinkUp, primary)
		case s.Sentinel == nil:
			return fmt.Errorf("sentinel on %s: %s", n, s.SentinelError)
		case s.Sentinel.Primary != primary || s.Sentinel.Flags != "master":
			return fmt.Errorf("sentinel on %s: primary %s (%s), want %s", n, s.Sentinel.Primary, s.Sentinel.Flags, primary)
		case s.Sentinel.Sentinels != len(nodes) || s.Sentinel.Replicas != len(nodes)-1:
			return fmt.Errorf("sentinel on %s knows %d sentinels and %d replicas, want %d and %d", n, s.Sentinel.Sentinels, s.Sentinel.Replicas, len(nodes), len(nodes)-1)
		}
	}
	return nil
}
