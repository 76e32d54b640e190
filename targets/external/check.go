package external

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/targets"
)

// Service is the lock service a conformance check runs an adapter
// against.
type Service struct {
	// Backend and Endpoints go into the adapter's hello.
	Backend   string
	Endpoints []string
	// Describe says what it is, for the report's first line.
	Describe string
	// Expire makes every lock taken with ttl expire: it advances the
	// service's clock, or waits the TTL out.
	Expire func(ctx context.Context, ttl time.Duration) error
	// Advance lets d pass for the service's leases: it advances the
	// service's clock by d, or waits d out. Nil: it waits d out.
	Advance func(ctx context.Context, d time.Duration) error
}

// advance lets d pass for svc's leases.
func (s Service) advance(ctx context.Context, d time.Duration) error {
	if s.Advance != nil {
		return s.Advance(ctx, d)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// CheckOptions configure a conformance check.
type CheckOptions struct {
	// Command and Dir are the adapter's command line and working
	// directory.
	Command string
	Dir     string
	// TTL is the lease the check asks for (0: 2s).
	TTL time.Duration
	// Options are sent in hello (--recipe-opt).
	Options map[string]string
	// Log receives the adapters' stderr.
	Log *slog.Logger
}

// Finding is one step of a conformance check.
type Finding struct {
	// Step names what was checked ("handshake", "busy", ...).
	Step string `json:"step"`
	// Pass: the adapter did what the protocol asks. A passing finding
	// may still carry a Warning.
	Pass    bool   `json:"pass"`
	Warning bool   `json:"warning,omitempty"`
	Says    string `json:"says"`
}

// Report is a conformance check's outcome.
type Report struct {
	Command  string    `json:"command"`
	Service  string    `json:"service"`
	Hello    Reply     `json:"hello"`
	Findings []Finding `json:"findings"`
}

// Failed counts the steps that failed.
func (r *Report) Failed() int {
	n := 0
	for _, f := range r.Findings {
		if !f.Pass {
			n++
		}
	}
	return n
}

// Write prints the report, a line per step.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "client-check: %s\n  against %s\n", r.Command, r.Service)
	warnings := 0
	for _, f := range r.Findings {
		mark := "PASS"
		switch {
		case !f.Pass:
			mark = "FAIL"
		case f.Warning:
			mark = "WARN"
			warnings++
		}
		fmt.Fprintf(w, "  %s  %-16s %s\n", mark, f.Step, f.Says)
	}
	fmt.Fprintf(w, "%d steps: %d passed, %d failed, %d warnings.\n", len(r.Findings), len(r.Findings)-r.Failed(), r.Failed(), warnings)
}

// checker runs the steps and collects findings.
type checker struct {
	svc  Service
	opts CheckOptions
	rep  *Report

	mu      sync.Mutex
	garbage []string
	unknown map[string]bool
}

func (c *checker) pass(step, format string, args ...any) {
	c.rep.Findings = append(c.rep.Findings, Finding{Step: step, Pass: true, Says: fmt.Sprintf(format, args...)})
}

func (c *checker) warn(step, format string, args ...any) {
	c.rep.Findings = append(c.rep.Findings, Finding{Step: step, Pass: true, Warning: true, Says: fmt.Sprintf(format, args...)})
}

func (c *checker) fail(step, format string, args ...any) {
	c.rep.Findings = append(c.rep.Findings, Finding{Step: step, Says: fmt.Sprintf(format, args...)})
}

func (c *checker) start(ctx context.Context, client string, opts map[string]string) (*Locker, error) {
	return Start(ctx, Config{
		Command: c.opts.Command, Dir: c.opts.Dir, Client: client, Backend: c.svc.Backend, Endpoints: c.svc.Endpoints,
		TTL: c.opts.TTL, Options: opts, Log: c.opts.Log, HelloTimeout: 30 * time.Second, Grace: checkGrace,
		onLine: func(_ Reply, unknown []string, err error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if err != nil {
				c.garbage = append(c.garbage, err.Error())
			}
			for _, u := range unknown {
				c.unknown[u] = true
			}
		},
	})
}

// acquire runs one acquire with a deadline and says how long it took.
func acquire(ctx context.Context, l *Locker, key string, d time.Duration) (*Lease, time.Duration, error) {
	actx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	s, err := l.Acquire(actx, key)
	took := time.Since(start)
	if err != nil {
		return nil, took, err
	}
	return s.(*Lease), took, nil
}

func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// describeErr says in words what an adapter's failed request did.
func describeErr(err error) string {
	switch targets.ErrorKind(err) {
	case history.ErrClientTimeout:
		return "it did not answer within the deadline: " + err.Error()
	case history.ErrClientProtocol:
		return "it broke the protocol: " + err.Error()
	case history.ErrClientCrashed:
		return "it died: " + err.Error()
	case history.ErrClientError:
		return "it answered error: " + err.Error()
	}
	switch {
	case errors.Is(err, targets.ErrBusy):
		return "it answered busy"
	case errors.Is(err, targets.ErrUnavailable):
		return "it answered unavailable (" + err.Error() + ")"
	case errors.Is(err, targets.ErrNotOwner):
		return "it answered not_owner"
	}
	return err.Error()
}

func offersText(o Offers) string {
	var out []string
	if o.Token {
		out = append(out, "fencing tokens")
	} else {
		out = append(out, "no fencing token")
	}
	switch {
	case o.Renew && o.RenewMode != "":
		out = append(out, "renewal ("+o.RenewMode+")")
	case o.Renew:
		out = append(out, "renewal")
	default:
		out = append(out, "no renewal")
	}
	if o.CheckedRelease {
		out = append(out, "owner-checked release")
	} else {
		out = append(out, "UNCHECKED release")
	}
	if o.Held {
		out = append(out, "held queries")
	}
	return strings.Join(out, ", ")
}

// Check runs the adapter through the protocol against svc and reports each
// step: the handshake and its shape, refusing an unknown option, acquire,
// busy between two instances on one key (answered in time and not before
// half its deadline), release then re-acquire, a grant after a long wait
// lasting its whole TTL, tokens growing when offered, not_owner
// for a lease that expired and was taken by another, held and renew when
// offered, an unsupported request, every deadline, and close.
func Check(ctx context.Context, svc Service, opts CheckOptions) *Report {
	if opts.TTL <= 0 {
		opts.TTL = 2 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	c := &checker{svc: svc, opts: opts, rep: &Report{Command: opts.Command, Service: svc.Describe}, unknown: map[string]bool{}}
	c.run(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.garbage) == 0 {
		c.pass("stdout", "every line on stdout was a reply of the protocol")
	} else {
		c.fail("stdout", "%d lines on stdout were not replies; the first: %s", len(c.garbage), c.garbage[0])
	}
	if len(c.unknown) > 0 {
		names := make([]string, 0, len(c.unknown))
		for n := range c.unknown {
			names = append(names, n)
		}
		slices.Sort(names)
		c.warn("fields", "replies carried fields the protocol does not know, which the agent ignores: %s", strings.Join(names, ", "))
	}
	return c.rep
}

const (
	checkKey     = "splitbrain-check"
	busyDeadline = 1500 * time.Millisecond
	// checkGrace is the time the check's agent keeps between a request's
	// deadline_ms and its own deadline (at most a quarter of the request's
	// time, as in runs): 500 ms, not a run's 200 ms, because the check
	// judges an adapter by whether it answers in time, and on a loaded
	// laptop or CI runner (load 20-50 on 2 cores) shipped recipes' replies,
	// sent at their deadline_ms, reached the agent more than 200 ms later.
	// An adapter is asked for the same promptness either way: it answers
	// by deadline_ms.
	checkGrace = 500 * time.Millisecond
)

func (c *checker) run(ctx context.Context) {
	// Handshake.
	a, err := c.start(ctx, "c1", c.opts.Options)
	if err != nil {
		c.fail("handshake", "the adapter did not start and greet: %s", describeErr(err))
		return
	}
	defer a.Close()
	h := a.Hello()
	c.rep.Hello = h
	if h.Version == "" {
		c.warn("handshake", "hello_ok from %s names no version (say which version of the library runs; results.json records it)", h.Library)
	} else {
		c.pass("handshake", "%s %s (%s); offers %s", h.Library, h.Version, orDash(h.Language), offersText(*h.Offers))
	}
	offers := *h.Offers

	// An unknown option is refused.
	bogus := map[string]string{"splitbrain-check-bogus": "1"}
	for k, v := range c.opts.Options {
		bogus[k] = v
	}
	if x, err := c.start(ctx, "c9", bogus); err == nil {
		x.Close()
		c.fail("options", "it accepted the unknown option splitbrain-check-bogus=1: answer hello with an error naming options you do not know, or a misspelt --recipe-opt silently tests another client")
	} else if targets.ErrorKind(err) != "" {
		c.fail("options", "given an unknown option, %s (answer with {\"type\":\"error\",\"message\":...} instead)", describeErr(err))
	} else {
		c.pass("options", "an unknown option is refused: %v", err)
	}

	// The second instance starts first, so that the first hold's TTL is
	// not spent on a process start when the busy step asks.
	b, err := c.start(ctx, "c2", c.opts.Options)
	if err != nil {
		c.fail("busy", "a second instance did not start: %s", describeErr(err))
		return
	}
	defer b.Close()

	// Acquire. s1At is when the hold was asked for: its lease runs at
	// least TTL from then (its grant came later), so a grant to another
	// before s1At+TTL is two holders for certain; one after may follow
	// the lease running out, which proves nothing.
	ttl := c.opts.TTL
	s1At := time.Now()
	s1, took, err := acquire(ctx, a, checkKey, 5*time.Second)
	if err != nil {
		c.fail("acquire", "a free lock was not granted: %s", describeErr(err))
		return
	}
	c.pass("acquire", "a free lock was granted in %v%s", took.Round(time.Millisecond), tokenText(s1, offers))
	// retake releases the first hold (whatever it answers: it may have
	// run out) and takes the lock anew.
	retake := func() error {
		rctx, cancel := bounded(ctx, time.Second)
		rerr := s1.Release(rctx)
		cancel()
		at := time.Now()
		again, _, aerr := acquire(ctx, a, checkKey, 5*time.Second)
		if aerr != nil {
			return fmt.Errorf("release %v, acquire %w", rerr, aerr)
		}
		s1, s1At = again, at
		return nil
	}

	// Busy between two instances.
	var (
		s       *Lease
		late    int  // grants to b after the first lease's TTL had passed
		pastTTL bool // b's last grant came after the first hold's TTL
		retried string
		first   error // b's first unavailable answer
	)
ask:
	for {
		s, took, err = acquire(ctx, b, checkKey, busyDeadline)
		pastTTL = err == nil && time.Now().After(s1At.Add(ttl))
		switch {
		case pastTTL && late < 2:
			// Granted after the first lease may have run out (a loaded
			// machine): ask again with the lock held anew.
			late++
			rctx, cancel := bounded(ctx, time.Second)
			_ = s.Release(rctx)
			cancel()
		case errors.Is(err, targets.ErrUnavailable) && first == nil:
			// A client that could not read the lock within the deadline
			// (its request timed out on a loaded machine) does not know
			// it is held: unavailable is then the honest answer. It is
			// asked once more, with the lock held anew (the first hold
			// may be near the end of its TTL by now): a client that
			// tells the two apart answers busy; one that conflates them
			// answers unavailable again.
			first = err
			retried = fmt.Sprintf(" (asked again, the lock taken anew, after answering unavailable once: %v)", first)
		default:
			break ask
		}
		if rerr := retake(); rerr != nil {
			c.fail("busy", "the lock could not be taken anew to ask again: %v", rerr)
			return
		}
	}
	switch {
	case err == nil && !pastTTL:
		c.fail("busy", "a second instance was granted %s while the first held it: two holders at once", checkKey)
		_ = s.Release(ctx)
	case err == nil:
		c.fail("busy", "not judged: three times the second instance was granted %s only after the first hold's TTL (%v) had passed, on a machine too slow to ask within it", checkKey, ttl)
		_ = s.Release(ctx)
	case errors.Is(err, targets.ErrBusy) && took < busyDeadline/2:
		c.fail("busy", "busy after %v of a %v deadline: keep trying until the deadline (a lock freed meanwhile must be taken)", took.Round(time.Millisecond), busyDeadline)
	case errors.Is(err, targets.ErrBusy):
		if late > 0 && retried == "" {
			retried = " (asked again: a grant after the first hold's TTL proves nothing)"
		}
		c.pass("busy", "a second instance got busy after %v of a %v deadline%s", took.Round(time.Millisecond), busyDeadline, retried)
	case errors.Is(err, targets.ErrUnavailable):
		c.fail("busy", "a lock held by another was answered unavailable twice, though the service answers: tell busy from unavailable (%v)", err)
	default:
		c.fail("busy", "a lock held by another: %s", describeErr(err))
	}

	// Release, then re-acquire by the other. A hold past half its TTL
	// is taken anew first, so that the release is of a lease certainly
	// alive (not_owner is the right answer for one that ran out).
	if time.Since(s1At) > ttl/2 {
		if rerr := retake(); rerr != nil {
			c.fail("release", "the lock could not be taken anew to release it: %v", rerr)
			return
		}
	}
	rctx, cancel := bounded(ctx, time.Second)
	err = s1.Release(rctx)
	cancel()
	if err != nil {
		c.fail("release", "releasing a held lock: %s", describeErr(err))
	} else {
		c.pass("release", "a held lock was released")
	}
	s2, _, err := acquire(ctx, b, checkKey, 5*time.Second)
	if err != nil {
		c.fail("re-acquire", "after the release, the other instance was not granted the lock: %s", describeErr(err))
		return
	}
	c.pass("re-acquire", "after the release the other instance was granted it%s", tokenText(s2, offers))
	c.tokens(offers, s1, s2)
	rctx, cancel = bounded(ctx, time.Second)
	err = s2.Release(rctx)
	cancel()
	if err != nil {
		c.fail("release", "the second holder's release: %s", describeErr(err))
		return
	}

	// A grant after a long wait lasts its whole TTL.
	if !c.longWait(ctx, a, b) {
		return
	}

	// Expiry: a lease that expired and was taken by another is not ours.
	s3, _, err := acquire(ctx, a, checkKey, 5*time.Second)
	if err != nil {
		c.fail("expiry", "taking the lock again: %s", describeErr(err))
		return
	}
	c.tokens(offers, s2, s3)
	if offers.Renew && offers.RenewMode == RenewWatchdog {
		c.warn("expiry", "skipped: the adapter renews held locks by itself, so they do not expire while it runs (splitbrain run --nemesis pause freezes it to test that)")
		_ = s3.Release(ctx)
	} else {
		c.expiry(ctx, a, b, s3, offers)
	}

	// An unsupported request.
	c.unsupported(ctx, a)

	// Close.
	if err := a.Close(); err != nil {
		c.fail("close", "close: %s", describeErr(err))
	} else if d := a.proc.deathErr; d != nil && d.Error() != "exited" && !strings.HasPrefix(d.Error(), "exited;") {
		c.fail("close", "after closed the adapter ended with %v (exit 0)", d)
	} else {
		c.pass("close", "it answered closed and exited 0")
	}
}

func orDash(s string) string {
	if s == "" {
		return "language not said"
	}
	return s
}

func tokenText(s *Lease, o Offers) string {
	if !o.Token {
		return ""
	}
	return fmt.Sprintf(", token %d", s.Token())
}

// tokens checks that a later grant's token is greater.
func (c *checker) tokens(o Offers, before, after *Lease) {
	if !o.Token {
		return
	}
	if after.Token() <= before.Token() {
		c.fail("token", "a later grant of %s has token %d, not greater than the earlier %d: tokens must grow with every grant", checkKey, after.Token(), before.Token())
		return
	}
	c.pass("token", "token grew from %d to %d", before.Token(), after.Token())
}

// longWait checks that a lock granted after a long wait lasts its whole
// TTL from the grant: a holds the lock, b waits for it, a releases after
// 80% of the TTL, then 75% of the TTL passes for the service's leases
// while b holds, and a must find the lock busy. A lease taken when the
// wait began (an etcd lease made before waiting, a key's expiry counted
// from the request) would have run out: two holders at once. The longer
// the hold, the longer such a lease has been dead when a asks, which a
// service that revokes expired leases late needs (etcd beside two busy
// loops had not, 0.7 s after, with a hold of 60%). It reports whether
// the check can go on.
func (c *checker) longWait(ctx context.Context, a, b *Locker) bool {
	const step = "long-wait"
	ttl := c.opts.TTL
	first, _, err := acquire(ctx, a, checkKey, 5*time.Second)
	if err != nil {
		c.fail(step, "taking the lock again: %s", describeErr(err))
		return false
	}
	type got struct {
		s    *Lease
		took time.Duration
		err  error
	}
	ch := make(chan got, 1)
	go func() {
		s, took, err := acquire(ctx, b, checkKey, 2*ttl+2*time.Second)
		ch <- got{s, took, err}
	}()
	hold := ttl * 8 / 10
	select {
	case <-time.After(hold):
	case <-ctx.Done():
	}
	rctx, cancel := bounded(ctx, time.Second)
	err = first.Release(rctx)
	cancel()
	if err != nil {
		c.fail(step, "releasing a held lock: %s", describeErr(err))
	}
	g := <-ch
	if g.err != nil {
		c.fail(step, "a lock released while another waited for it was not granted to the waiter: %s", describeErr(g.err))
		return false
	}
	defer func() {
		rctx, cancel := bounded(ctx, time.Second)
		_ = g.s.Release(rctx)
		cancel()
	}()
	later := ttl * 3 / 4
	if err := c.svc.advance(ctx, later); err != nil {
		c.fail(step, "could not let %v pass: %v", later, err)
		return false
	}
	x, _, err := acquire(ctx, a, checkKey, 500*time.Millisecond)
	switch {
	case err == nil:
		c.fail(step, "a lock granted after a wait of %v was given to another %v later, within its %v TTL: count the lease from the grant, not from the start of the wait", g.took.Round(time.Millisecond), later, ttl)
		rctx, cancel := bounded(ctx, time.Second)
		_ = x.Release(rctx)
		cancel()
	case errors.Is(err, targets.ErrBusy):
		c.pass(step, "a lock granted after a wait of %v was still held %v later (TTL %v)", g.took.Round(time.Millisecond), later, ttl)
	default:
		c.fail(step, "trying the lock while another held it after a long wait: %s", describeErr(err))
	}
	return true
}

func (c *checker) expiry(ctx context.Context, a, b *Locker, old *Lease, o Offers) {
	if o.Held {
		hctx, cancel := bounded(ctx, time.Second)
		held, err := old.Held(hctx)
		cancel()
		switch {
		case err != nil:
			c.fail("held", "asking whether a held lock is held: %s", describeErr(err))
		case !held:
			c.fail("held", "a lock just granted was said not held")
		default:
			c.pass("held", "a held lock is said held")
		}
	}
	if o.Renew && o.RenewMode == RenewRequest {
		rctx, cancel := bounded(ctx, time.Second)
		err := old.Renew(rctx, c.opts.TTL)
		cancel()
		if err != nil {
			c.fail("renew", "renewing a held lock: %s", describeErr(err))
		} else {
			c.pass("renew", "a held lock was renewed")
		}
	}
	if err := c.svc.Expire(ctx, c.opts.TTL); err != nil {
		c.fail("expiry", "could not make the lease expire: %v", err)
		return
	}
	s, _, err := acquire(ctx, b, checkKey, 3*time.Second)
	if err != nil {
		c.fail("expiry", "after its lease expired the lock was not granted to another: %s", describeErr(err))
		return
	}
	c.pass("expiry", "after the first holder's lease expired another was granted the lock%s", tokenText(s, o))
	if o.Held {
		hctx, cancel := bounded(ctx, time.Second)
		held, err := old.Held(hctx)
		cancel()
		switch {
		case err != nil:
			c.fail("held", "asking about an expired lock: %s", describeErr(err))
		case held:
			c.fail("held", "a lock that expired and was taken by another was said held")
		default:
			c.pass("held", "an expired lock taken by another is said not held")
		}
	}
	rctx, cancel := bounded(ctx, time.Second)
	err = old.Release(rctx)
	cancel()
	switch {
	case errors.Is(err, targets.ErrNotOwner):
		c.pass("not-owner", "releasing the expired lease answered not_owner")
	case err == nil && o.CheckedRelease:
		c.fail("not-owner", "releasing a lease that expired and was taken by another answered ok, though hello_ok says checked_release: answer not_owner")
	case err == nil:
		c.warn("not-owner", "releasing a lease that expired answered ok (hello_ok says the release is not owner-checked)")
	default:
		c.fail("not-owner", "releasing an expired lease: %s", describeErr(err))
	}
	// The new holder must still hold it.
	x, _, err := acquire(ctx, a, checkKey, 500*time.Millisecond)
	switch {
	case err == nil:
		if o.CheckedRelease {
			c.fail("not-owner", "the stale release deleted the new holder's lock: the release is not owner-checked")
		} else {
			c.warn("not-owner", "the stale release deleted the new holder's lock, as an unchecked release does")
		}
		_ = x.Release(ctx)
	case errors.Is(err, targets.ErrBusy):
		c.pass("not-owner", "the new holder kept its lock")
	default:
		c.fail("not-owner", "checking the new holder still holds it: %s", describeErr(err))
	}
	rctx, cancel = bounded(ctx, time.Second)
	_ = s.Release(rctx)
	cancel()
}

// unsupported sends a request type the protocol does not have.
func (c *checker) unsupported(ctx context.Context, l *Locker) {
	p, err := l.current(ctx)
	if err != nil {
		c.fail("unsupported", "%s", describeErr(err))
		return
	}
	uctx, cancel := bounded(ctx, time.Second)
	defer cancel()
	rep, err := p.call(uctx, Request{Type: "splitbrain-check-unknown", Key: checkKey})
	switch {
	case err != nil:
		c.fail("unsupported", "a request of an unknown type: %s (answer {\"type\":\"error\",\"message\":\"unsupported\"})", describeErr(err))
	case rep.Type == TypeError:
		c.pass("unsupported", "a request of an unknown type was answered error (%s)", rep.Message)
	default:
		c.fail("unsupported", "a request of an unknown type was answered %q", rep.Type)
	}
}

// ServiceFor is the lock service a conformance check of an adapter for
// backend b runs against: the service at endpoints when given (leases
// expire by waiting their TTL out), else the backend's in-process
// stand-in (Backend.Local), whose clock the check moves. It returns a
// stop function; an error when neither is possible.
func ServiceFor(ctx context.Context, b targets.Backend, endpoints []string) (Service, func(), error) {
	if len(endpoints) > 0 {
		return Service{
			Backend: b.Name, Endpoints: endpoints,
			Describe: fmt.Sprintf("%s at %s (leases expire by waiting their TTL)", b.Name, strings.Join(endpoints, ", ")),
			Expire: func(ctx context.Context, ttl time.Duration) error {
				return Service{}.advance(ctx, ttl+time.Second)
			},
		}, func() {}, nil
	}
	if b.Local == nil {
		return Service{}, nil, ErrNoLocal
	}
	l, err := b.Local(ctx)
	if err != nil {
		return Service{}, nil, err
	}
	return Service{
		Backend: b.Name, Endpoints: l.Endpoints, Describe: l.Describe,
		Expire: func(_ context.Context, ttl time.Duration) error {
			l.Advance(ttl + 100*time.Millisecond)
			return nil
		},
		Advance: func(_ context.Context, d time.Duration) error {
			l.Advance(d)
			return nil
		},
	}, l.Close, nil
}

// ErrNoLocal says that a backend has no in-process stand-in: a check needs
// the endpoints of a service the user runs.
var ErrNoLocal = errors.New("no in-process stand-in of this service")
