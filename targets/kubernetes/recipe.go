package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/targets"
)

// ClientLibrary is the library the lock recipe is built on.
const ClientLibrary = "k8s.io/client-go"

// Namespace is where the recipe's Leases live.
const Namespace = "default"

// The recipe's options: the leader election's three durations, defaulted
// from the lease TTL in the proportions of Kubernetes's own components
// (kube-controller-manager, kube-scheduler and controller-runtime default
// to 15 s, 10 s and 2 s), the timeout of each request (as client-go sets
// it on the client it makes for a lock), and which fencing token to report.
var (
	LeaseDurationOption = option.Duration("lease-duration",
		"LeaseDuration: how long candidates wait, on their own clock, after the last change they saw to the Lease before they take it (whole seconds: the Lease records seconds)",
		0, time.Second, 0).Described("the lease TTL")
	RenewDeadlineOption = option.Duration("renew-deadline",
		"RenewDeadline: how long the leader retries renewing before it stops leading",
		0, 0, 0).Described("2/3 of lease-duration")
	RetryPeriodOption = option.Duration("retry-period",
		"RetryPeriod: the wait between tries to acquire or renew",
		0, 0, 0).Described("2/15 of lease-duration")
	RequestTimeoutOption = option.Duration("request-timeout",
		"the timeout of each request the election makes (0: none, a request waits for its caller's context)",
		0, 0, 0).Described("half of renew-deadline, at least 1s, as client-go and controller-runtime set it")
	TokenOption = option.Enum("token",
		"the fencing token read from the Lease the acquisition wrote: transitions (its spec.leaseTransitions, plus one) or resource-version (its metadata.resourceVersion, etcd's revision of the write)",
		TokenTransitions, TokenResourceVersion)
)

// Fencing tokens (TokenOption).
const (
	TokenTransitions     = "transitions"
	TokenResourceVersion = "resource-version"
)

// Timing is a leader election's three durations.
type Timing struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// TimingFor is the timing of a run with lease TTL ttl and the recipe
// options opts: LeaseDuration the TTL, RenewDeadline 2/3 of it and
// RetryPeriod 2/15 of it, the ratios of the 15 s / 10 s / 2 s that
// Kubernetes's components and controller-runtime default to, unless opts
// set them. The error says which of the library's rules they break.
func TimingFor(ttl time.Duration, opts option.Set) (Timing, error) {
	t := Timing{LeaseDuration: ttl}
	if d, ok := LeaseDurationOption.Lookup(opts); ok {
		t.LeaseDuration = d
	}
	t.RenewDeadline = t.LeaseDuration * 2 / 3
	t.RetryPeriod = t.LeaseDuration * 2 / 15
	if d, ok := RenewDeadlineOption.Lookup(opts); ok {
		t.RenewDeadline = d
	}
	if d, ok := RetryPeriodOption.Lookup(opts); ok {
		t.RetryPeriod = d
	}
	switch {
	case t.LeaseDuration < time.Second || t.LeaseDuration%time.Second != 0:
		return t, fmt.Errorf("lease-duration %v: want whole seconds, at least 1s (the Lease records leaseDurationSeconds; set --lease-ttl or --recipe-opt lease-duration)", t.LeaseDuration)
	case t.RenewDeadline >= t.LeaseDuration:
		return t, fmt.Errorf("renew-deadline %v: want less than lease-duration %v (client-go refuses it)", t.RenewDeadline, t.LeaseDuration)
	case t.RetryPeriod <= 0 || float64(t.RenewDeadline) <= leaderelection.JitterFactor*float64(t.RetryPeriod):
		return t, fmt.Errorf("retry-period %v: want more than 0 and renew-deadline %v above %.1f times it (client-go refuses it)", t.RetryPeriod, t.RenewDeadline, leaderelection.JitterFactor)
	}
	return t, nil
}

// klogOnce routes client-go's klog output to the first Locker's logger.
var klogOnce sync.Once

