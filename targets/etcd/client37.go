package etcd

import (
	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
	"time"
)

// Client37 is the recipe kind of the etcd v3.7 client's Mutex.
const Client37 = "etcd-v3.7"

// Client37Dir is the module that builds the etcd v3.7 client adapter,
// relative to the repository (embedded, as the server's module is): its go.mod.in pins go.etcd.io/etcd/client/v3
// v3.7.3 beside the v3.6 that splitbrain itself is built with (one build
// holds one version of a module).
const Client37Dir = "targets/etcd/client37"

// Client37Binary is the adapter in its client image.
const Client37Binary = "/usr/local/bin/etcd-v3.7-lock"

// Client37Version is the client release its go.mod pins.
const Client37Version = "v3.7.3"

func init() {
	targets.RegisterRecipe(targets.Recipe{
		Kind:     Client37,
		Backends: []string{Name},
		Title:    "etcd clientv3/concurrency Mutex at v3.7, a static adapter built from its own module",
		Library:  ClientLibrary + "/concurrency",
		Version:  Client37Version,
		// The token is the create revision of the mutex's key; the
		// session's lease is kept alive by the library; Unlock deletes
		// the key named by the session's lease, never another session's.
		Fencing: true, CheckedRelease: true, Renews: true,
		// The adapter reads them itself (another module, another
		// process); they are checked here before any container starts.
		Options: option.Decls(EndpointsOption,
			option.Enum("unlock", "retry: a failed Unlock is retried in the background with the same Mutex (etcd issue 22082)", "once", "retry"),
			option.Duration("unlock-timeout", "the application's own timeout on Unlock, a duration (default: the release's deadline)", 0, 0, 0).Described("the release's deadline"),
			option.Duration("unlock-retry-delay", "the wait before each retried Unlock, a duration (default 300ms)", 300*time.Millisecond, 0, 0)),
		Files:   []images.File{images.GoModule("etcd-v3.7-lock", images.ModuleDir(modules, "client37"), ".", Client37Binary)},
		Adapter: "exec " + Client37Binary,
	})
}
