package lockd

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/lockd/client"
)

func TestClientEndpoints(t *testing.T) {
	// lockd's clients dial every node unless told otherwise
	// (targets.ClientEndpoints has the table of both modes).
	eps := []string{"a:1", "b:1", "c:1"}
	if got, err := targets.ClientEndpoints(eps, "c5", EndpointsOption.Get(nil)); err != nil || strings.Join(got, ",") != strings.Join(eps, ",") {
		t.Errorf("c5 by default: %v %v, want %v", got, err, eps)
	}
}

func TestNewLockerRejects(t *testing.T) {
	tests := []struct {
		name string
		cfg  targets.RecipeConfig
		want string
	}{
		{"no endpoints", targets.RecipeConfig{Kind: "lockd"}, "no endpoints"},
		{"bad endpoints mode", targets.RecipeConfig{Kind: "lockd", Endpoints: []string{"127.0.0.1:1"}, Options: map[string]string{"endpoints": "some"}}, `option endpoints="some" for recipe lockd: want one of all, pinned`},
		{"bad endpoint", targets.RecipeConfig{Kind: "lockd", Endpoints: []string{"ftp://x:1"}}, "bad endpoint"},
		{"negative ttl", targets.RecipeConfig{Kind: "lockd", Endpoints: []string{"127.0.0.1:1"}, TTL: targets.Duration(-time.Second)}, "negative"},
	}
	// The registered factory checks the options against the recipe's
	// declarations, then NewLocker checks the rest.
	r, err := targets.LookupRecipe(Name)
	if err != nil {
		t.Fatal(err)
	}
	newLocker := r.Factory()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newLocker(context.Background(), tt.cfg, "c1", nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// fakeNode is a scripted lockd node on a loopback listener.
type fakeNode struct {
	srv *httptest.Server

	mu       sync.Mutex
	replies  map[string]fakeReply
	counts   map[string]int
	requests map[string][]map[string]any
}

type fakeReply struct {
	status int
	body   any
}

func newFakeNode(t *testing.T) *fakeNode {
	t.Helper()
	f := &fakeNode{replies: map[string]fakeReply{}, counts: map[string]int{}, requests: map[string][]map[string]any{}}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.mu.Lock()
		f.counts[r.URL.Path]++
		f.requests[r.URL.Path] = append(f.requests[r.URL.Path], body)
		rep, ok := f.replies[r.URL.Path]
		f.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.status)
		_ = json.NewEncoder(w).Encode(rep.body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeNode) set(path string, status int, body any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replies[path] = fakeReply{status, body}
}

func (f *fakeNode) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[path]
}

func (f *fakeNode) owners() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, b := range f.requests["/v1/acquire"] {
		out = append(out, b["owner"].(string))
	}
	return out
}

func (f *fakeNode) endpoint() string { return strings.TrimPrefix(f.srv.URL, "http://") }

func grant(token uint64, ttl time.Duration) map[string]any {
	return map[string]any{"key": "k", "owner": "o", "token": token, "ttl_ms": ttl.Milliseconds()}
}

func apiErr(code string) map[string]any {
	return map[string]any{"error": code, "message": "scripted " + code, "token": 7, "remaining_ms": 500}
}

