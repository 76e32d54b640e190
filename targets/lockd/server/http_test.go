package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/targets/lockd/client"
)

// httpJSON sends body (a JSON string, or "" for none) and decodes the JSON
// answer into a map (nil if the answer is not JSON).
func httpJSON(tb testing.TB, method, url, body string) (int, map[string]any) {
	tb.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	var m map[string]any
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(b, &m); err != nil {
			tb.Fatalf("%s %s: bad JSON %q: %v", method, url, b, err)
		}
	}
	return resp.StatusCode, m
}

func num(m map[string]any, k string) float64 {
	f, _ := m[k].(float64)
	return f
}

// waitAddrs waits until every node knows the leader's HTTP address.
func (c *testCluster) waitAddrs(leader int) {
	c.tb.Helper()
	id := c.cfgs[leader].ID
	eventually(c.tb, "every node to know the leader's address", func() bool {
		for i := range c.cfgs {
			if n := c.node(i); n != nil && n.fsm.addr(id) == "" {
				return false
			}
		}
		return true
	})
}

func TestHTTPClientRoundTrip(t *testing.T) {
	c := newCluster(t, 3, withHTTP(), withSteadyRaft())
	leader := c.waitLeader()
	c.waitAddrs(leader)
	followers := c.others(leader)
	// Followers first, so that the first request is redirected.
	eps := []string{c.urls[followers[0]], c.urls[followers[1]], c.urls[leader]}
	cl, err := client.New(eps, client.WithRequestTimeout(time.Second), client.WithLogger(c.log))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()

	before := time.Now()
	l, err := cl.Acquire(ctx, "k", "a", 5*time.Second)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if l.Token() == 0 || l.TTL() != 5*time.Second || l.Key() != "k" || l.Owner() != "a" {
		t.Fatalf("lease token %d ttl %v key %q owner %q", l.Token(), l.TTL(), l.Key(), l.Owner())
	}
	if exp := l.Expires(); exp.Before(before.Add(5*time.Second)) || exp.After(time.Now().Add(5*time.Second)) {
		t.Fatalf("client-side expiry %v not measured from the send time", exp)
	}
	if got := cl.Stats().Redirects; got < 1 {
		t.Fatalf("redirects = %d, want the follower to redirect to the leader", got)
	}

	_, err = cl.Acquire(ctx, "k", "b", 5*time.Second)
	if !errors.Is(err, client.ErrLockHeld) || errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("acquire of a held lock: %v, want ErrLockHeld only", err)
	}
	apiErr, ok := errors.AsType[*client.APIError](err)
	if !ok || apiErr.Token != l.Token() || apiErr.Remaining <= 0 || apiErr.Status != http.StatusConflict {
		t.Fatalf("busy error details %+v", apiErr)
	}

	st, err := cl.Get(ctx, "k")
	if err != nil || !st.Held || st.Owner != "a" || st.Token != l.Token() || st.Remaining <= 0 {
		t.Fatalf("get = %+v, %v", st, err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew: %v", err)
	}

	lctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = cl.Lock(lctx, "k", "b", time.Second)
	cancel()
	if !errors.Is(err, client.ErrLockHeld) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Lock timing out on a busy lock: %v, want ErrLockHeld and DeadlineExceeded", err)
	}

	released := make(chan error, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		released <- l.Release(ctx)
	}()
	lctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	l2, err := cl.Lock(lctx, "k", "b", time.Second)
	cancel()
	if err != nil || l2.Token() <= l.Token() {
		t.Fatalf("Lock after release = %v; want a token above %d", err, l.Token())
	}
	if err := <-released; err != nil {
		t.Fatalf("release: %v", err)
	}
	if !errors.Is(l.Err(), client.ErrReleased) {
		t.Fatalf("released lease Err = %v", l.Err())
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}

	s, err := cl.Status(ctx, c.urls[leader])
	if err != nil || s.State != "Leader" || s.ID != c.cfgs[leader].ID || !s.Ready || s.Version != Version || s.AppliedIndex == 0 {
		t.Fatalf("leader status %+v, %v", s, err)
	}
	s, err = cl.Status(ctx, c.urls[followers[0]])
	if err != nil || s.State != "Follower" || s.LeaderID != c.cfgs[leader].ID || s.LeaderHTTPAddr != c.cfgs[leader].HTTPAdvertise {
		t.Fatalf("follower status %+v, %v", s, err)
	}
	for i, u := range c.urls {
		if code, m := httpJSON(t, http.MethodGet, u+"/healthz", ""); code != http.StatusOK || m["ok"] != true {
			t.Fatalf("healthz of node %d: %d %v", i, code, m)
		}
	}

	// Without a majority nothing can be decided: unavailable, not busy.
	c.stop(followers[0])
	c.stop(followers[1])
	_, err = cl.Acquire(ctx, "z", "c", time.Second)
	if !errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrLockHeld) {
		t.Fatalf("acquire without a quorum: %v, want ErrUnavailable only", err)
	}
	lctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = cl.Lock(lctx, "z", "c", time.Second)
	cancel()
	if !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrLockHeld) {
		t.Fatalf("Lock without a quorum: %v, want ErrUnavailable and DeadlineExceeded", err)
	}
	eventually(t, "the lone node to report unhealthy", func() bool {
		code, _ := httpJSON(t, http.MethodGet, c.urls[leader]+"/healthz", "")
		return code == http.StatusServiceUnavailable
	})
	if cl.Stats().Unavailable < 2 {
		t.Fatalf("client stats %+v", cl.Stats())
	}
}

