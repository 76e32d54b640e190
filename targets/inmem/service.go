// Package inmem is an in-memory lock backend for tests, as hashicorp/raft
// ships its in-memory transport and store: a lease lock [Service] with a
// TTL on a real or fake [Clock], fencing tokens that grow with every grant,
// owner-checked release, and a busy lock told apart from an unavailable
// service — with [Faults] that make it misbehave the way the anti-patterns
// of the lock-safety brief do (leases that never expire, tokens that go
// backwards, a release that checks no owner, no quorum).
//
// [Locker] and [Lease] are its client side (targets.Locker and
// targets.Lease); [Service.Factory] is its targets.LockerFactory. [Target]
// and [Cluster] run it as a backend of the harness on the in-memory runtime
// (runtime/memrt), [Service.Program] being its node's main process: a
// stopped node freezes the service, a killed one makes it unavailable.
// Everything here is constructed directly; nothing registers itself.
//
// The counter store's in-memory client is store.Mem, beside the real store.
package inmem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime/memrt"
	"github.com/splitbrain/splitbrain/targets"
)

// Names of the in-memory backend: its target, its nodes' role and its
// recipe kind (the key of [Service.Factory] in an agent's lockers).
const (
	Name = "inmem"
	Role = "inmem"
	Kind = "inmem"
)

// Clock tells the service the time; leases expire by it.
type Clock interface {
	Now() time.Time
}

// RealClock is the wall clock.
type RealClock struct{}

// Now implements Clock.
func (RealClock) Now() time.Time { return time.Now() }

// FakeClock moves only when told to. It is safe for concurrent use.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewFakeClock returns a clock that reads start until advanced.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

// Now implements Clock.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Faults make the service misbehave; the zero value is a correct service.
// Set on the [Service] they apply to every client, set on a [Locker] (or
// by recipe options, see [ParseOptions]) to that client's requests.
type Faults struct {
	// NoExpiry: leases never expire, so a lock whose holder died stays
	// held for ever (anti-pattern 1).
	NoExpiry bool
	// BackwardTokens: each grant's token is one less than the key's
	// previous token (the first is 1<<20; it stops at 1), as from a
	// service that lost its counter: a fencing store then refuses the new
	// holder.
	BackwardTokens bool
	// UncheckedRelease: a release deletes the lock whoever holds it
	// (anti-pattern 4).
	UncheckedRelease bool
	// Unavailable: every request fails with targets.ErrUnavailable, as a
	// service without quorum; an Acquire keeps trying until its context
	// is done, as a real client does.
	Unavailable bool
}

func (f Faults) or(g Faults) Faults {
	return Faults{
		NoExpiry:         f.NoExpiry || g.NoExpiry,
		BackwardTokens:   f.BackwardTokens || g.BackwardTokens,
		UncheckedRelease: f.UncheckedRelease || g.UncheckedRelease,
		Unavailable:      f.Unavailable || g.Unavailable,
	}
}

// The recipe's options, with the Redis recipe's names where they exist:
// each one turns a fault on for the clients of a run.
var (
	Expiry    = option.Enum("expiry", "none: locks never expire", "ttl", "none")
	Release   = option.Enum("release", "unchecked: a release deletes whoever's lock it finds", "checked", "unchecked")
	Tokens    = option.Enum("tokens", "backward: every grant's token is below the one before", "forward", "backward")
	Available = option.Enum("available", "no: every acquisition fails unavailable", "yes", "no")
)

// RecipeOptions are the declarations of the recipe's options.
var RecipeOptions = option.Decls(Expiry, Release, Tokens, Available)

// ParseOptions checks recipe options (targets.RecipeConfig.Options)
// against [RecipeOptions] and reads them into faults: expiry=ttl|none,
// release=checked|unchecked, tokens=forward|backward, available=yes|no.
// An unknown option or value is an error.
func ParseOptions(opts map[string]string) (Faults, error) {
	set, err := option.Parse(RecipeOptions, opts, "option", "inmem recipe")
	if err != nil {
		return Faults{}, err
	}
	return Faults{
		NoExpiry:         Expiry.Get(set) == "none",
		UncheckedRelease: Release.Get(set) == "unchecked",
		BackwardTokens:   Tokens.Get(set) == "backward",
		Unavailable:      Available.Get(set) == "no",
	}, nil
}

