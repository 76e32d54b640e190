package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrlelection "sigs.k8s.io/controller-runtime/pkg/leaderelection"
	ctrlrecorder "sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/targets"
)

// ManagerKind is the recipe whose lock is controller-runtime's manager
// leader election, as an operator's replica runs it when it starts: each
// acquisition makes the resource lock controller-runtime's manager makes
// (pkg/leaderelection.NewResourceLock: a Lease, an identity of host name
// and a UUID, a client whose timeout is max(1 s, RenewDeadline/2)) and
// runs client-go's elector on it with the configuration and callbacks
// pkg/manager gives it (Elected on OnStartedLeading, "leader election
// lost" on OnStoppedLeading, LeaderElectionReleaseOnCancel, a new elector
// per start).
//
// Not pkg/manager itself: it imports k8s.io/apiextensions-apiserver,
// whose requirements move the whole build to etcd's v3.7 client (which
// splitbrain builds in a module of its own, the etcd-v3.7 recipe) unless
// go.mod replaces them, and `go install …@VERSION` refuses a module with
// replace directives. What pkg/manager adds before the election — HTTP
// servers, webhooks, caches, runnables — does not touch the Lease.
const ManagerKind = "controller-runtime"

// ManagerLibrary is the module of controller-runtime.
const ManagerLibrary = "sigs.k8s.io/controller-runtime"

// ReleaseOnCancelOption is the manager's LeaderElectionReleaseOnCancel.
// controller-runtime's default is false: a stopped manager leaves its
// Lease to expire, and the next leader waits a LeaseDuration for it.
var ReleaseOnCancelOption = option.Enum("release-on-cancel",
	"the manager's LeaderElectionReleaseOnCancel: false (controller-runtime's default: a stopped manager leaves the Lease to expire) or true (it gives the Lease back when stopped, by client-go's give-back, which is not owner-checked)",
	"false", "true")

// ManagerLocker is the controller-runtime recipe for one client: each
// Acquire starts a manager's leader election on the key's Lease
// (LeaderElectionResourceLock "leases") and waits until it is elected;
// Release stops it (cancels its context). controller-runtime makes the
// LeaseLock itself, under an identity of its own (host name and a UUID)
// and with its own request timeout (half the RenewDeadline, at least
// 1 s); the recipe gives it the REST configuration, whose transport shows
// the recipe each Lease the election reads and writes (the fencing token
// is read from the one its acquisition wrote, as the client-go recipe
// reads it).
//
// A replica's manager campaigns until it is elected: an acquisition given
// up before the election led leaves it to the client's next acquisition of
// the key, which runs the same election on (its lock, identity and what it
// observed of the Lease), as the one campaign of a replica whose attempts
// the workload bounds. A candidate judges a holder's lease expired by how
// long it has seen the Lease unchanged, so an election made afresh for
// each attempt would never take, with attempts shorter than the
// LeaseDuration, the Lease of a holder that died or stopped without giving
// it back (busy-vs-unavailable's 1 s attempts against a 2 s lease stalled
// 20.4 s so). Once elected, the manager runs until Release, and the next
// acquisition is a new manager.
type ManagerLocker struct {
	client          string
	timing          Timing
	token           string
	releaseOnCancel bool
	log             *slog.Logger
	// config is the REST configuration of the API server; each manager
	// gets a copy whose transport records its own Lease requests.
	config *rest.Config

	renewFailures atomic.Int64

	mu   sync.Mutex
	live map[*managerLease]bool // started managers not yet stopped
	// waiting holds, per key, the election of an acquisition given up
	// before it led, whose Run has returned: the next acquisition's.
	waiting map[string]*election
}

// election is a manager's leader election on one key: its elector, the
// recorder of its Lease requests, and elected, closed when it leads.
type election struct {
	le      *leaderelection.LeaderElector
	rec     *recorder
	elected chan struct{}
}

// election is the client's campaign for key: the one an acquisition given
// up left, else a new manager's.
func (l *ManagerLocker) election(key string) (*election, error) {
	l.mu.Lock()
	e, ok := l.waiting[key]
	delete(l.waiting, key)
	l.mu.Unlock()
	if ok {
		return e, nil
	}
	e = &election{rec: &recorder{}, elected: make(chan struct{})}
	le, err := l.newElector(key, e.rec, e.elected)
	if err != nil {
		return nil, err
	}
	e.le = le
	return e, nil
}

