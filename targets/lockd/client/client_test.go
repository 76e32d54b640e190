package client

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/targets/lockd/wire"
)

// fakeNode is a scriptable lockd node on a loopback listener.
type fakeNode struct {
	srv *httptest.Server

	mu       sync.Mutex
	handlers map[string]http.HandlerFunc
	counts   map[string]int
	bodies   map[string][]map[string]any
}

func newFakeNode(tb testing.TB) *fakeNode {
	tb.Helper()
	f := &fakeNode{handlers: map[string]http.HandlerFunc{}, counts: map[string]int{}, bodies: map[string][]map[string]any{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.mu.Lock()
		f.counts[r.URL.Path]++
		f.bodies[r.URL.Path] = append(f.bodies[r.URL.Path], body)
		h := f.handlers[r.URL.Path]
		f.mu.Unlock()
		if h == nil {
			http.NotFound(w, r)
			return
		}
		h(w, r)
	}))
	tb.Cleanup(f.srv.Close)
	return f
}

func (f *fakeNode) handle(path string, h http.HandlerFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handlers[path] = h
}

func (f *fakeNode) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[path]
}

func (f *fakeNode) lastBody(path string) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.bodies[path]
	if len(b) == 0 {
		return nil
	}
	return b[len(b)-1]
}

// addr is the node's host:port.
func (f *fakeNode) addr() string { return strings.TrimPrefix(f.srv.URL, "http://") }

func reply(status int, v any) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
}

func grantReply(token uint64, ttl time.Duration) http.HandlerFunc {
	return reply(http.StatusOK, wire.LeaseResponse{Key: "k", Owner: "a", Token: token, TTLMillis: ttl.Milliseconds()})
}

func errReply(status int, code string) http.HandlerFunc {
	return reply(status, wire.ErrorResponse{Error: code, Message: "scripted " + code, Token: 7, RemainingMillis: 1500})
}

func newTestClient(tb testing.TB, endpoints []string, opts ...Option) *Client {
	tb.Helper()
	opts = append([]Option{WithRequestTimeout(500 * time.Millisecond), WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	c, err := New(endpoints, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

func TestNew(t *testing.T) {
	tests := []struct {
		name      string
		endpoints []string
		opts      []Option
		wantErr   bool
		want      []string
	}{
		{"host:port", []string{"127.0.0.1:7002"}, nil, false, []string{"http://127.0.0.1:7002"}},
		{"urls, deduplicated", []string{"http://127.0.0.1:7002/", "127.0.0.1:7002", "https://127.0.0.1:7003"}, nil, false,
			[]string{"http://127.0.0.1:7002", "https://127.0.0.1:7003"}},
		{"none", nil, nil, true, nil},
		{"empty", []string{" "}, nil, true, nil},
		{"bad scheme", []string{"ftp://127.0.0.1:1"}, nil, true, nil},
		{"bad timeout", []string{"127.0.0.1:1"}, []Option{WithRequestTimeout(0)}, true, nil},
		{"bad backoff", []string{"127.0.0.1:1"}, []Option{WithBackoff(time.Second, time.Millisecond)}, true, nil},
		{"bad wait", []string{"127.0.0.1:1"}, []Option{WithWait(-time.Second)}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.endpoints, tt.opts...)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("New succeeded with endpoints %q", tt.endpoints)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(c.endpoints, " ") != strings.Join(tt.want, " ") {
				t.Fatalf("endpoints %q, want %q", c.endpoints, tt.want)
			}
		})
	}
}

func TestErrorKinds(t *testing.T) {
	type kinds struct{ held, delay, notOwner, unavailable, bad bool }
	tests := []struct {
		name    string
		handler http.HandlerFunc // nil: the node is down
		want    kinds
	}{
		{"lock_held", errReply(409, wire.CodeLockHeld), kinds{held: true}},
		{"lock_delay", errReply(423, wire.CodeLockDelay), kinds{held: true, delay: true}},
		{"not_owner", errReply(403, wire.CodeNotOwner), kinds{notOwner: true}},
		{"bad_request", errReply(400, wire.CodeBadRequest), kinds{bad: true}},
		{"not_leader without a leader", errReply(421, wire.CodeNotLeader), kinds{unavailable: true}},
		{"unavailable", errReply(503, wire.CodeUnavailable), kinds{unavailable: true}},
		{"internal error", errReply(500, "internal"), kinds{unavailable: true}},
		{"not JSON", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "bad gateway", 502) }, kinds{unavailable: true}},
		{"hangs past the request timeout", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, kinds{unavailable: true}},
		{"connection refused", nil, kinds{unavailable: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNode(t)
			f.handle("/v1/acquire", tt.handler)
			if tt.handler == nil {
				f.srv.Close()
			}
			c := newTestClient(t, []string{f.srv.URL}, WithRequestTimeout(100*time.Millisecond))
			_, err := c.Acquire(context.Background(), "k", "a", time.Second)
			if err == nil {
				t.Fatal("acquire succeeded")
			}
			got := kinds{
				held:        errors.Is(err, ErrLockHeld),
				delay:       errors.Is(err, ErrLockDelay),
				notOwner:    errors.Is(err, ErrNotOwner),
				unavailable: errors.Is(err, ErrUnavailable),
				bad:         errors.Is(err, ErrBadRequest),
			}
			if got != tt.want {
				t.Fatalf("error %v has kinds %+v, want %+v", err, got, tt.want)
			}
			if tt.want.held {
				apiErr, ok := errors.AsType[*APIError](err)
				if !ok || apiErr.Token != 7 || apiErr.Remaining != 1500*time.Millisecond || apiErr.Endpoint != f.srv.URL {
					t.Fatalf("details %+v", apiErr)
				}
			}
		})
	}
}