// Options configure a [Service].
type Options struct {
	// Clock times the leases; nil means [RealClock].
	Clock Clock
	// Faults are the service's misbehaviours from the start.
	Faults Faults
	// Poll is how often a waiting Acquire looks again for an expired
	// lease (a release wakes it at once); 0 means 2ms.
	Poll time.Duration
}

// Stats count what the service did.
type Stats struct {
	// Grants counts the locks granted; Takeovers those of them that
	// replaced a lease that had expired unreleased.
	Grants, Takeovers int
	// Releases counts the releases that deleted a lock, NotOwner those
	// refused because the lease was lost.
	Releases, NotOwner int
}

// Service is an in-memory lease lock service. It is safe for concurrent
// use.
type Service struct {
	clock Clock
	poll  time.Duration

	mu     sync.Mutex
	faults Faults
	gate   func(context.Context) error
	down   bool
	locks  map[string]hold
	tokens map[string]uint64
	owners uint64
	// wake is closed, and replaced, whenever a lock is freed or the
	// service changes, so that waiting Acquires look again.
	wake  chan struct{}
	stats Stats
}

// hold is a granted lock.
type hold struct {
	owner   uint64 // unique per grant
	client  string
	token   uint64
	expires time.Time // zero: never
}

// NewService returns a running service with no lock held.
func NewService(opts Options) *Service {
	if opts.Clock == nil {
		opts.Clock = RealClock{}
	}
	if opts.Poll <= 0 {
		opts.Poll = 2 * time.Millisecond
	}
	return &Service{
		clock: opts.Clock, poll: opts.Poll, faults: opts.Faults,
		locks: map[string]hold{}, tokens: map[string]uint64{}, wake: make(chan struct{}),
	}
}

// SetFaults replaces the service's misbehaviours from now on.
func (s *Service) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
	s.wakeLocked()
}

// SetGate makes every request first wait(ctx), which blocks while the
// service's node is stopped (memrt.Gate.WaitContext); a request whose wait
// fails finds the service unavailable. nil removes the gate.
func (s *Service) SetGate(wait func(context.Context) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = wait
}

// Stop makes the service unavailable, as a crashed node; its locks and
// tokens survive (a member that keeps its data) and leases keep expiring.
func (s *Service) Stop() { s.setDown(true) }

// Start makes a stopped service available again.
func (s *Service) Start() { s.setDown(false) }

func (s *Service) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
	s.wakeLocked()
}

// Program is the main process of the service's node on the in-memory
// runtime: while it runs the service answers through the node's gate (a
// SIGSTOP freezes it); when it is killed the service is unavailable until
// the node restarts.
func (s *Service) Program() memrt.Program {
	return func(ctx context.Context, p *memrt.Proc) error {
		s.SetGate(p.Gate.WaitContext)
		s.Start()
		<-ctx.Done()
		s.Stop()
		return nil
	}
}

// Holder returns the client holding key's lock and its token; ok is false
// when the lock is free or its lease has expired.
func (s *Service) Holder(key string) (client string, token uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.live(key)
	return h.client, h.token, ok
}

// Keys returns the keys the service ever granted, sorted.
func (s *Service) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.tokens))
}

// Stats returns the counters.
func (s *Service) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// live returns key's hold if its lease has not expired; s.mu held.
func (s *Service) live(key string) (hold, bool) {
	h, ok := s.locks[key]
	if !ok || !h.expires.IsZero() && !s.clock.Now().Before(h.expires) {
		return hold{}, false
	}
	return h, true
}

func (s *Service) wakeLocked() {
	close(s.wake)
	s.wake = make(chan struct{})
}

// enter passes the node's gate and checks the service answers; it returns
// the faults in force for a client with its own faults f. On success s.mu
// is held.
func (s *Service) enter(ctx context.Context, f Faults) (Faults, error) {
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		if err := gate(ctx); err != nil {
			return f, fmt.Errorf("%w: %w", targets.ErrUnavailable, err)
		}
	}
	s.mu.Lock()
	f = f.or(s.faults)
	if s.down || f.Unavailable {
		s.mu.Unlock()
		return f, targets.ErrUnavailable
	}
	return f, nil
}

