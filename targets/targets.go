// Package targets knows lock backends: how to bring each one up on a
// runtime, how a client takes a lock from it, and what the fencing token is.
//
// Each backend is one subpackage that declares itself — its roles and how
// their images are made, its size, probes, state directories, clock
// technique, lock recipes and options — in a [Backend] registered with
// [Register] from its init function, and its lock recipes with
// [RegisterRecipe]; package catalog imports every one we ship. Nothing
// else names a backend: the harness, the image planner, the SSH runtime,
// the scenarios and the CLI look them up here.
//
// A [Target] starts a backend's nodes and returns a [Cluster]; the
// harness puts the cluster's endpoints in a [RecipeConfig], which travels
// to every client agent, which turns it into a [Locker] with the factory
// registered for its Kind. Besides the
// backends, subpackage store is the protected resource.
package targets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime"
)

// Errors a Locker returns, checked with errors.Is. Busy and unavailable are
// kept apart on purpose (anti-pattern 8 of the lock-safety brief).
var (
	// ErrBusy: the lock stayed held by someone else until ctx was done.
	ErrBusy = errors.New("lock held by another client")
	// ErrUnavailable: the lock service could not be reached or could not
	// decide (no quorum, connection refused, timeouts).
	ErrUnavailable = errors.New("lock service unavailable")
	// ErrNotOwner: a release or renewal was refused because the caller no
	// longer holds the lock (its lease expired, or someone else holds it).
	ErrNotOwner = errors.New("lock not held by this client")
)

// Locker takes locks from one lock service for one client.
//
// A Locker is safe for concurrent use.
type Locker interface {
	// Acquire blocks until the lock on key is granted or ctx is done.
	Acquire(ctx context.Context, key string) (Lease, error)
	// Close releases the Locker's connections.
	Close() error
}

// Lease is a granted lock.
type Lease interface {
	// Token is the lock's fencing token: strictly greater for every later
	// grant of the same key by a correct service.
	Token() uint64
	// Release gives the lock back; ErrNotOwner when it was already lost.
	Release(ctx context.Context) error
}

// KindError is a lock client's error that names its own history error
// kind (history.ErrClientTimeout, say): an adapter process that answered
// late, broke the protocol or died, which is neither a busy lock nor an
// unavailable service. Agents record Kind instead of guessing.
type KindError struct {
	Kind string
	Err  error
}

func (e *KindError) Error() string { return e.Err.Error() }
func (e *KindError) Unwrap() error { return e.Err }

// ErrorKind returns the kind named by a KindError in err's chain, or "".
func ErrorKind(err error) string {
	var ke *KindError
	if errors.As(err, &ke) {
		return ke.Kind
	}
	return ""
}

// ClientInfo says which lock client a run's agents used: the recipe, and
// the library, its version and what it offers. results.json carries it.
type ClientInfo struct {
	// Recipe is the recipe's kind ("redsync", "external").
	Recipe string `json:"recipe"`
	// Library and Version name the library (empty for our own recipes).
	Library string `json:"library,omitempty"`
	Version string `json:"version,omitempty"`
	// Language is the client's language ("go", "python").
	Language string `json:"language,omitempty"`
	// Command is an adapter process's command line (external clients).
	Command string `json:"command,omitempty"`
	// Fencing, CheckedRelease, Renews and Session are as in [Recipe].
	Fencing        bool `json:"fencing"`
	CheckedRelease bool `json:"checked_release"`
	Renews         bool `json:"renews"`
	Session        bool `json:"session,omitempty"`
}

// Describer is implemented by Lockers that learn what they are only when
// running (an adapter process says it in its handshake).
type Describer interface {
	Describe() ClientInfo
}

// RenewCounter is implemented by leases that renew themselves in the
// background and can say how many renewals failed.
type RenewCounter interface {
	RenewFailures() int
}

// Duration is a time.Duration that reads and writes JSON as "1.5s".
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}