// Locker is the leader-election lock recipe for one client: each Acquire
// runs the key's client-go LeaderElector on a LeaseLock named after the
// key, with an identity of its own (client, process, sequence), until
// Release cancels it (ReleaseOnCancel). The elector is kept from one
// acquisition of the key to the next (see candidate).
type Locker struct {
	coord    coordinationv1client.CoordinationV1Interface
	client   string
	instance string
	timing   Timing
	token    string
	// checked: the recipe gives the Lease back itself, only while it
	// still names this acquisition (CheckedKind), instead of the
	// library's ReleaseOnCancel.
	checked bool
	log     *slog.Logger

	seq           atomic.Uint64
	renewFailures atomic.Int64

	mu         sync.Mutex
	candidates map[string]*candidate
}

// candidate is this client's campaign for one Lease: one LeaderElector
// that every acquisition of the key runs again, so that what it observed
// of the Lease (the record and when it first saw it unchanged: the
// library's observedTime, by which it judges a holder's lease expired)
// carries over from one bounded attempt to the next, as it does for a
// candidate that campaigns without stopping. An elector made afresh for
// each attempt would start that clock again each time: with attempts
// shorter than LeaseDuration it never finds a dead holder's Lease expired,
// and the lock never comes back.
type candidate struct {
	lock *resourcelock.LeaseLock
	le   *leaderelection.LeaderElector
	// leading receives each Run's leadership context. A Run starts its
	// OnStartedLeading in a goroutine of its own, which may send after
	// that Run has returned: its context is cancelled by then, and the
	// next attempt passes over it. inUse says an attempt or a hold is
	// running on le (the Locker's mu guards it).
	leading chan context.Context
	inUse   bool
}

var _ targets.Locker = (*Locker)(nil)

// NewLocker is the recipe's targets.LockerFactory: client cN talks to API
// server N (mod their number).
func NewLocker(_ context.Context, cfg targets.RecipeConfig, client string, log *slog.Logger) (targets.Locker, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("kubernetes recipe: no endpoints")
	}
	timing, err := TimingFor(time.Duration(cfg.TTL), cfg.Options)
	if err != nil {
		return nil, fmt.Errorf("kubernetes recipe: %w", err)
	}
	ep, err := pinned(cfg.Endpoints, client)
	if err != nil {
		return nil, fmt.Errorf("kubernetes recipe: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	klogOnce.Do(func() { klog.SetLogger(logr.FromSlogHandler(log.Handler())) })
	timeout := RequestTimeout(timing.RenewDeadline)
	if d, ok := RequestTimeoutOption.Lookup(cfg.Options); ok {
		timeout = d
	}
	coord, err := coordinationv1client.NewForConfig(RESTConfig(ep, client, timeout))
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	l := newLocker(coord, client, timing, TokenOption.Get(cfg.Options), log)
	l.checked = cfg.Kind == CheckedKind
	return l, nil
}

// newLocker is a Locker on the coordination.k8s.io client coord.
func newLocker(coord coordinationv1client.CoordinationV1Interface, client string, timing Timing, token string, log *slog.Logger) *Locker {
	return &Locker{coord: coord, client: client, instance: strconv.FormatInt(time.Now().UnixNano(), 36),
		timing: timing, token: token, log: log}
}

// RequestTimeout is the timeout of each of the election's requests for
// a RenewDeadline of renewDeadline: half of it, at least a second — what
// client-go's resourcelock.NewFromKubeconfig and controller-runtime's
// managers (v0.25.3, pkg/leaderelection) set on the client they make for
// the lock, "to keep a single hung request from forcing a leader loss".
// Without it a request that gets no answer waits for its caller's context:
// in the acquire loop, which has no deadline of its own, for the whole
// acquisition.
func RequestTimeout(renewDeadline time.Duration) time.Duration {
	return max(time.Second, renewDeadline/2)
}

// RESTConfig is a client's configuration for the API server at endpoint
// (host:port): the run's bearer token, the self-signed serving certificate
// taken on trust, each request bounded by timeout (zero: unbounded), and
// no client-side rate limit to speak of (client-go's default of 5 requests
// a second would queue the election's own requests).
func RESTConfig(endpoint, client string, timeout time.Duration) *rest.Config {
	return &rest.Config{
		Host:            "https://" + endpoint,
		BearerToken:     Token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		Timeout:         timeout,
		QPS:             1000,
		Burst:           1000,
		UserAgent:       "splitbrain/" + client,
	}
}

// pinned is the API server client cN talks to.
func pinned(endpoints []string, client string) (string, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(client, "c"))
	if err != nil || n < 1 {
		return "", fmt.Errorf("want a client named cN, got %q", client)
	}
	return endpoints[(n-1)%len(endpoints)], nil
}