// wait keeps e, which never led and does not run, for key's next
// acquisition.
func (l *ManagerLocker) wait(key string, e *election) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiting == nil {
		l.waiting = map[string]*election{}
	}
	l.waiting[key] = e
}

var _ targets.Locker = (*ManagerLocker)(nil)

// NewManagerLocker is the controller-runtime recipe's
// targets.LockerFactory: client cN talks to API server N (mod their
// number), with the durations the client-go recipe takes from the lease
// TTL and the recipe options.
func NewManagerLocker(_ context.Context, cfg targets.RecipeConfig, client string, log *slog.Logger) (targets.Locker, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("controller-runtime recipe: no endpoints")
	}
	timing, err := TimingFor(time.Duration(cfg.TTL), cfg.Options)
	if err != nil {
		return nil, fmt.Errorf("controller-runtime recipe: %w", err)
	}
	ep, err := pinned(cfg.Endpoints, client)
	if err != nil {
		return nil, fmt.Errorf("controller-runtime recipe: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	klogOnce.Do(func() { klog.SetLogger(logr.FromSlogHandler(log.Handler())) })
	return newManagerLocker(RESTConfig(ep, client, 0), client, timing, TokenOption.Get(cfg.Options),
		ReleaseOnCancelOption.Get(cfg.Options) == "true", log), nil
}

// newManagerLocker is a ManagerLocker on the API server config reaches.
func newManagerLocker(config *rest.Config, client string, timing Timing, token string, releaseOnCancel bool, log *slog.Logger) *ManagerLocker {
	return &ManagerLocker{config: config, client: client, timing: timing, token: token,
		releaseOnCancel: releaseOnCancel, log: log, live: map[*managerLease]bool{}}
}

// eventRecorders is the events the manager's leader election would
// send to the API server (its lock's "became leader"), dropped: they do
// not touch the Lease.
type eventRecorders struct{}

func (eventRecorders) GetEventRecorderFor(string) record.EventRecorder {
	return &record.FakeRecorder{}
}

func (eventRecorders) GetEventRecorder(string) ctrlrecorder.EventRecorder {
	return &events.FakeRecorder{}
}

// newElector is a manager's leader election on key's Lease, its requests
// recorded by rec: the lock controller-runtime makes, client-go's elector
// configured as pkg/manager configures it, elected closed when it leads.
// rec learns the candidate's identity from the lock (controller-runtime
// names it: host name and a UUID) before any request is made.
func (l *ManagerLocker) newElector(key string, rec *recorder, elected chan<- struct{}) (*leaderelection.LeaderElector, error) {
	cfg := rest.CopyConfig(l.config)
	leases := "/apis/coordination.k8s.io/v1/namespaces/" + Namespace + "/leases"
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return leaseWatcher{next: rt, rec: rec, leases: leases, name: LeaseName(key)}
	}
	lock, err := ctrlelection.NewResourceLock(cfg, eventRecorders{}, ctrlelection.Options{
		LeaderElection:             true,
		LeaderElectionResourceLock: resourcelock.LeasesResourceLock,
		LeaderElectionNamespace:    Namespace,
		LeaderElectionID:           LeaseName(key),
		RenewDeadline:              l.timing.RenewDeadline,
	})
	if err != nil {
		return nil, err
	}
	rec.id = lock.Identity()
	return leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: l.timing.LeaseDuration,
		RenewDeadline: l.timing.RenewDeadline,
		RetryPeriod:   l.timing.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(elected) },
			// The manager's Start returns "leader election lost"; the
			// elector's Run returning ends this one's hold the same way.
			OnStoppedLeading: func() {},
		},
		ReleaseOnCancel: l.releaseOnCancel,
		Name:            LeaseName(key),
	})
}

