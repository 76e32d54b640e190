// Package redispy is the lock client redis-py (its redis.lock.Lock, from
// Debian's python3-redis) on the single Redis, through the client
// protocol: the adapter redis_py_lock.py runs in a client image of its own
// with python3-redis installed. It proves the protocol across languages
// and is the complete example of docs/your-client.md.
//
// Lock gives no fencing token (a run with --workload fenced-counter is
// refused), renews only when the caller extends it, and releases by
// compare-and-delete on its random token (owner-checked).
package redispy

import (
	"context"
	_ "embed"
	"os"

	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/external"
)

// Kind is the recipe's kind.
const Kind = "redis-py"

// Package is the Debian package of the library: bookworm's python3-redis
// is redis-py 4.3.4, pinned by the Debian release of the images.
const Package = "python3-redis"

// Role is the recipe's client image role.
const Role = "client-" + Kind

// Script is the adapter's file name in the client files directory.
const Script = "redis_py_lock.py"

// Source is the adapter.
//
//go:embed redis_py_lock.py
var Source []byte

// Adapter is the adapter file of the client image.
var Adapter = images.BuiltFile(Script, external.ClientDir+"/"+Script, 0o755,
	func() []string { return []string{string(Source)} },
	func(_ context.Context, out string) error { return os.WriteFile(out, Source, 0o755) })

func init() {
	targets.RegisterRecipe(targets.Recipe{
		Kind:           Kind,
		Backends:       []string{"redis"},
		Title:          "redis-py's Lock (Python, through the client protocol)",
		Library:        "redis-py",
		Version:        "4.3.4",
		Language:       "python",
		CheckedRelease: true,
		Packages:       []string{Package},
		Files:          []images.File{Adapter},
		Adapter:        "exec python3 " + Script,
	})
}
