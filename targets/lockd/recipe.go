package lockd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/lockd/client"
)

// RequestTimeout bounds each attempt of the recipe's client at one node, so
// that a paused leader is given up on quickly and the next node tried.
const RequestTimeout = time.Second

// Locker is the lockd lock recipe for one client: client.Lock with a
// unique owner per acquisition, the lease kept alive by the client's
// watchdog (a renewal every TTL/3) while it is held. The fencing token is
// the service's own (the Raft index of the grant).
type Locker struct {
	cli   *client.Client
	name  string
	ttl   time.Duration
	log   *slog.Logger
	seq   atomic.Uint64
	renew time.Duration   // watchdog interval; 0 = TTL/3
	base  context.Context // the watchdogs' context, cancelled by Close
	stop  context.CancelFunc
}

var _ targets.Locker = (*Locker)(nil)

// NewLocker is the recipe's targets.LockerFactory. cfg.TTL is the lease
// asked for (0 = the servers' default); options: endpoints=all|pinned.
func NewLocker(_ context.Context, cfg targets.RecipeConfig, name string, log *slog.Logger) (targets.Locker, error) {
	return newLocker(cfg, name, log, client.WithRequestTimeout(RequestTimeout))
}

func newLocker(cfg targets.RecipeConfig, name string, log *slog.Logger, opts ...client.Option) (*Locker, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("lockd recipe: no endpoints")
	}
	if cfg.TTL < 0 {
		return nil, fmt.Errorf("lockd recipe: negative lease TTL %v", time.Duration(cfg.TTL))
	}
	eps, err := targets.ClientEndpoints(cfg.Endpoints, name, EndpointsOption.Get(cfg.Options))
	if err != nil {
		return nil, fmt.Errorf("lockd recipe: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("recipe", "lockd", "client", name)
	cli, err := client.New(eps, append([]client.Option{client.WithLogger(log)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("lockd recipe: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Locker{cli: cli, name: name, ttl: time.Duration(cfg.TTL), log: log, base: ctx, stop: stop}, nil
}

// owner is a fresh owner ID: the client's name, a sequence number and a
// random part, so that no two acquisitions (of any run) share one and a
// stale holder can never be mistaken for a new one.
func (l *Locker) owner() string {
	return fmt.Sprintf("%s-%d-%016x", l.name, l.seq.Add(1), rand.Uint64())
}

// Acquire implements targets.Locker: it retries while the lock is busy or
// the service unavailable, until granted or ctx is done, and starts the
// lease's watchdog. The watchdog runs until Release or Close, not until
// ctx ends.
func (l *Locker) Acquire(ctx context.Context, key string) (targets.Lease, error) {
	cl, err := l.cli.Lock(ctx, key, l.owner(), l.ttl)
	if err != nil {
		return nil, fmt.Errorf("acquire %s: %w", key, classify(err))
	}
	cl.KeepAlive(l.base, l.renew)
	return &Lease{l: cl}, nil
}

// classify maps a client error to the targets sentinels, keeping the
// cause: busy (held, lock-delay, or still held when ctx ended) is
// ErrBusy, no decision is ErrUnavailable, a refused renewal or release (or
// a lease that ran out before it was renewed) is ErrNotOwner. Other errors
// (a malformed request) are returned as they are.
func classify(err error) error {
	switch {
	case errors.Is(err, client.ErrLockHeld):
		return fmt.Errorf("%w: %w", targets.ErrBusy, err)
	case errors.Is(err, client.ErrNotOwner), errors.Is(err, client.ErrLeaseExpired):
		return fmt.Errorf("%w: %w", targets.ErrNotOwner, err)
	case errors.Is(err, client.ErrUnavailable):
		return fmt.Errorf("%w: %w", targets.ErrUnavailable, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// No attempt answered before ctx ended: nobody decided.
		return fmt.Errorf("%w: %w", targets.ErrUnavailable, err)
	}
	return err
}

// Stats are the Locker's client counters (requests, redirects, renewals,
// leases lost).
func (l *Locker) Stats() client.Stats { return l.cli.Stats() }

// Close implements targets.Locker: it stops every watchdog (the leases
// then lapse on the service) and closes idle connections.
func (l *Locker) Close() error {
	l.stop()
	return l.cli.Close()
}

// Lease is a lock granted by the lockd recipe.
type Lease struct {
	l *client.Lease
}

var (
	_ targets.Lease        = (*Lease)(nil)
	_ targets.RenewCounter = (*Lease)(nil)
)

// Token implements targets.Lease: the service's fencing token.
func (s *Lease) Token() uint64 { return s.l.Token() }

// Key is the locked key.
func (s *Lease) Key() string { return s.l.Key() }

// Owner is the owner ID the lock was granted to.
func (s *Lease) Owner() string { return s.l.Owner() }

// Expires is when the holder must stop relying on the lease, on this
// machine's clock (see client.Lease.Expires).
func (s *Lease) Expires() time.Time { return s.l.Expires() }

// Done is closed when the lease ends: released, or lost by the watchdog.
func (s *Lease) Done() <-chan struct{} { return s.l.Done() }

// Err says why the lease ended (nil while live).
func (s *Lease) Err() error { return s.l.Err() }

// Renew renews the lease once; ErrNotOwner when the service refused
// because the lease is gone.
func (s *Lease) Renew(ctx context.Context) error {
	if err := s.l.Renew(ctx); err != nil {
		return classify(err)
	}
	return nil
}

// Release implements targets.Lease: it stops the watchdog and gives the
// lock back, owner- and token-checked by the service.
func (s *Lease) Release(ctx context.Context) error {
	if err := s.l.Release(ctx); err != nil {
		return classify(err)
	}
	return nil
}

// RenewFailures implements targets.RenewCounter.
func (s *Lease) RenewFailures() int { return s.l.RenewFailures() }
