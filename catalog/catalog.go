// Package catalog is the list of what splitbrain ships: it imports every
// lock backend and lock recipe package, each of which registers itself
// with package targets from its init function (the database/sql driver
// shape). Programs import it for its side effects:
//
//	import _ "github.com/splitbrain/splitbrain/catalog"
//
// Adding a backend is its own folder under targets/ plus one line here.
package catalog

import (
	"github.com/splitbrain/splitbrain/targets"

	_ "github.com/splitbrain/splitbrain/targets/etcd"
	_ "github.com/splitbrain/splitbrain/targets/external"
	_ "github.com/splitbrain/splitbrain/targets/lockd"
	_ "github.com/splitbrain/splitbrain/targets/redis"
	_ "github.com/splitbrain/splitbrain/targets/redis/redislock"
	_ "github.com/splitbrain/splitbrain/targets/redis/redispy"
	_ "github.com/splitbrain/splitbrain/targets/redis/redsync"
	_ "github.com/splitbrain/splitbrain/targets/zookeeper"
)

// DefaultTarget is the backend `splitbrain run` brings up when none is
// named: a single Redis, the demo's anti-pattern.
const DefaultTarget = "redis"

func init() { targets.SetDefault(DefaultTarget) }