// LeaseName is the Lease of key: a DNS subdomain name.
func LeaseName(key string) string {
	var b strings.Builder
	b.WriteString("splitbrain-")
	for _, r := range strings.ToLower(key) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			b.WriteRune(r)
		} else {
			fmt.Fprintf(&b, "-%x-", r)
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}

// Acquire implements targets.Locker: it runs the key's LeaderElector
// (made on the key's first acquisition, run again by the next ones) under
// an identity of this acquisition's own, until it leads (OnStartedLeading)
// or ctx is done.
func (l *Locker) Acquire(ctx context.Context, key string) (targets.Lease, error) {
	id := fmt.Sprintf("%s-%s-%d", l.client, l.instance, l.seq.Add(1))
	rec := &recorder{id: id}
	c, err := l.campaign(key, id)
	if err != nil {
		return nil, fmt.Errorf("acquire %s: %w", key, err)
	}
	// No Run is under way on c: it is this attempt's alone until done.
	c.lock.LockConfig.Identity = id
	c.lock.Client = recordingGetter{CoordinationV1Interface: l.coord, rec: rec}
	leading, le := c.leading, c.le
	for len(leading) > 0 {
		<-leading // earlier Runs' (cancelled) contexts
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer l.free(c)
		le.Run(runCtx)
	}()
wait:
	for {
		select {
		case lctx := <-leading:
			if lctx.Err() != nil {
				continue // an earlier Run's, or leadership already lost
			}
			token, err := rec.token(l.token)
			if err != nil {
				cancel()
				return nil, fmt.Errorf("acquire %s: %w", key, err)
			}
			return &lease{l: l, le: le, key: key, id: id, token: token, leading: lctx, cancel: cancel, done: done}, nil
		case <-ctx.Done():
			break wait
		}
	}
	cancel()
	// Run returns once its acquire loop sees the cancellation (and, had it
	// just won, after giving the Lease back).
	select {
	case <-done:
	case <-time.After(l.timing.RenewDeadline + time.Second):
	}
	if holder, ok := rec.lastSeen(); ok && holder != "" && holder != id {
		return nil, fmt.Errorf("acquire %s: held by %s: %w", key, holder, targets.ErrBusy)
	}
	return nil, fmt.Errorf("acquire %s: %w: %w", key, targets.ErrUnavailable, rec.failure(ctx.Err()))
}

