package kubernetes

import (
	"context"
	"time"

	"github.com/splitbrain/splitbrain/internal/etcdserver"
	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
)

// Name is the backend's name and its recipe's kind.
const Name = "kubernetes"

// EtcdNodeRole is the role of the etcd members: the etcd backend's role,
// declared alike (the pinned etcd release, its data in DataDir), so that
// both backends run the same image.
var EtcdNodeRole = targets.Role{
	Name:      EtcdRole,
	Files:     []images.File{etcdserver.File()},
	StateDirs: []string{etcdserver.DataDir},
}

// APIServerNodeRole is the role of the API servers: kube-apiserver built
// static on this machine from the pinned release, its keys and serving
// certificate in StateDir, its clock skewed through the vDSO (a Go
// program).
var APIServerNodeRole = targets.Role{
	Name:      APIServerRole,
	Files:     []images.File{APIServerFile},
	StateDirs: []string{StateDir},
}

func init() {
	targets.Register(targets.Backend{
		Name:    Name,
		Title:   "a Kubernetes API server (" + Release + ") on a 3-member etcd cluster, client-go leader election on a Lease",
		Target:  Target{},
		Roles:   []targets.Role{EtcdNodeRole, APIServerNodeRole},
		Size:    Target{}.Size(),
		Leads:   true,
		Durable: true,
		// A killed kube-apiserver serves again (/readyz) 8.0 s and 9.8 s
		// after its restart (TestControlPlane at load 10-20 and ~12);
		// with one API server the Lease cannot be read or written
		// meanwhile.
		StartUp: 10 * time.Second,
		Recipe:  Name,
		Options: option.Decls(APIServers),
		Probe: &targets.Probe{
			Endpoint: ProbeEndpoint(APIServerRole),
			Run:      func(ctx context.Context, endpoint string) (any, error) { return Probe(ctx, endpoint) },
		},
		Programs: []targets.Program{APIServerProgram},
	})
	library := targets.Recipe{
		Kind:     Name,
		Backends: []string{Name},
		Title:    "client-go tools/leaderelection with a LeaseLock (Go, in process)",
		Library:  ClientLibrary + "/tools/leaderelection",
		Version:  targets.ModuleVersion(ClientLibrary),
		// The token is read from the Lease the acquisition wrote (the
		// library itself offers none). The give-back (ReleaseOnCancel)
		// checks the elector's own last observation, not the Lease it
		// overwrites: not an owner-checked release (a leader paused past
		// its lease that releases before its next renewal clears the new
		// leader's hold; TestReleaseOfALeaseTakenMeanwhile).
		Fencing: true, CheckedRelease: false, Renews: true,
		Options: option.Decls(LeaseDurationOption, RenewDeadlineOption, RetryPeriodOption, RequestTimeoutOption, TokenOption),
		Check: func(ttl time.Duration, opts option.Set) error {
			_, err := TimingFor(ttl, opts)
			return err
		},
		New: NewLocker,
	}
	targets.RegisterRecipe(library)
	// The same elector and options, given back by the recipe (NewLocker
	// tells them apart by kind).
	checked := library
	checked.Kind, checked.CheckedRelease = CheckedKind, true
	checked.Title = "client-go tools/leaderelection with a LeaseLock, given back only while the Lease names the holder (ReleaseOnCancel off; Go, in process)"
	targets.RegisterRecipe(checked)
	targets.RegisterRecipe(managerRecipe())
}

// CheckedKind is the recipe that runs the same elector with
// ReleaseOnCancel off and gives the Lease back itself, by an update
// conditional on a read that names the acquisition: an owner-checked
// release.
const CheckedKind = Name + "-checked"
