// Package catalog imports, for their registrations, every lock backend,
// lock client and fault splitbrain ships (the shape of database/sql
// drivers): each registers itself with package targets or nemesis from its
// init function, and a program that imports catalog knows them all:
//
//	import _ "github.com/splitbrain/splitbrain/catalog"
//
// Adding a backend, a client or a fault package is its own folder plus one
// line here. The faults pause, kill and partition register from package
// nemesis itself, which every program that runs faults imports.
package catalog

import (
	"github.com/splitbrain/splitbrain/targets"

	// Lock backends and their recipes.
	_ "github.com/splitbrain/splitbrain/targets/etcd"
	_ "github.com/splitbrain/splitbrain/targets/external"
	_ "github.com/splitbrain/splitbrain/targets/kubernetes"
	_ "github.com/splitbrain/splitbrain/targets/lockd"
	_ "github.com/splitbrain/splitbrain/targets/mariadb"
	_ "github.com/splitbrain/splitbrain/targets/postgres"
	_ "github.com/splitbrain/splitbrain/targets/redis"
	_ "github.com/splitbrain/splitbrain/targets/redis/redislock"
	_ "github.com/splitbrain/splitbrain/targets/redis/redispy"
	_ "github.com/splitbrain/splitbrain/targets/redis/redsync"
	_ "github.com/splitbrain/splitbrain/targets/redis/sentinel"
	_ "github.com/splitbrain/splitbrain/targets/store/postgres"
	_ "github.com/splitbrain/splitbrain/targets/zookeeper"

	// Faults.
	_ "github.com/splitbrain/splitbrain/nemesis/clock"
	_ "github.com/splitbrain/splitbrain/nemesis/packet"
	_ "github.com/splitbrain/splitbrain/nemesis/powerloss"
)

// DefaultTarget is the backend `splitbrain run` brings up when none is
// named: a single Redis, the demo's anti-pattern.
const DefaultTarget = "redis"

func init() { targets.SetDefault(DefaultTarget) }
