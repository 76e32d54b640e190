// Package client is the Go client of lockd, the Raft-replicated lease and
// fencing-token lock service in targets/lockd/server.
//
// A [Client] knows the HTTP endpoints of the cluster's nodes. It sends each
// request to the node it last saw lead, follows "not_leader" redirects, and
// falls back to the other endpoints; every attempt has its own timeout.
//
// Errors are checked with errors.Is and fall into kinds the harness counts
// apart:
//
//   - [ErrLockHeld]: the lock is held by another owner (also true for
//     [ErrLockDelay]); from [Client.Lock], the lock stayed busy until ctx was
//     done (the error then also matches ctx's error).
//   - [ErrUnavailable]: no node could decide: connection failures,
//     timeouts, no known leader, no quorum. It wraps the last cause.
//   - [ErrNotOwner]: a renewal or release was refused because the lease is
//     gone (expired, or the lock was granted to someone else).
//   - [ErrBadRequest]: the request was malformed.
//
// A [Lease] is a granted lock. Its holder must stop relying on it at
// [Lease.Expires], which the client measures from the moment it sent the
// request that granted or renewed it. [Lease.KeepAlive] renews it in the
// background and reports through [Lease.Done] the moment a renewal fails.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/splitbrain/splitbrain/targets/lockd/wire"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrLockHeld: the lock is held by another owner (or in lock-delay).
	ErrLockHeld = errors.New("lockd: lock held by another owner")
	// ErrLockDelay: the lock's last lease lapsed without a release and the
	// lock is ungrantable for a while. Errors matching it match
	// ErrLockHeld too.
	ErrLockDelay = errors.New("lockd: lock in lock-delay")
	// ErrNotOwner: the lease named by a renewal or release is not the
	// lock's current lease.
	ErrNotOwner = errors.New("lockd: not the lock owner")
	// ErrUnavailable: the service could not be reached or could not
	// decide.
	ErrUnavailable = errors.New("lockd: service unavailable")
	// ErrBadRequest: the service refused the request as malformed.
	ErrBadRequest = errors.New("lockd: bad request")
	// ErrLeaseLost: the lease can no longer be relied on (see Lease.Err).
	ErrLeaseLost = errors.New("lockd: lease lost")
	// ErrLeaseExpired: the lease's client-side expiry passed before a
	// renewal succeeded. It comes wrapped in ErrLeaseLost.
	ErrLeaseExpired = errors.New("lockd: lease expired before it was renewed")
	// ErrReleased: the lease was given back with Release.
	ErrReleased = errors.New("lockd: lease released")
)

// APIError is an error answer from a lockd node.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the error code, one of the wire.Code... constants
	// ([wire.CodeLockHeld], ...).
	Code    string
	Message string
	// Token is the current holder's fencing token (lock_held, not_owner),
	// if any.
	Token uint64
	// Remaining is how long the holder's lease or the lock-delay still
	// runs on the leader's clock (lock_held, lock_delay).
	Remaining time.Duration
	// LeaderID and LeaderAddr name the leader (not_leader), if known.
	LeaderID, LeaderAddr string
	// Endpoint is the node that answered.
	Endpoint string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("lockd %s: %s: %s", e.Endpoint, e.Code, e.Message)
}

// Is maps error codes to the package's sentinel errors.
func (e *APIError) Is(target error) bool {
	switch e.Code {
	case wire.CodeLockHeld:
		return target == ErrLockHeld
	case wire.CodeLockDelay:
		return target == ErrLockDelay || target == ErrLockHeld
	case wire.CodeNotOwner:
		return target == ErrNotOwner
	case wire.CodeNotLeader, wire.CodeUnavailable:
		return target == ErrUnavailable
	case wire.CodeBadRequest:
		return target == ErrBadRequest
	}
	return false
}

var _ error = (*APIError)(nil)

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (default: a private one). Per-request
// timeouts are applied through contexts, so its Timeout may stay 0.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithRequestTimeout bounds each attempt at each endpoint (default 2s).
func WithRequestTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// WithBackoff sets Lock's retry backoff bounds (default 20ms to 500ms).
func WithBackoff(minDelay, maxDelay time.Duration) Option {
	return func(c *Client) { c.backoffMin, c.backoffMax = minDelay, maxDelay }
}

