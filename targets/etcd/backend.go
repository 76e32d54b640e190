package etcd

import (
	"context"
	"net"
	"strconv"

	"github.com/splitbrain/splitbrain/internal/etcdserver"
	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
)

// Name is the backend's name and its recipe's kind.
const Name = "etcd"

// Binary is the etcd server in the etcd image (package etcdserver builds
// it from its pinned release).
const Binary = etcdserver.Binary

// ClientLibrary is the library the lock recipe is built on.
const ClientLibrary = "go.etcd.io/etcd/client/v3"

// NodeRole is the role of etcd members: the pinned etcd release built
// static on this machine (etcdserver.Module), its data in DataDir, its
// clock skewed through the vDSO (a Go program).
var NodeRole = targets.Role{
	Name:      Role,
	Files:     []images.File{etcdserver.File()},
	StateDirs: []string{DataDir},
}

func init() {
	targets.Register(targets.Backend{
		Name:    Name,
		Title:   "a 3-member etcd cluster (Raft)",
		Target:  Target{},
		Roles:   []targets.Role{NodeRole},
		Size:    Target{}.Size(),
		Leads:   true,
		Durable: true,
		// etcd's default; --unsafe-no-fsync survives a kill, not a power
		// loss of a quorum (docs/durability.md).
		DurableWith:  map[string]string{UnsafeNoFsync.Name(): "false"},
		UnsyncedWith: map[string]string{UnsafeNoFsync.Name(): "true"},
		Options:      option.Decls(UnsafeNoFsync),
		Recipe:       Name,
		Probe: &targets.Probe{
			Endpoint: net.JoinHostPort("127.0.0.1", strconv.Itoa(ClientPort)),
			Run:      func(ctx context.Context, endpoint string) (any, error) { return Probe(ctx, endpoint) },
		},
	})
	targets.RegisterRecipe(targets.Recipe{
		Kind:     Name,
		Backends: []string{Name},
		Library:  ClientLibrary + "/concurrency",
		Version:  targets.ModuleVersion(ClientLibrary),
		Fencing:  true, CheckedRelease: true, Renews: true,
		Options: option.Decls(EndpointsOption),
		New:     NewLocker,
	})
}