// campaign is the key's candidate for the acquisition id, marked in use:
// the one kept for key,
// or, while that one is still in use (an attempt given up whose Run has
// not returned yet), a new one for this attempt alone.
func (l *Locker) campaign(key, id string) (*candidate, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.candidates[key]; ok && !c.inUse {
		c.inUse = true
		return c, nil
	}
	// The library refuses a lock with no identity: the first
	// acquisition's, which Acquire sets again.
	c := &candidate{lock: &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Name: LeaseName(key), Namespace: Namespace},
		Client: l.coord, LockConfig: resourcelock.ResourceLockConfig{Identity: id}},
		leading: make(chan context.Context, 8)}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            c.lock,
		Name:            c.lock.LeaseMeta.Name,
		LeaseDuration:   l.timing.LeaseDuration,
		RenewDeadline:   l.timing.RenewDeadline,
		RetryPeriod:     l.timing.RetryPeriod,
		ReleaseOnCancel: !l.checked,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				select {
				case c.leading <- lctx:
				default: // only cancelled contexts are left unread
				}
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return nil, err
	}
	c.le, c.inUse = le, true
	if _, ok := l.candidates[key]; !ok {
		if l.candidates == nil {
			l.candidates = make(map[string]*candidate)
		}
		l.candidates[key] = c
	}
	return c, nil
}

// free marks c, whose Run has returned, free for the key's next attempt.
func (l *Locker) free(c *candidate) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c.inUse = false
}

// RenewFailures is the number of leases whose elector stopped leading
// before they were released.
func (l *Locker) RenewFailures() int { return int(l.renewFailures.Load()) }

// Close implements targets.Locker.
func (l *Locker) Close() error { return nil }

// lease is one acquisition: its elector runs until Release.
type lease struct {
	l       *Locker
	le      *leaderelection.LeaderElector
	key     string
	id      string // the acquisition's identity
	token   uint64
	leading context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	// released: Release has begun; lost: the elector had stopped leading
	// by then.
	released, lost atomic.Bool
}

var _ targets.RenewCounter = (*lease)(nil)

func (s *lease) Token() uint64 { return s.token }

// Held is the library's own belief: the elector still leads (the context
// it gave OnStartedLeading is live) and the last Lease it saw names it
// (IsLeader).
func (s *lease) Held(context.Context) (bool, error) { return s.believes(), nil }

func (s *lease) believes() bool { return s.leading.Err() == nil && s.le.IsLeader() }

// Release cancels the elector and gives the Lease back. In the library's
// way (ReleaseOnCancel) the elector writes the give-back (holder cleared,
// leaseDurationSeconds 1) whenever its own last observation names it,
// whoever the Lease names now: a leader that was paused past its
// LeaseDuration and releases before its next renewal has read the Lease
// clears the new leader's hold, and a third candidate takes the Lease while
// the new leader still leads (docs/kubernetes.md). The checked way
// (CheckedKind) gives it back only while the Lease still names this
// acquisition: an update conditional on the resourceVersion it read.
//
// It is ErrNotOwner when the elector no longer believed it led (its
// renewals failed for RenewDeadline, or the last Lease it read named
// another) or, checked, when the Lease names another; ErrUnavailable when
// the give-back was not written.
func (s *lease) Release(ctx context.Context) error {
	if s.released.Swap(true) {
		return fmt.Errorf("release %s: released twice: %w", s.key, targets.ErrNotOwner)
	}
	if held, _ := s.Held(ctx); !held {
		s.lost.Store(true)
		s.l.renewFailures.Add(1)
	}
	s.cancel()
	select {
	case <-s.done:
	case <-ctx.Done():
		return fmt.Errorf("release %s: %w: %w", s.key, targets.ErrUnavailable, ctx.Err())
	}
	switch {
	case s.lost.Load():
		return fmt.Errorf("release %s: stopped leading before the release: %w", s.key, targets.ErrNotOwner)
	case s.l.checked:
		return s.giveBack(ctx)
	case s.le.IsLeader():
		return fmt.Errorf("release %s: the Lease was not given back: %w", s.key, targets.ErrUnavailable)
	}
	return nil
}