// WithWait sets the server-side wait of each acquire attempt Lock makes
// while the lock is busy (default 1s; 0 = poll with backoff only).
func WithWait(d time.Duration) Option { return func(c *Client) { c.wait = d } }

// Stats counts what a Client did.
type Stats struct {
	// Requests is the number of HTTP attempts, redirects included.
	Requests uint64
	// Redirects is the number of not_leader answers that named a leader.
	Redirects uint64
	// Unavailable is the number of operations that failed with
	// ErrUnavailable.
	Unavailable uint64
	// Grants is the number of leases acquired.
	Grants uint64
	// Renewals is the number of successful renewals.
	Renewals uint64
	// RenewFailures is the number of failed renewals (refused or not
	// answered), by Renew and by KeepAlive.
	RenewFailures uint64
	// LeasesLost is the number of leases reported lost.
	LeasesLost uint64
}

// Client talks to a lockd cluster.
//
// A Client is safe for concurrent use.
type Client struct {
	endpoints  []string // base URLs
	hc         *http.Client
	ownHC      bool
	timeout    time.Duration
	wait       time.Duration
	backoffMin time.Duration
	backoffMax time.Duration
	log        *slog.Logger

	mu     sync.Mutex
	leader string // base URL of the node that last answered as leader

	requests, redirects, unavailable, grants, renewals, renewFailures, leasesLost atomic.Uint64
}

// New returns a Client for the nodes at endpoints ("10.0.0.11:7002" or
// "http://10.0.0.11:7002").
func New(endpoints []string, opts ...Option) (*Client, error) {
	c := &Client{
		timeout:    2 * time.Second,
		wait:       time.Second,
		backoffMin: 20 * time.Millisecond,
		backoffMax: 500 * time.Millisecond,
	}
	for _, ep := range endpoints {
		u, err := baseURL(ep)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(c.endpoints, u) {
			c.endpoints = append(c.endpoints, u)
		}
	}
	if len(c.endpoints) == 0 {
		return nil, errors.New("lockd client: no endpoints")
	}
	for _, o := range opts {
		o(c)
	}
	if c.timeout <= 0 {
		return nil, fmt.Errorf("lockd client: request timeout %v must be positive", c.timeout)
	}
	if c.backoffMin <= 0 || c.backoffMax < c.backoffMin {
		return nil, fmt.Errorf("lockd client: bad backoff bounds %v..%v", c.backoffMin, c.backoffMax)
	}
	if c.wait < 0 {
		return nil, fmt.Errorf("lockd client: wait %v is negative", c.wait)
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.hc == nil {
		c.hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		c.ownHC = true
	}
	return c, nil
}

// baseURL normalizes an endpoint to a scheme://host:port URL.
func baseURL(ep string) (string, error) {
	ep = strings.TrimSpace(ep)
	if ep == "" {
		return "", errors.New("lockd client: empty endpoint")
	}
	if !strings.Contains(ep, "://") {
		ep = "http://" + ep
	}
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("lockd client: bad endpoint %q", ep)
	}
	return u.Scheme + "://" + u.Host, nil
}

// Close releases idle connections of the Client's own HTTP client.
func (c *Client) Close() error {
	if c.ownHC {
		c.hc.CloseIdleConnections()
	}
	return nil
}

// Stats returns the Client's counters.
func (c *Client) Stats() Stats {
	return Stats{
		Requests:      c.requests.Load(),
		Redirects:     c.redirects.Load(),
		Unavailable:   c.unavailable.Load(),
		Grants:        c.grants.Load(),
		Renewals:      c.renewals.Load(),
		RenewFailures: c.renewFailures.Load(),
		LeasesLost:    c.leasesLost.Load(),
	}
}