// tryAcquire grants key to client if it is free; it returns the wake
// channel to wait on otherwise.
func (s *Service) tryAcquire(ctx context.Context, key, client string, ttl time.Duration, own Faults) (*Lease, <-chan struct{}, error) {
	f, err := s.enter(ctx, own)
	if err != nil {
		return nil, nil, err
	}
	defer s.mu.Unlock()
	if _, held := s.live(key); held {
		return nil, s.wake, targets.ErrBusy
	}
	if _, ok := s.locks[key]; ok {
		s.stats.Takeovers++
	}
	tok := s.tokens[key]
	switch {
	case !f.BackwardTokens:
		tok++
	case tok == 0:
		tok = 1 << 20
	case tok > 1:
		tok--
	}
	s.tokens[key] = tok
	s.owners++
	h := hold{owner: s.owners, client: client, token: tok}
	if !f.NoExpiry && ttl > 0 {
		h.expires = s.clock.Now().Add(ttl)
	}
	s.locks[key] = h
	s.stats.Grants++
	return &Lease{s: s, key: key, owner: h.owner, token: tok, faults: own}, nil, nil
}

// release frees key if owner holds it (or whoever does, unchecked).
func (s *Service) release(ctx context.Context, key string, owner uint64, own Faults) error {
	f, err := s.enter(ctx, own)
	if err != nil {
		return fmt.Errorf("release %s: %w", key, err)
	}
	defer s.mu.Unlock()
	h, held := s.live(key)
	if !f.UncheckedRelease && (!held || h.owner != owner) {
		s.stats.NotOwner++
		return fmt.Errorf("release %s: %w", key, targets.ErrNotOwner)
	}
	if _, ok := s.locks[key]; ok {
		delete(s.locks, key)
		s.stats.Releases++
		s.wakeLocked()
	}
	return nil
}

// Locker returns a client of the service called client, whose leases last
// ttl (for ever when ttl is not positive) and whose requests misbehave as
// f says on top of the service's own faults.
func (s *Service) Locker(client string, ttl time.Duration, f Faults) *Locker {
	return &Locker{s: s, client: client, ttl: ttl, faults: f}
}

// Factory is the service's targets.LockerFactory: each agent gets a
// [Locker] with the recipe's TTL and the faults its options name
// ([ParseOptions]). Like the Redis recipe it refuses a TTL that is not
// positive unless expiry=none.
func (s *Service) Factory() targets.LockerFactory {
	return func(_ context.Context, cfg targets.RecipeConfig, client string, _ *slog.Logger) (targets.Locker, error) {
		f, err := ParseOptions(cfg.Options)
		if err != nil {
			return nil, err
		}
		if cfg.TTL <= 0 && !f.NoExpiry {
			return nil, errors.New("inmem recipe: ttl must be positive (or set expiry=none)")
		}
		return s.Locker(client, time.Duration(cfg.TTL), f), nil
	}
}

// Locker takes locks from a [Service] for one client. It is safe for
// concurrent use.
type Locker struct {
	s      *Service
	client string
	ttl    time.Duration
	faults Faults

	mu     sync.Mutex
	closed bool
}

var _ targets.Locker = (*Locker)(nil)

// Acquire implements targets.Locker: it tries until the lock is granted or
// ctx is done, and then says why it was not: targets.ErrBusy when the
// service last answered that someone holds it, targets.ErrUnavailable when
// it did not answer.
func (l *Locker) Acquire(ctx context.Context, key string) (targets.Lease, error) {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("acquire %s: locker closed: %w", key, targets.ErrUnavailable)
	}
	var tick *time.Ticker
	for {
		lease, wake, err := l.s.tryAcquire(ctx, key, l.client, l.ttl, l.faults)
		if err == nil {
			return lease, nil
		}
		if tick == nil {
			tick = time.NewTicker(l.s.poll)
			defer tick.Stop()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("acquire %s: %w", key, err)
		case <-wake: // nil unless busy
		case <-tick.C:
		}
	}
}

// Close implements targets.Locker; later Acquires fail unavailable.
func (l *Locker) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return nil
}

// Lease is a lock granted by a [Service].
type Lease struct {
	s      *Service
	key    string
	owner  uint64
	token  uint64
	faults Faults
}

var _ targets.Lease = (*Lease)(nil)

// Token implements targets.Lease.
func (l *Lease) Token() uint64 { return l.token }

// Key is the key the lease locks.
func (l *Lease) Key() string { return l.key }

// Release implements targets.Lease: targets.ErrNotOwner when the lease
// expired or someone else holds the lock (unless the release is
// unchecked), targets.ErrUnavailable when the service does not answer.
func (l *Lease) Release(ctx context.Context) error {
	return l.s.release(ctx, l.key, l.owner, l.faults)
}