// Acquire implements targets.Locker: it starts a manager's election for
// key and waits until it is elected or ctx is done. Given up, the election
// is stopped; the answer is busy when the last Lease it read named another
// holder.
func (l *ManagerLocker) Acquire(ctx context.Context, key string) (targets.Lease, error) {
	e, err := l.election(key)
	if err != nil {
		return nil, fmt.Errorf("acquire %s: leader election: %w", key, err)
	}
	le, rec, elected := e.le, e.rec, e.elected
	runCtx, cancel := context.WithCancel(context.Background())
	s := &managerLease{l: l, key: key, cancel: cancel, done: make(chan struct{})}
	l.track(s, true)
	go func() {
		defer close(s.done)
		defer l.track(s, false)
		le.Run(runCtx)
		if runCtx.Err() == nil {
			err := errors.New("leader election lost")
			s.err.Store(&err)
		}
	}()
	select {
	case <-elected:
		token, err := rec.token(l.token)
		if err != nil {
			cancel()
			<-s.done
			return nil, fmt.Errorf("acquire %s: %w", key, err)
		}
		s.token, s.id = token, rec.id
		s.rec = rec
		return s, nil
	case <-s.done:
		cancel()
		return nil, fmt.Errorf("acquire %s: %w: the election stopped: %w", key, targets.ErrUnavailable, s.startErr())
	case <-ctx.Done():
	}
	cancel()
	select {
	case <-s.done:
		select {
		case <-elected: // it led as it was given up: a manager that ran
		default:
			l.wait(key, e)
		}
	case <-time.After(l.timing.RenewDeadline + time.Second):
	}
	if holder, ok := rec.lastSeen(); ok && holder != "" && holder != rec.id {
		return nil, fmt.Errorf("acquire %s: held by %s: %w", key, holder, targets.ErrBusy)
	}
	return nil, fmt.Errorf("acquire %s: %w: %w", key, targets.ErrUnavailable, rec.failure(ctx.Err()))
}

// track adds s to the live managers, or removes it.
func (l *ManagerLocker) track(s *managerLease, live bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if live {
		l.live[s] = true
	} else {
		delete(l.live, s)
	}
}

// RenewFailures is the number of leases whose manager stopped leading
// before they were released.
func (l *ManagerLocker) RenewFailures() int { return int(l.renewFailures.Load()) }

// Close implements targets.Locker: it stops the managers still running.
func (l *ManagerLocker) Close() error {
	l.mu.Lock()
	live := make([]*managerLease, 0, len(l.live))
	for s := range l.live {
		live = append(live, s)
	}
	l.mu.Unlock()
	for _, s := range live {
		s.cancel()
		<-s.done
	}
	return nil
}

// managerLease is one acquisition: its manager runs until Release.
type managerLease struct {
	l      *ManagerLocker
	key    string
	id     string // the candidate's identity, as controller-runtime named it
	token  uint64
	rec    *recorder
	cancel context.CancelFunc
	done   chan struct{} // closed when the election's Run returned
	err    atomic.Pointer[error]
	// released: Release has begun; lost: the manager had stopped
	// leading by then.
	released, lost atomic.Bool
}

var _ targets.RenewCounter = (*managerLease)(nil)

func (s *managerLease) Token() uint64 { return s.token }

// startErr is why the election ended ("leader election lost": it stopped leading unasked).
func (s *managerLease) startErr() error {
	if p := s.err.Load(); p != nil {
		return *p
	}
	return errors.New("no error")
}

// Held is the manager's own belief: its election still runs as the
// leader. An election that stops leading (its renewals failed for
// RenewDeadline, or the Lease named another) ends ("leader election
// lost"), as the operator process whose manager's Start returns does.
func (s *managerLease) Held(context.Context) (bool, error) { return s.running(), nil }