// LockState is a lock's state as the leader sees it.
type LockState struct {
	Key   string
	Held  bool
	Owner string
	Token uint64
	TTL   time.Duration
	// Remaining is how long the lease still runs on the leader's clock.
	Remaining time.Duration
	// LockDelay is true while the free lock is in lock-delay, for
	// DelayRemaining more.
	LockDelay      bool
	DelayRemaining time.Duration
	// LastToken is the last token granted for the key.
	LastToken uint64
}

// Status is a node's GET /v1/status answer.
type Status = wire.StatusResponse

// Acquire makes one attempt to take the lock on key for owner with the
// given TTL (0 = the server's default). It fails with ErrLockHeld at once
// if the lock is busy.
func (c *Client) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (*Lease, error) {
	return c.acquire(ctx, key, owner, ttl, 0)
}

func (c *Client) acquire(ctx context.Context, key, owner string, ttl, wait time.Duration) (*Lease, error) {
	sent := time.Now()
	var resp wire.LeaseResponse
	req := wire.AcquireRequest{Key: key, Owner: owner, TTLMillis: wire.Millis(ttl), WaitMillis: wire.Millis(wait)}
	if err := c.do(ctx, http.MethodPost, "/v1/acquire", req, &resp, wait); err != nil {
		return nil, fmt.Errorf("acquire %q: %w", key, err)
	}
	c.grants.Add(1)
	return newLease(c, resp, sent), nil
}

