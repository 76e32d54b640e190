package redis

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/splitbrain/splitbrain/targets"
)

// miniredisModule is the in-process Redis that stands in for Redis
// nodes in `splitbrain client-check`.
const miniredisModule = "github.com/alicebob/miniredis/v2"

// local returns a Backend.Local that starts n in-process Redis servers
// (miniredis) on loopback, whose clocks move together.
func local(n int) func(context.Context) (*targets.LocalService, error) {
	return func(context.Context) (*targets.LocalService, error) {
		var servers []*miniredis.Miniredis
		stop := func() {
			for _, m := range servers {
				m.Close()
			}
		}
		var eps []string
		for range n {
			m := miniredis.NewMiniRedis()
			if err := m.StartAddr("127.0.0.1:0"); err != nil {
				stop()
				return nil, fmt.Errorf("start an in-process Redis: %w", err)
			}
			servers = append(servers, m)
			eps = append(eps, m.Addr())
		}
		return &targets.LocalService{
			Endpoints: eps,
			Describe: fmt.Sprintf("%d in-process Redis (miniredis %s) at %s; leases expire when client-check moves its clock",
				n, targets.ModuleVersion(miniredisModule), strings.Join(eps, ", ")),
			Advance: func(d time.Duration) {
				for _, m := range servers {
					m.FastForward(d)
				}
			},
			Close: stop,
		}, nil
	}
}