func TestHTTPErrorCodes(t *testing.T) {
	c := newCluster(t, 3, withHTTP(), withSteadyRaft(), withConfig(func(cfg *Config) { cfg.LockDelay = 5 * time.Second }))
	all := c.all()
	held := c.mustAcquire(all, "held", "a", 10*time.Second)
	c.mustAcquire(all, "delayed", "a", time.Second)
	c.clock.Advance(time.Second)
	c.waitState(all, "delayed", func(v lockView) bool { return v.Delayed })
	leader := c.waitLeader()
	c.waitAddrs(leader)
	L, F := c.urls[leader], c.urls[c.others(leader)[0]]
	tok := strconv.FormatUint(held.Token, 10)

	tests := []struct {
		name, method, url, body string
		status                  int
		code                    string
		check                   func(m map[string]any) bool
	}{
		{"empty body", "POST", L + "/v1/acquire", "{}", 400, "bad_request", nil},
		{"malformed body", "POST", L + "/v1/acquire", `{"key":`, 400, "bad_request", nil},
		{"unknown field", "POST", L + "/v1/acquire", `{"key":"k","owner":"a","bogus":1}`, 400, "bad_request", nil},
		{"ttl above max", "POST", L + "/v1/acquire", `{"key":"k","owner":"a","ttl_ms":3600000}`, 400, "bad_request", nil},
		{"negative wait", "POST", L + "/v1/acquire", `{"key":"k","owner":"a","wait_ms":-1}`, 400, "bad_request", nil},
		{"held", "POST", L + "/v1/acquire", `{"key":"held","owner":"b","ttl_ms":1000}`, 409, "lock_held",
			func(m map[string]any) bool {
				return num(m, "token") == float64(held.Token) && num(m, "remaining_ms") > 0
			}},
		{"lock-delay", "POST", L + "/v1/acquire", `{"key":"delayed","owner":"b"}`, 423, "lock_delay",
			func(m map[string]any) bool { return num(m, "remaining_ms") > 0 }},
		{"renew with a wrong token", "POST", L + "/v1/renew", `{"key":"held","owner":"a","token":` + strconv.FormatUint(held.Token+1000, 10) + `}`, 403, "not_owner",
			func(m map[string]any) bool { return num(m, "token") == float64(held.Token) }},
		{"release by another owner", "POST", L + "/v1/release", `{"key":"held","owner":"b","token":` + tok + `}`, 403, "not_owner", nil},
		{"read without a key", "GET", L + "/v1/lock", "", 400, "bad_request", nil},
		{"acquire on a follower", "POST", F + "/v1/acquire", `{"key":"k","owner":"a"}`, 421, "not_leader",
			func(m map[string]any) bool {
				return m["leader_id"] == c.cfgs[leader].ID && m["leader_addr"] == c.cfgs[leader].HTTPAdvertise
			}},
		{"read on a follower", "GET", F + "/v1/lock?key=held", "", 421, "not_leader", nil},
		{"wrong method", "GET", L + "/v1/acquire", "", 405, "", nil},
		{"grant", "POST", L + "/v1/acquire", `{"key":"fresh","owner":"a","ttl_ms":2000}`, 200, "",
			func(m map[string]any) bool {
				return num(m, "token") > 0 && num(m, "ttl_ms") == 2000 && m["renewed"] == false
			}},
		{"renew", "POST", L + "/v1/renew", `{"key":"held","owner":"a","token":` + tok + `}`, 200, "",
			func(m map[string]any) bool {
				return num(m, "token") == float64(held.Token) && num(m, "ttl_ms") == 10000
			}},
		{"read", "GET", L + "/v1/lock?key=held", "", 200, "",
			func(m map[string]any) bool {
				return m["held"] == true && m["owner"] == "a" && num(m, "token") == float64(held.Token) && num(m, "remaining_ms") > 0
			}},
		{"release", "POST", L + "/v1/release", `{"key":"held","owner":"a","token":` + tok + `}`, 200, "",
			func(m map[string]any) bool { return m["released"] == true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, m := httpJSON(t, tt.method, tt.url, tt.body)
			if status != tt.status {
				t.Fatalf("status %d, want %d (body %v)", status, tt.status, m)
			}
			if tt.code != "" && (m["error"] != tt.code || m["message"] == "") {
				t.Fatalf("body %v, want error %q with a message", m, tt.code)
			}
			if tt.check != nil && !tt.check(m) {
				t.Fatalf("body %v", m)
			}
		})
	}
}