// giveBack clears the Lease's holder as the library's give-back does, but
// only while the Lease names this acquisition: read it, and update that
// version of it (a write in between is a conflict, and the Lease is read
// again).
func (s *lease) giveBack(ctx context.Context) error {
	leases := s.l.coord.Leases(Namespace)
	for {
		cur, err := leases.Get(ctx, LeaseName(s.key), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("release %s: the Lease is gone: %w", s.key, targets.ErrNotOwner)
		}
		if err != nil {
			return fmt.Errorf("release %s: %w: %w", s.key, targets.ErrUnavailable, err)
		}
		if holder := holderOf(cur); holder != s.id {
			return fmt.Errorf("release %s: the Lease names %q, not this acquisition: %w", s.key, holder, targets.ErrNotOwner)
		}
		now, one, none := metav1.NewMicroTime(time.Now()), int32(1), ""
		cur.Spec.HolderIdentity, cur.Spec.LeaseDurationSeconds = &none, &one
		cur.Spec.AcquireTime, cur.Spec.RenewTime = &now, &now
		_, err = leases.Update(ctx, cur, metav1.UpdateOptions{})
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err):
			continue
		}
		return fmt.Errorf("release %s: %w: %w", s.key, targets.ErrUnavailable, err)
	}
}

// RenewFailures implements targets.RenewCounter: 1 when the elector
// stopped believing it led during the hold.
func (s *lease) RenewFailures() int {
	if s.lost.Load() || !s.released.Load() && !s.believes() {
		return 1
	}
	return 0
}

// recorder watches one elector's requests: the Lease its acquisition wrote
// (the token's source), the last holder it read, and the last error.
type recorder struct {
	// id is the acquisition's identity, set before its first request.
	id string

	mu       sync.Mutex
	acquired *coordinationv1.Lease
	holder   string
	seen     bool
	lastErr  error
}

// note records a request's outcome.
func (r *recorder) note(l *coordinationv1.Lease, err error, write bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastErr = err
	if err != nil || l == nil {
		return
	}
	holder := holderOf(l)
	r.holder, r.seen = holder, true
	if write && holder != "" && holder == r.id && r.acquired == nil {
		r.acquired = l.DeepCopy()
	}
}

// holderOf is the identity l names as its holder ("" for none).
func holderOf(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// lastSeen is the holder the last Lease read or written named.
func (r *recorder) lastSeen() (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.holder, r.seen && r.lastErr == nil
}

// failure is the last request's error, else fallback.
func (r *recorder) failure(fallback error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lastErr != nil {
		return r.lastErr
	}
	return fallback
}

// token is the fencing token of the acquisition, read from the Lease it
// wrote: its leaseTransitions plus one (0 when the Lease was created), or
// its resourceVersion.
func (r *recorder) token(kind string) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.acquired == nil {
		return 0, errors.New("leading, but no write of the Lease naming this candidate was seen")
	}
	if kind == TokenResourceVersion {
		v, err := strconv.ParseUint(r.acquired.ResourceVersion, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("resourceVersion %q: %w", r.acquired.ResourceVersion, err)
		}
		return v, nil
	}
	if r.acquired.Spec.LeaseTransitions == nil {
		return 1, nil
	}
	return uint64(*r.acquired.Spec.LeaseTransitions) + 1, nil
}

// recordingGetter hands the LeaseLock a Leases client whose Get, Create
// and Update tell rec what they returned.
type recordingGetter struct {
	coordinationv1client.CoordinationV1Interface
	rec *recorder
}

func (g recordingGetter) Leases(ns string) coordinationv1client.LeaseInterface {
	return recordingLeases{LeaseInterface: g.CoordinationV1Interface.Leases(ns), rec: g.rec}
}

type recordingLeases struct {
	coordinationv1client.LeaseInterface
	rec *recorder
}

func (c recordingLeases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	l, err := c.LeaseInterface.Get(ctx, name, opts)
	c.rec.note(l, err, false)
	return l, err
}

func (c recordingLeases) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	l, err := c.LeaseInterface.Create(ctx, lease, opts)
	c.rec.note(l, err, true)
	return l, err
}

func (c recordingLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	l, err := c.LeaseInterface.Update(ctx, lease, opts)
	c.rec.note(l, err, true)
	return l, err
}