func TestRedirectToLeader(t *testing.T) {
	follower, leader := newFakeNode(t), newFakeNode(t)
	follower.handle("/v1/acquire", reply(421, wire.ErrorResponse{Error: wire.CodeNotLeader, Message: "go there", LeaderID: "n2", LeaderAddr: leader.addr()}))
	leader.handle("/v1/acquire", grantReply(42, time.Second))
	c := newTestClient(t, []string{follower.srv.URL, leader.srv.URL})
	for range 2 {
		l, err := c.Acquire(context.Background(), "k", "a", time.Second)
		if err != nil || l.Token() != 42 {
			t.Fatalf("acquire = %v", err)
		}
	}
	if follower.count("/v1/acquire") != 1 || leader.count("/v1/acquire") != 2 || c.Stats().Redirects != 1 {
		t.Fatalf("follower got %d, leader %d requests, stats %+v; want the leader remembered after one redirect",
			follower.count("/v1/acquire"), leader.count("/v1/acquire"), c.Stats())
	}
	if b := leader.lastBody("/v1/acquire"); b["key"] != "k" || b["owner"] != "a" || b["ttl_ms"] != 1000.0 {
		t.Fatalf("acquire body %v", b)
	}
}

func TestFailoverToNextEndpoint(t *testing.T) {
	down, up := newFakeNode(t), newFakeNode(t)
	down.srv.Close()
	up.handle("/v1/acquire", grantReply(5, time.Second))
	c := newTestClient(t, []string{down.srv.URL, up.srv.URL})
	if _, err := c.Acquire(context.Background(), "k", "a", time.Second); err != nil {
		t.Fatalf("acquire with one node down: %v", err)
	}
}

func TestLockRetriesWhileBusy(t *testing.T) {
	f := newFakeNode(t)
	var mu sync.Mutex
	busy := 3
	f.handle("/v1/acquire", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if busy > 0 {
			busy--
			errReply(409, wire.CodeLockHeld)(w, r)
			return
		}
		grantReply(9, time.Second)(w, r)
	})
	c := newTestClient(t, []string{f.srv.URL}, WithWait(50*time.Millisecond), WithBackoff(time.Millisecond, 10*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, "k", "a", time.Second)
	if err != nil || l.Token() != 9 {
		t.Fatalf("Lock = %v", err)
	}
	if n := f.count("/v1/acquire"); n != 4 {
		t.Fatalf("%d attempts, want 4", n)
	}
	if w := f.lastBody("/v1/acquire")["wait_ms"]; w != 50.0 {
		t.Fatalf("wait_ms = %v, want the server-side wait", w)
	}
}

func TestLockReturnsBadRequestAtOnce(t *testing.T) {
	f := newFakeNode(t)
	f.handle("/v1/acquire", errReply(400, wire.CodeBadRequest))
	c := newTestClient(t, []string{f.srv.URL})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Lock(ctx, "", "a", time.Second); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("Lock = %v, want ErrBadRequest", err)
	}
	if n := f.count("/v1/acquire"); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
}

