// Package redis is the single-node Redis target and Redlock's five
// independent masters. Their servers run as package node says (Debian's
// redis-server under the clock shim, persistence as a backend option); their
// default lock recipe is package setnx's SET NX PX with an INCR fencing
// token, and redsync's Redlock on the five masters.
//
// A single Redis is the anti-pattern of a lock backend treated as
// infallible: when it is paused or cut off every client stalls, and its key
// expiry follows its own clock. The recipe's options reproduce further
// anti-patterns (expiry=none, expiry=client, release=unchecked: package
// setnx), and persistence=none makes a killed Redis forget its locks and
// hand out its tokens again from 1 (docs/redis-persistence.md).
package redis

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/redis/node"
)

// Port is Redis's port.
const Port = node.Port

// ServerTime asks the Redis server in n for its time (node.ServerTime).
var ServerTime = node.ServerTime

// Role is the image role of Redis nodes.
const Role = "redis"

// Target is the single-node Redis backend.
type Target struct{}

var _ targets.Target = Target{}

// Start implements targets.Target. Redis runs with the clock shim preloaded
// and needs no extra capability to be skewed (opts.ExtraCaps is ignored).
func (Target) Start(ctx context.Context, rt runtime.Runtime, opts targets.Options) (targets.Cluster, error) {
	cmd, err := node.Command(node.Persistence.Get(opts.Settings))
	if err != nil {
		return nil, err
	}
	if _, err := rt.Reserve("n1"); err != nil {
		return nil, fmt.Errorf("reserve redis address: %w", err)
	}
	n, err := rt.Start(ctx, runtime.NodeSpec{
		Name: "n1", Role: Role, Image: opts.Images[Role], Cmd: cmd,
		Caps: []string{runtime.CapNetAdmin},
	})
	if err != nil {
		return nil, fmt.Errorf("start redis: %w", err)
	}
	if err := node.WaitReady(ctx, n); err != nil {
		return nil, err
	}
	return &cluster{node: n}, nil
}

type cluster struct {
	node runtime.Node
}

var (
	_ targets.Cluster      = (*cluster)(nil)
	_ targets.HealthWaiter = (*cluster)(nil)
)

// WaitHealthy implements targets.HealthWaiter: Redis answers PING.
func (c *cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return node.WaitReady(ctx, c.node)
}

func (c *cluster) Nodes() []runtime.Node { return []runtime.Node{c.node} }

func (c *cluster) Endpoints() []string {
	return []string{net.JoinHostPort(c.node.Addr().String(), strconv.Itoa(Port))}
}

func (c *cluster) Versions(ctx context.Context) map[string]string {
	out, err := runtime.Run(ctx, c.node, "redis-server", "--version")
	if err != nil {
		return map[string]string{"redis": "unknown"}
	}
	// "Redis server v=7.0.15 sha=... malloc=jemalloc-5.3.0 bits=64 build=..."
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return map[string]string{"redis": v}
		}
	}
	return map[string]string{"redis": strings.TrimSpace(string(out))}
}