// Lock takes the lock on key for owner, retrying while it is busy or the
// service is unavailable, until it is granted or ctx is done. While the
// lock is busy each attempt asks the server to wait (see WithWait);
// unavailability is retried with exponential backoff. When ctx ends the
// error matches ctx's error and the kind of the last failure: ErrLockHeld
// if the lock was busy, ErrUnavailable if no node could decide. Other
// errors (ErrBadRequest) are returned at once.
func (c *Client) Lock(ctx context.Context, key, owner string, ttl time.Duration) (*Lease, error) {
	backoff := c.backoffMin
	var last error
	for {
		wait := c.wait
		if dl, ok := ctx.Deadline(); ok {
			// Leave time for the answer to come back before ctx ends.
			left := time.Until(dl)
			wait = min(wait, left-min(c.timeout, left/4))
			if wait < 10*time.Millisecond {
				wait = 0
			}
		}
		l, err := c.acquire(ctx, key, owner, ttl, wait)
		if err == nil {
			return l, nil
		}
		if ctx.Err() != nil {
			// This attempt was likely cut short by ctx: keep what the
			// previous one learned, unless this one was decisive.
			if last == nil || errors.Is(err, ErrLockHeld) {
				last = err
			}
			break
		}
		busy := errors.Is(err, ErrLockHeld)
		if !busy && !errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		last = err
		var sleep time.Duration
		if busy && wait > 0 {
			// The server already waited; retry soon, with jitter.
			sleep = rand.N(c.backoffMin)
		} else {
			sleep = backoff/2 + rand.N(backoff/2+1)
			backoff = min(2*backoff, c.backoffMax)
			if !busy {
				c.log.Debug("lockd unavailable, retrying", "key", key, "err", err, "sleep", sleep)
			}
		}
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("lock %q: %w: %w", key, ctx.Err(), last)
}

// Get returns key's state, read linearizably from the leader.
func (c *Client) Get(ctx context.Context, key string) (LockState, error) {
	var r wire.LockResponse
	if err := c.do(ctx, http.MethodGet, "/v1/lock?key="+url.QueryEscape(key), nil, &r, 0); err != nil {
		return LockState{}, fmt.Errorf("get %q: %w", key, err)
	}
	return LockState{
		Key: r.Key, Held: r.Held, Owner: r.Owner, Token: r.Token,
		TTL:       time.Duration(r.TTLMillis) * time.Millisecond,
		Remaining: time.Duration(r.RemainingMillis) * time.Millisecond,
		LockDelay: r.LockDelay, DelayRemaining: time.Duration(r.DelayRemainingMillis) * time.Millisecond,
		LastToken: r.LastToken,
	}, nil
}

// Status asks one node, at endpoint, for its status.
func (c *Client) Status(ctx context.Context, endpoint string) (Status, error) {
	base, err := baseURL(endpoint)
	if err != nil {
		return Status{}, err
	}
	var s Status
	if err := c.once(ctx, base, http.MethodGet, "/v1/status", nil, &s, c.timeout); err != nil {
		if _, ok := errors.AsType[*APIError](err); !ok {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return Status{}, fmt.Errorf("status of %s: %w", endpoint, err)
	}
	return s, nil
}

// maxRedirects bounds how many leader redirects one operation follows
// beyond the configured endpoints.
const maxRedirects = 3

// do sends the request to the last known leader first, then to the other
// endpoints, following not_leader redirects. It returns the first decisive
// answer: success, or an APIError other than not_leader/unavailable. If no
// node decides, the error wraps ErrUnavailable and the last failure.
// extra lengthens the per-attempt timeout (for server-side waits).
func (c *Client) do(ctx context.Context, method, path string, body, out any, extra time.Duration) error {
	var payload []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		payload = b
	}
	c.mu.Lock()
	queue := make([]string, 0, len(c.endpoints)+1)
	if c.leader != "" {
		queue = append(queue, c.leader)
	}
	c.mu.Unlock()
	for _, ep := range c.endpoints {
		if !slices.Contains(queue, ep) {
			queue = append(queue, ep)
		}
	}
	tried := map[string]bool{}
	redirects := 0
	var last error
	for len(queue) > 0 && ctx.Err() == nil {
		ep := queue[0]
		queue = queue[1:]
		if tried[ep] {
			continue
		}
		tried[ep] = true
		err := c.once(ctx, ep, method, path, payload, out, c.timeout+extra)
		if err == nil {
			c.setLeader(ep)
			return nil
		}
		last = err
		apiErr, ok := errors.AsType[*APIError](err)
		if !ok {
			c.log.Debug("lockd endpoint failed", "endpoint", ep, "err", err)
			continue
		}
		switch apiErr.Code {
		case wire.CodeNotLeader:
			if apiErr.LeaderAddr == "" || redirects >= maxRedirects {
				continue
			}
			if leader, err := baseURL(apiErr.LeaderAddr); err == nil && !tried[leader] {
				redirects++
				c.redirects.Add(1)
				queue = slices.Insert(queue, 0, leader)
			}
		case wire.CodeUnavailable:
		default:
			c.setLeader(ep)
			return err
		}
	}
	if last == nil {
		last = ctx.Err()
	}
	c.unavailable.Add(1)
	if _, ok := errors.AsType[*APIError](last); ok {
		return fmt.Errorf("%w: %w", ErrUnavailable, last)
	}
	return fmt.Errorf("%w: %s %s: %w", ErrUnavailable, method, path, last)
}

func (c *Client) setLeader(ep string) {
	c.mu.Lock()
	c.leader = ep
	c.mu.Unlock()
}

// once makes one attempt at one endpoint. A JSON error answer becomes an
// *APIError; anything else that is not a 2xx answer with a JSON body is a
// plain error.
func (c *Client) once(ctx context.Context, base, method, path string, payload []byte, out any, timeout time.Duration) error {
	c.requests.Add(1)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, body)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s%s: %w", method, base, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("read %s%s answer: %w", base, path, err)
	}
	if resp.StatusCode/100 == 2 {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("decode %s%s answer: %w", base, path, err)
		}
		return nil
	}
	var e wire.ErrorResponse
	if err := json.Unmarshal(b, &e); err != nil || e.Error == "" {
		return fmt.Errorf("%s %s%s: HTTP %d: %.200q", method, base, path, resp.StatusCode, b)
	}
	if resp.StatusCode >= 500 && e.Error != wire.CodeUnavailable {
		// An internal error: let another node try.
		return fmt.Errorf("%s %s%s: HTTP %d: %s: %s", method, base, path, resp.StatusCode, e.Error, e.Message)
	}
	return &APIError{
		Status: resp.StatusCode, Code: e.Error, Message: e.Message, Token: e.Token,
		Remaining: time.Duration(e.RemainingMillis) * time.Millisecond,
		LeaderID:  e.LeaderID, LeaderAddr: e.LeaderAddr, Endpoint: base,
	}
}