// RecipeConfig tells a client how to reach a lock service and how to use
// it. The harness builds it from the run's client, the cluster's endpoints
// and the recipe's options, checked once against their declarations; it is
// sent to each agent as JSON.
type RecipeConfig struct {
	// Kind selects the registered recipe (Recipe.Kind).
	Kind string `json:"kind"`
	// Endpoints are the service's client addresses ("10.1.2.3:6379").
	Endpoints []string `json:"endpoints"`
	// TTL is the lease time to live.
	TTL Duration `json:"ttl"`
	// Options are the recipe's own options (Recipe.Options), e.g. the
	// anti-patterns a scenario asks for ("expiry": "none"), checked by the
	// harness; a recipe reads them through its declarations
	// (option.Of.Get). A user's adapter gets every option that is not the
	// backend's own.
	Options option.Set `json:"options,omitempty"`
	// Backend names the backend (Kind names the recipe, which may serve
	// several backends); empty means Kind.
	Backend string `json:"backend,omitempty"`
	// Command is the adapter command line of a client brought by the user
	// (Kind "external"), run with sh -c in the client's files directory.
	Command string `json:"command,omitempty"`
}

// BackendName is the backend's name: Backend, or Kind when Backend is
// empty.
func (c RecipeConfig) BackendName() string {
	if c.Backend != "" {
		return c.Backend
	}
	return c.Kind
}

// LockerFactory makes a Locker for the client called client.
type LockerFactory func(ctx context.Context, cfg RecipeConfig, client string, log *slog.Logger) (Locker, error)

// Options configure a Target's bring-up.
type Options struct {
	// Images maps a role to the image to run it from.
	Images map[string]string
	// TTL is the lease time to live clients ask for.
	TTL time.Duration
	// Settings are the run's values of the backend's own options
	// (Backend.Options: server settings), checked against their
	// declarations; the target reads them through those declarations.
	Settings option.Set
	// ExtraCaps are Linux capabilities the run's nemeses need in the
	// target's nodes, added to the nodes' own: runtime.CapSysPtrace when
	// the clock nemesis may skew them by vDSO injection. The harness sets
	// it only when such a nemesis is in the run (least privilege); a target
	// whose nodes are skewed by other means (the LD_PRELOAD shim,
	// Role.Clock) may ignore it.
	ExtraCaps []string
	Log       *slog.Logger
}

// Target brings up one lock backend; its [Backend] declaration says the
// rest.
//
// Implementations are safe for concurrent use; Start may be called once per
// run.
type Target interface {
	// Start starts the backend's nodes on rt and waits until they serve.
	Start(ctx context.Context, rt runtime.Runtime, opts Options) (Cluster, error)
}

// Cluster is a running backend.
type Cluster interface {
	// Nodes are the backend's nodes (the nemesis may fault them).
	Nodes() []runtime.Node
	// Endpoints are the addresses the backend's clients dial
	// (RecipeConfig.Endpoints), in node order.
	Endpoints() []string
	// Versions reports the backend's software versions for results.json.
	Versions(ctx context.Context) map[string]string
}

// LeaderFinder is implemented by clusters with a leader, so that a
// partition can isolate it.
type LeaderFinder interface {
	// Leader returns the node that currently leads.
	Leader(ctx context.Context) (runtime.Node, error)
}

// HealthWaiter is implemented by clusters that can check, after a run,
// that they serve as they did when Start returned (every member up, a
// leader agreed on): the harness then lets a later run take their nodes
// over (node reuse) once they pass.
type HealthWaiter interface {
	// WaitHealthy waits until the cluster serves, or timeout passes.
	WaitHealthy(ctx context.Context, timeout time.Duration) error
}

// CutShort says that ctx is done or its deadline has passed. A client
// whose socket deadline is ctx's sees its I/O time out a moment before ctx
// reports an error, so a round of a lock recipe that failed when CutShort
// was cut by the caller's own deadline, not refused by the service: it
// keeps the verdict of the round before (busy, say) instead of counting
// as unavailable.
func CutShort(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && !time.Now().Before(d)
}