func TestMetricsExposition(t *testing.T) {
	c := newCluster(t, 3, withHTTP(), withSteadyRaft())
	all := c.all()
	g := c.mustAcquire(all, "k", "a", time.Second)
	_ = c.renew(all, "k", "b", g.Token)
	_ = c.release(all, "k", "b", g.Token)
	leader := c.waitLeader()

	want := map[string]string{
		"lockd_grants_total":           "counter",
		"lockd_renew_failures_total":   "counter",
		"lockd_releases_refused_total": "counter",
		"lockd_lease_expiries_total":   "counter",
		"lockd_leader_changes_total":   "counter",
		"lockd_is_leader":              "gauge",
	}
	scrape := func(i int) map[string]float64 {
		resp, err := http.Get(c.urls[i] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
			t.Fatalf("content type %q", ct)
		}
		b, _ := io.ReadAll(resp.Body)
		values, types := map[string]float64{}, map[string]string{}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
				name, kind, _ := strings.Cut(rest, " ")
				types[name] = kind
				continue
			}
			if strings.HasPrefix(line, "#") || line == "" {
				continue
			}
			name, val, ok := strings.Cut(line, " ")
			v, err := strconv.ParseFloat(val, 64)
			if !ok || err != nil {
				t.Fatalf("bad sample line %q", line)
			}
			if _, typed := types[name]; !typed {
				t.Fatalf("sample %q has no TYPE line before it", name)
			}
			values[name] = v
		}
		for name, kind := range want {
			if types[name] != kind {
				t.Fatalf("metric %s has type %q, want %q", name, types[name], kind)
			}
		}
		return values
	}
	lm := scrape(leader)
	if lm["lockd_is_leader"] != 1 || lm["lockd_grants_total"] < 1 || lm["lockd_renew_failures_total"] < 1 ||
		lm["lockd_releases_refused_total"] < 1 || lm["lockd_leader_changes_total"] < 1 {
		t.Fatalf("leader metrics %v", lm)
	}
	if fm := scrape(c.others(leader)[0]); fm["lockd_is_leader"] != 0 || fm["lockd_leader_changes_total"] < 1 {
		t.Fatalf("follower metrics %v", fm)
	}
}

// TestKeepAliveReportsLoss checks the client's watchdog against a real
// cluster: it renews while a quorum-backed leader answers and reports the
// loss at the first renewal that fails once no node can reach a majority.
func TestKeepAliveReportsLoss(t *testing.T) {
	c := newCluster(t, 3, withHTTP())
	c.waitAddrs(c.waitLeader())
	cl, err := client.New(c.urls, client.WithRequestTimeout(300*time.Millisecond), client.WithLogger(c.log))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := cl.Acquire(ctx, "k", "a", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l.KeepAlive(ctx, 20*time.Millisecond)
	eventually(t, "renewals", func() bool { return cl.Stats().Renewals >= 3 })
	if l.RenewFailures() != 0 {
		t.Fatalf("renew failures %d while healthy", l.RenewFailures())
	}

	for i := range c.cfgs {
		c.isolate(i)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog did not report the loss")
	}
	if err := l.Err(); !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("lease Err = %v, want ErrLeaseLost wrapping ErrUnavailable", err)
	}
	if l.RenewFailures() != 1 || cl.Stats().RenewFailures != 1 || cl.Stats().LeasesLost != 1 {
		t.Fatalf("lease renew failures %d, client stats %+v", l.RenewFailures(), cl.Stats())
	}
	reqs := cl.Stats().Requests
	time.Sleep(100 * time.Millisecond)
	if got := cl.Stats().Requests; got != reqs {
		t.Fatalf("the watchdog kept renewing after the loss: %d requests, then %d", reqs, got)
	}
}