func fakeLocker(t *testing.T, endpoints []string, ttl time.Duration) *Locker {
	t.Helper()
	l, err := newLocker(targets.RecipeConfig{Kind: "lockd", Endpoints: endpoints, TTL: targets.Duration(ttl)}, "c1", nil,
		client.WithRequestTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// sentinels reports which of the targets errors err matches.
func sentinels(err error) string {
	var out []string
	for _, s := range []struct {
		name string
		err  error
	}{{"busy", targets.ErrBusy}, {"unavailable", targets.ErrUnavailable}, {"not-owner", targets.ErrNotOwner}} {
		if errors.Is(err, s.err) {
			out = append(out, s.name)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "+")
}

// TestAcquireErrors: what the service answers to an acquisition decides
// the sentinel, and exactly one.
func TestAcquireErrors(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   any
		down   bool // the node is not even listening
		want   string
		also   error
	}{
		{"held until ctx ends", http.StatusConflict, apiErr("lock_held"), false, "busy", context.DeadlineExceeded},
		{"lock-delay", http.StatusLocked, apiErr("lock_delay"), false, "busy", client.ErrLockDelay},
		{"no quorum", http.StatusServiceUnavailable, apiErr("unavailable"), false, "unavailable", context.DeadlineExceeded},
		{"no known leader", http.StatusMisdirectedRequest, apiErr("not_leader"), false, "unavailable", client.ErrUnavailable},
		{"internal error", http.StatusInternalServerError, apiErr("internal"), false, "unavailable", nil},
		{"not json", http.StatusBadGateway, "<html>", false, "unavailable", nil},
		{"connection refused", 0, nil, true, "unavailable", nil},
		{"bad request", http.StatusBadRequest, apiErr("bad_request"), false, "none", client.ErrBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNode(t)
			f.set("/v1/acquire", tt.status, tt.body)
			if tt.down {
				f.srv.Close()
			}
			l := fakeLocker(t, []string{f.endpoint()}, time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			s, err := l.Acquire(ctx, "k")
			if err == nil {
				t.Fatalf("granted %v", s.Token())
			}
			if got := sentinels(err); got != tt.want {
				t.Fatalf("error %v matches %s, want %s", err, got, tt.want)
			}
			if tt.also != nil && !errors.Is(err, tt.also) {
				t.Fatalf("error %v does not match %v", err, tt.also)
			}
			if !strings.Contains(err.Error(), "acquire k") {
				t.Fatalf("error %q does not name the operation", err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("took %v: ctx not honoured", took)
			}
		})
	}
}

// TestLeaseErrors: refused releases and renewals are ErrNotOwner, ones
// nobody decided are ErrUnavailable.
func TestLeaseErrors(t *testing.T) {
	tests := []struct {
		name   string
		op     string // release or renew
		status int
		body   any
		want   string
	}{
		{"release refused", "release", http.StatusForbidden, apiErr("not_owner"), "not-owner"},
		{"release without quorum", "release", http.StatusServiceUnavailable, apiErr("unavailable"), "unavailable"},
		{"release without leader", "release", http.StatusMisdirectedRequest, apiErr("not_leader"), "unavailable"},
		{"renew refused", "renew", http.StatusForbidden, apiErr("not_owner"), "not-owner"},
		{"renew without quorum", "renew", http.StatusServiceUnavailable, apiErr("unavailable"), "unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNode(t)
			f.set("/v1/acquire", http.StatusOK, grant(42, time.Minute))
			f.set("/v1/"+tt.op, tt.status, tt.body)
			l := fakeLocker(t, []string{f.endpoint()}, time.Minute)
			s := acquire(t, l, "k", time.Second)
			if s.Token() != 42 {
				t.Fatalf("token %d, want the service's 42", s.Token())
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			var err error
			if tt.op == "release" {
				err = s.Release(ctx)
			} else {
				err = s.Renew(ctx)
			}
			if got := sentinels(err); got != tt.want {
				t.Fatalf("%s error %v matches %s, want %s", tt.op, err, got, tt.want)
			}
			if s.RenewFailures() != map[string]int{"release": 0, "renew": 1}[tt.op] {
				t.Fatalf("renew failures %d after %s", s.RenewFailures(), tt.op)
			}
		})
	}
}

// TestWatchdog: the lease is renewed about every TTL/3 while held, not
// after Release; a refused renewal ends it and is counted.
func TestWatchdog(t *testing.T) {
	t.Run("renews while held, stops at release", func(t *testing.T) {
		f := newFakeNode(t)
		f.set("/v1/acquire", http.StatusOK, grant(5, 300*time.Millisecond))
		f.set("/v1/renew", http.StatusOK, grant(5, 300*time.Millisecond))
		f.set("/v1/release", http.StatusOK, map[string]any{"key": "k", "token": 5, "released": true})
		l := fakeLocker(t, []string{f.endpoint()}, 300*time.Millisecond)
		s := acquire(t, l, "k", time.Second)
		time.Sleep(700 * time.Millisecond) // about 7 renewal intervals
		if n := f.count("/v1/renew"); n < 3 || n > 12 {
			t.Fatalf("%d renewals in 700ms with a 300ms TTL, want about 7", n)
		}
		select {
		case <-s.Done():
			t.Fatalf("lease ended while renewed: %v", s.Err())
		default:
		}
		if err := s.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		sent := l.Stats().Requests
		time.Sleep(250 * time.Millisecond)
		if l.Stats().Requests != sent {
			t.Fatal("renewed after release")
		}
		if s.RenewFailures() != 0 {
			t.Fatalf("renew failures %d", s.RenewFailures())
		}
	})
	t.Run("refused renewal ends the lease", func(t *testing.T) {
		f := newFakeNode(t)
		f.set("/v1/acquire", http.StatusOK, grant(5, 300*time.Millisecond))
		f.set("/v1/renew", http.StatusForbidden, apiErr("not_owner"))
		f.set("/v1/release", http.StatusForbidden, apiErr("not_owner"))
		l := fakeLocker(t, []string{f.endpoint()}, 300*time.Millisecond)
		s := acquire(t, l, "k", time.Second)
		select {
		case <-s.Done():
		case <-time.After(time.Second):
			t.Fatal("lease not lost after a refused renewal")
		}
		if !errors.Is(s.Err(), client.ErrNotOwner) || s.RenewFailures() != 1 {
			t.Fatalf("err %v, renew failures %d", s.Err(), s.RenewFailures())
		}
		if err := s.Release(context.Background()); !errors.Is(err, targets.ErrNotOwner) {
			t.Fatalf("release of a lost lease: %v", err)
		}
	})
	t.Run("close stops every watchdog", func(t *testing.T) {
		f := newFakeNode(t)
		f.set("/v1/acquire", http.StatusOK, grant(5, 300*time.Millisecond))
		f.set("/v1/renew", http.StatusOK, grant(5, 300*time.Millisecond))
		l := fakeLocker(t, []string{f.endpoint()}, 300*time.Millisecond)
		acquire(t, l, "k", time.Second)
		acquire(t, l, "k2", time.Second)
		time.Sleep(150 * time.Millisecond)
		l.Close()
		time.Sleep(50 * time.Millisecond) // a renewal in flight may finish
		sent := l.Stats().Requests
		time.Sleep(250 * time.Millisecond)
		if l.Stats().Requests != sent {
			t.Fatal("renewed after close")
		}
	})
}

// TestOwnersAreUnique: every acquisition asks as a new owner, named after
// the client, so a holder never gets another acquisition's lease back.
func TestOwnersAreUnique(t *testing.T) {
	f := newFakeNode(t)
	f.set("/v1/acquire", http.StatusOK, grant(5, time.Minute))
	f.set("/v1/release", http.StatusOK, map[string]any{"key": "k", "token": 5, "released": true})
	l := fakeLocker(t, []string{f.endpoint()}, time.Minute)
	l2 := fakeLocker(t, []string{f.endpoint()}, time.Minute)
	for _, x := range []*Locker{l, l, l2} {
		s := acquire(t, x, "k", time.Second)
		if err := s.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	owners := f.owners()
	seen := map[string]bool{}
	for _, o := range owners {
		if seen[o] || !strings.HasPrefix(o, "c1-") {
			t.Fatalf("owners %q: want unique, each starting with the client name", owners)
		}
		seen[o] = true
	}
	if len(owners) != 3 {
		t.Fatalf("owners %q", owners)
	}
}