func (s *managerLease) running() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Release stops the manager's election (cancels its context) and waits
// until its Run returns. With LeaderElectionReleaseOnCancel off (the default) the
// Lease is left to expire; with it on, client-go's give-back clears the
// holder whenever the elector's own last observation names it, whoever
// the Lease names now (docs/kubernetes.md).
//
// It is ErrNotOwner when the manager had stopped leading before, or its
// give-back found the Lease naming another; ErrUnavailable when the
// manager did not stop in time or its give-back was not written.
func (s *managerLease) Release(ctx context.Context) error {
	if s.released.Swap(true) {
		return fmt.Errorf("release %s: released twice: %w", s.key, targets.ErrNotOwner)
	}
	if !s.running() {
		s.lost.Store(true)
		s.l.renewFailures.Add(1)
		return fmt.Errorf("release %s: the manager stopped leading before the release (%v): %w", s.key, s.startErr(), targets.ErrNotOwner)
	}
	s.cancel()
	select {
	case <-s.done:
	case <-ctx.Done():
		return fmt.Errorf("release %s: %w: the manager did not stop: %w", s.key, targets.ErrUnavailable, ctx.Err())
	}
	if !s.l.releaseOnCancel {
		return nil
	}
	holder, ok := s.rec.lastSeen()
	switch {
	case !ok:
		return fmt.Errorf("release %s: the Lease was not given back: %w: %w", s.key, targets.ErrUnavailable, s.rec.failure(errors.New("no answer")))
	case holder == s.id:
		return fmt.Errorf("release %s: the Lease was not given back: %w", s.key, targets.ErrUnavailable)
	case holder != "":
		return fmt.Errorf("release %s: the Lease names %q: %w", s.key, holder, targets.ErrNotOwner)
	}
	return nil
}

// RenewFailures implements targets.RenewCounter: 1 when the manager
// stopped leading during the hold.
func (s *managerLease) RenewFailures() int {
	if s.lost.Load() || !s.released.Load() && !s.running() {
		return 1
	}
	return 0
}

// leaseWatcher is the transport under a manager's API clients: it tells
// rec what each request for the Lease called name returned (a read, or a
// create or update: a write), in whichever of the API's encodings it came
// (controller-runtime asks for protobuf), and passes everything else
// through.
type leaseWatcher struct {
	next         http.RoundTripper
	rec          *recorder
	leases, name string // the Leases' collection path and the Lease's name
}

func (w leaseWatcher) RoundTrip(req *http.Request) (*http.Response, error) {
	var write bool
	switch {
	case req.Method == http.MethodGet && req.URL.Path == w.leases+"/"+w.name:
	case req.Method == http.MethodPut && req.URL.Path == w.leases+"/"+w.name:
		write = true
	case req.Method == http.MethodPost && req.URL.Path == w.leases:
		write = true
	default:
		return w.next.RoundTrip(req)
	}
	resp, err := w.next.RoundTrip(req)
	if err != nil {
		w.rec.note(nil, err, write)
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		w.rec.note(nil, fmt.Errorf("%s %s: reading the answer: %w", req.Method, req.URL.Path, err), write)
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
		return resp, nil
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if resp.StatusCode/100 != 2 {
		w.rec.note(nil, fmt.Errorf("%s %s: %s", req.Method, req.URL.Path, resp.Status), write)
		return resp, nil
	}
	var l coordinationv1.Lease
	if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, &l); err != nil {
		w.rec.note(nil, fmt.Errorf("%s %s: the answer is not a Lease (%s): %w", req.Method, req.URL.Path, resp.Header.Get("Content-Type"), err), write)
		return resp, nil
	}
	w.rec.note(&l, nil, write)
	return resp, nil
}

// errReader fails every read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// managerRecipe declares the controller-runtime recipe.
func managerRecipe() targets.Recipe {
	return targets.Recipe{
		Kind:     ManagerKind,
		Backends: []string{Name},
		Title:    "controller-runtime's manager leader election on a Lease: its resource lock, run by client-go's elector as pkg/manager runs it (Go, in process)",
		Library:  ManagerLibrary + "/pkg/leaderelection",
		Version:  targets.ModuleVersion(ManagerLibrary),
		// The token is read from the Lease the acquisition wrote. By
		// default (release-on-cancel=false) a release writes nothing; with
		// release-on-cancel=true it is client-go's give-back, which is
		// not owner-checked: declared unchecked for both.
		Fencing: true, CheckedRelease: false, Renews: true,
		Options: option.Decls(LeaseDurationOption, RenewDeadlineOption, RetryPeriodOption, TokenOption, ReleaseOnCancelOption),
		Check: func(ttl time.Duration, opts option.Set) error {
			_, err := TimingFor(ttl, opts)
			return err
		},
		New: NewManagerLocker,
	}
}