func TestLockDeadlineKinds(t *testing.T) {
	tests := []struct {
		name     string
		handler  http.HandlerFunc
		wantKind error
		notKind  error
	}{
		{"busy", errReply(409, wire.CodeLockHeld), ErrLockHeld, ErrUnavailable},
		{"unavailable", errReply(503, wire.CodeUnavailable), ErrUnavailable, ErrLockHeld},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNode(t)
			f.handle("/v1/acquire", tt.handler)
			c := newTestClient(t, []string{f.srv.URL}, WithBackoff(5*time.Millisecond, 20*time.Millisecond))
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := c.Lock(ctx, "k", "a", time.Second)
			if !errors.Is(err, tt.wantKind) || errors.Is(err, tt.notKind) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Lock = %v, want %v and DeadlineExceeded, not %v", err, tt.wantKind, tt.notKind)
			}
			if f.count("/v1/acquire") < 2 {
				t.Fatalf("Lock did not retry")
			}
		})
	}
}

func acquireFake(tb testing.TB, f *fakeNode, ttl time.Duration, opts ...Option) (*Client, *Lease) {
	tb.Helper()
	f.handle("/v1/acquire", grantReply(11, ttl))
	c := newTestClient(tb, []string{f.srv.URL}, opts...)
	l, err := c.Acquire(context.Background(), "k", "a", ttl)
	if err != nil {
		tb.Fatal(err)
	}
	return c, l
}

func waitDone(tb testing.TB, l *Lease) {
	tb.Helper()
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		tb.Fatal("lease not reported lost")
	}
}

func TestKeepAlive(t *testing.T) {
	f := newFakeNode(t)
	c, l := acquireFake(t, f, time.Second)
	f.handle("/v1/renew", grantReply(11, time.Second))
	first := l.Expires()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.KeepAlive(ctx, 10*time.Millisecond)
	l.KeepAlive(ctx, 10*time.Millisecond) // no second watchdog
	deadline := time.Now().Add(5 * time.Second)
	for c.Stats().Renewals < 3 {
		if time.Now().After(deadline) {
			t.Fatal("no renewals")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !l.Expires().After(first) || l.Err() != nil || l.RenewFailures() != 0 {
		t.Fatalf("after renewals: expires %v (was %v), err %v, failures %d", l.Expires(), first, l.Err(), l.RenewFailures())
	}
	if b := f.lastBody("/v1/renew"); b["key"] != "k" || b["owner"] != "a" || b["token"] != 11.0 {
		t.Fatalf("renew body %v", b)
	}

	// The first refused renewal ends the lease; nothing is renewed after.
	f.handle("/v1/renew", errReply(403, wire.CodeNotOwner))
	waitDone(t, l)
	if err := l.Err(); !errors.Is(err, ErrLeaseLost) || !errors.Is(err, ErrNotOwner) {
		t.Fatalf("Err = %v, want ErrLeaseLost and ErrNotOwner", err)
	}
	if l.RenewFailures() != 1 || c.Stats().RenewFailures != 1 || c.Stats().LeasesLost != 1 {
		t.Fatalf("failures %d, stats %+v", l.RenewFailures(), c.Stats())
	}
	n := f.count("/v1/renew")
	time.Sleep(50 * time.Millisecond)
	if f.count("/v1/renew") != n {
		t.Fatal("renewed after the loss")
	}
	if err := l.Renew(context.Background()); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Renew of a lost lease = %v", err)
	}
}

func TestKeepAliveLosesLeaseWhenUnhealthy(t *testing.T) {
	tests := []struct {
		name     string
		renew    http.HandlerFunc
		ttl      time.Duration
		wantKind error
	}{
		{"no quorum", errReply(503, wire.CodeUnavailable), time.Second, ErrUnavailable},
		{"no known leader", errReply(421, wire.CodeNotLeader), time.Second, ErrUnavailable},
		{"renewal hangs past the lease", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, 200 * time.Millisecond, ErrLeaseExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNode(t)
			_, l := acquireFake(t, f, tt.ttl, WithRequestTimeout(2*time.Second))
			f.handle("/v1/renew", tt.renew)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			start := time.Now()
			l.KeepAlive(ctx, 20*time.Millisecond)
			waitDone(t, l)
			if err := l.Err(); !errors.Is(err, ErrLeaseLost) || !errors.Is(err, tt.wantKind) {
				t.Fatalf("Err = %v, want ErrLeaseLost and %v", err, tt.wantKind)
			}
			if tt.wantKind == ErrLeaseExpired && time.Since(start) > tt.ttl+time.Second {
				t.Fatalf("loss reported after %v, lease TTL %v", time.Since(start), tt.ttl)
			}
			if l.RenewFailures() != 1 {
				t.Fatalf("renew failures %d", l.RenewFailures())
			}
		})
	}
}

