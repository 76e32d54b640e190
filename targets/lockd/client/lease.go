package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splitbrain/splitbrain/targets/lockd/wire"
)

// Lease is a granted lock: key, owner, fencing token and TTL.
//
// A Lease is safe for concurrent use. Its methods may be called while
// KeepAlive runs.
type Lease struct {
	c     *Client
	key   string
	owner string
	token uint64

	mu       sync.Mutex
	ttl      time.Duration
	expires  time.Time
	done     chan struct{}
	err      error
	released bool
	kaCancel context.CancelFunc
	kaDone   chan struct{}

	renewFailures atomic.Int64
}

// Lease satisfies the harness's targets.RenewCounter.
var _ interface{ RenewFailures() int } = (*Lease)(nil)

func newLease(c *Client, r wire.LeaseResponse, sent time.Time) *Lease {
	ttl := time.Duration(r.TTLMillis) * time.Millisecond
	return &Lease{
		c: c, key: r.Key, owner: r.Owner, token: r.Token,
		ttl: ttl, expires: sent.Add(ttl), done: make(chan struct{}),
	}
}

// Key is the locked key.
func (l *Lease) Key() string { return l.key }

// Owner is the owner the lease was granted to.
func (l *Lease) Owner() string { return l.owner }

// Token is the lease's fencing token: greater than the token of every
// earlier grant of any lock by the same cluster.
func (l *Lease) Token() uint64 { return l.token }

// TTL is the lease's time to live as granted.
func (l *Lease) TTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// Expires is when the lease runs out unless renewed, measured from the
// moment the client sent the request that granted or last renewed it. The
// leader's own deadline is never earlier.
func (l *Lease) Expires() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expires
}

// Done is closed when the lease ends: released, refused on renewal, or,
// with KeepAlive running, the first failed renewal. Err says why.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err is nil while the lease is live. After Done it matches ErrReleased,
// or ErrLeaseLost and the cause (ErrNotOwner, ErrUnavailable,
// ErrLeaseExpired, ...).
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// RenewFailures is how many renewals of this lease failed.
func (l *Lease) RenewFailures() int { return int(l.renewFailures.Load()) }

// finish ends the lease with err, once.
func (l *Lease) finish(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.err = err
	close(l.done)
	if !errors.Is(err, ErrReleased) {
		l.c.leasesLost.Add(1)
		l.c.log.Warn("lockd lease lost", "key", l.key, "token", l.token, "err", err)
	}
}

func (l *Lease) lose(cause error) { l.finish(fmt.Errorf("%w: %w", ErrLeaseLost, cause)) }

func (l *Lease) countFailure() {
	l.renewFailures.Add(1)
	l.c.renewFailures.Add(1)
}

// Renew renews the lease once. A refusal (ErrNotOwner) ends the lease;
// other failures are returned and leave it to the caller.
func (l *Lease) Renew(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return fmt.Errorf("renew %q (token %d): %w", l.key, l.token, err)
	}
	err := l.renewOnce(ctx)
	if err != nil {
		l.countFailure()
		if errors.Is(err, ErrNotOwner) {
			l.lose(err)
		}
	}
	return err
}

func (l *Lease) renewOnce(ctx context.Context) error {
	sent := time.Now()
	var resp wire.LeaseResponse
	if err := l.c.do(ctx, http.MethodPost, "/v1/renew", wire.LeaseRequest{Key: l.key, Owner: l.owner, Token: l.token}, &resp, 0); err != nil {
		return fmt.Errorf("renew %q (token %d): %w", l.key, l.token, err)
	}
	l.c.renewals.Add(1)
	ttl := time.Duration(resp.TTLMillis) * time.Millisecond
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ttl = ttl
	if e := sent.Add(ttl); e.After(l.expires) {
		l.expires = e
	}
	return nil
}

// KeepAlive starts renewing the lease in the background every interval
// (0 = a third of the TTL) until ctx is done, the lease is released, or a
// renewal fails. The watchdog does not retry: the first failed renewal
// (refused, no leader, no quorum, timeout) or a client-side expiry ends the
// lease, closing Done with Err matching ErrLeaseLost, because a holder that
// cannot renew must assume its lease is gone. Cancelling ctx just stops
// renewing. A second call while one runs does nothing.
func (l *Lease) KeepAlive(ctx context.Context, interval time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	if l.kaDone != nil {
		select {
		case <-l.kaDone: // the previous watchdog stopped: start another
		default:
			return
		}
	}
	if interval <= 0 {
		interval = max(l.ttl/3, time.Millisecond)
	}
	ctx, cancel := context.WithCancel(ctx)
	l.kaCancel, l.kaDone = cancel, make(chan struct{})
	go l.watchdog(ctx, interval, l.kaDone)
}

func (l *Lease) watchdog(ctx context.Context, interval time.Duration, done chan struct{}) {
	defer close(done)
	next := func() time.Duration { return max(min(interval, time.Until(l.Expires())), 0) }
	t := time.NewTimer(next())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.done:
			return
		case <-t.C:
		}
		left := time.Until(l.Expires())
		if left <= 0 {
			l.countFailure()
			l.lose(ErrLeaseExpired)
			return
		}
		rctx, cancel := context.WithTimeout(ctx, left)
		err := l.renewOnce(rctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return // stopped, not failed
			}
			l.countFailure()
			if time.Now().After(l.Expires()) {
				err = fmt.Errorf("%w: %w", ErrLeaseExpired, err)
			}
			l.lose(err)
			return
		}
		t.Reset(next())
	}
}

// stopKeepAlive stops the watchdog and waits for it.
func (l *Lease) stopKeepAlive() {
	l.mu.Lock()
	cancel, done := l.kaCancel, l.kaDone
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Release stops KeepAlive and gives the lock back. It is sent even when
// the lease was reported lost, to free the lock early if the service still
// has it. It fails with ErrNotOwner if the lease was already gone. After
// any failure the lease is lost (it is no longer renewed), but Release may
// be retried. Releasing a released lease does nothing.
func (l *Lease) Release(ctx context.Context) error {
	l.stopKeepAlive()
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return nil
	}
	var resp wire.ReleaseResponse
	if err := l.c.do(ctx, http.MethodPost, "/v1/release", wire.LeaseRequest{Key: l.key, Owner: l.owner, Token: l.token}, &resp, 0); err != nil {
		err = fmt.Errorf("release %q (token %d): %w", l.key, l.token, err)
		l.lose(err)
		return err
	}
	l.mu.Lock()
	l.released = true
	l.mu.Unlock()
	l.finish(ErrReleased)
	return nil
}