func TestKeepAliveCancel(t *testing.T) {
	f := newFakeNode(t)
	c, l := acquireFake(t, f, time.Second)
	f.handle("/v1/renew", grantReply(11, time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	l.KeepAlive(ctx, 10*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	cancel()
	l.stopKeepAlive()
	// Count on the client side: a renewal cancelled in flight may still
	// reach the server after the watchdog stopped.
	sent := c.Stats().Requests
	time.Sleep(50 * time.Millisecond)
	if c.Stats().Requests != sent || l.Err() != nil {
		t.Fatalf("after cancel: requests %d -> %d, err %v", sent, c.Stats().Requests, l.Err())
	}
	n := f.count("/v1/renew")
	select {
	case <-l.Done():
		t.Fatal("Done closed by cancelling KeepAlive")
	default:
	}
	// KeepAlive can be started again.
	l.KeepAlive(context.Background(), 10*time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for f.count("/v1/renew") == n {
		if time.Now().After(deadline) {
			t.Fatal("restarted KeepAlive does not renew")
		}
		time.Sleep(5 * time.Millisecond)
	}
	l.stopKeepAlive()
}

func TestRelease(t *testing.T) {
	f := newFakeNode(t)
	c, l := acquireFake(t, f, time.Second)
	f.handle("/v1/renew", grantReply(11, time.Second))
	f.handle("/v1/release", reply(200, map[string]any{"key": "k", "token": 11, "released": true}))
	l.KeepAlive(context.Background(), 10*time.Millisecond)
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l.Err(), ErrReleased) {
		t.Fatalf("Err after release = %v", l.Err())
	}
	sent := c.Stats().Requests
	time.Sleep(50 * time.Millisecond)
	if c.Stats().Requests != sent {
		t.Fatal("renewed after release")
	}
	if err := l.Release(context.Background()); err != nil || f.count("/v1/release") != 1 {
		t.Fatalf("second release = %v after %d requests", err, f.count("/v1/release"))
	}
}

func TestReleaseRefused(t *testing.T) {
	f := newFakeNode(t)
	_, l := acquireFake(t, f, time.Second)
	f.handle("/v1/release", errReply(403, wire.CodeNotOwner))
	err := l.Release(context.Background())
	if !errors.Is(err, ErrNotOwner) || !errors.Is(l.Err(), ErrLeaseLost) {
		t.Fatalf("release = %v, lease err %v", err, l.Err())
	}
}

func TestManualRenew(t *testing.T) {
	f := newFakeNode(t)
	_, l := acquireFake(t, f, time.Second)
	f.handle("/v1/renew", errReply(503, wire.CodeUnavailable))
	if err := l.Renew(context.Background()); !errors.Is(err, ErrUnavailable) || l.Err() != nil {
		t.Fatalf("renew while unavailable = %v, lease err %v; want the lease left to the caller", err, l.Err())
	}
	f.handle("/v1/renew", errReply(403, wire.CodeNotOwner))
	if err := l.Renew(context.Background()); !errors.Is(err, ErrNotOwner) || !errors.Is(l.Err(), ErrLeaseLost) {
		t.Fatalf("refused renew = %v, lease err %v", err, l.Err())
	}
	if l.RenewFailures() != 2 {
		t.Fatalf("renew failures %d, want 2", l.RenewFailures())
	}
}

func TestGetAndStatus(t *testing.T) {
	f := newFakeNode(t)
	f.handle("/v1/lock", reply(200, wire.LockResponse{Key: "k", Held: true, Owner: "a", Token: 3, TTLMillis: 1000, RemainingMillis: 400}))
	f.handle("/v1/status", reply(200, Status{ID: "n1", State: "Leader", Term: 2}))
	c := newTestClient(t, []string{f.srv.URL})
	st, err := c.Get(context.Background(), "k")
	if err != nil || !st.Held || st.Owner != "a" || st.Token != 3 || st.TTL != time.Second || st.Remaining != 400*time.Millisecond {
		t.Fatalf("Get = %+v, %v", st, err)
	}
	s, err := c.Status(context.Background(), f.addr())
	if err != nil || s.ID != "n1" || s.State != "Leader" || s.Term != 2 {
		t.Fatalf("Status = %+v, %v", s, err)
	}
	f.srv.Close()
	if _, err := c.Status(context.Background(), f.addr()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Status of a down node = %v", err)
	}
}
