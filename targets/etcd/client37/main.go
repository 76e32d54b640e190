//go:build ignore

// Command etcd-v3.7-lock is a splitbrain client adapter for the lock of
// go.etcd.io/etcd/client/v3/concurrency at v3.7 (the go.mod beside it pins
// the release): a module of its own, because splitbrain's own etcd recipe
// is built with v3.6 and one build holds one version of a module. It is
// built static into the client-etcd-v3.7 image and speaks the client
// protocol of docs/client-protocol.md on stdin and stdout; it logs on
// stderr.
//
// A grant is a concurrency.Mutex on a Session whose lease has the run's TTL
// (kept alive by the library), the fencing token the create revision of
// the mutex's key. Release is the library's Unlock, which deletes the
// mutex's key by name; a lease whose session has ended is answered
// not_owner without a call.
//
// Options (--recipe-opt):
//
//	endpoints=pinned|all   client cN talks to member N only (pinned) or to every member
//	unlock=once|retry      retry: an Unlock that failed is retried in the
//	                       background with the same Mutex, as applications
//	                       often do (etcd issue 22082: the retry deletes the
//	                       key of a newer lock the same session took since)
//	unlock-timeout=DUR     the application's own timeout on Unlock (default:
//	                       the request's deadline)
//	unlock-retry-delay=DUR the wait before each retry (default 300ms)
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// library is the module the adapter wraps.
const library = "go.etcd.io/etcd/client/v3"

// lockPrefix is where the mutexes live (as in splitbrain's own recipe).
const lockPrefix = "/splitbrain/locks/"

type request struct {
	ID        int64             `json:"id"`
	Type      string            `json:"type"`
	Client    string            `json:"client"`
	Endpoints []string          `json:"endpoints"`
	Options   map[string]string `json:"options"`
	Key       string            `json:"key"`
	Lease     string            `json:"lease"`
	TTL       int64             `json:"ttl_ms"`
	Deadline  int64             `json:"deadline_ms"`
}

type reply map[string]any

type held struct {
	m     *concurrency.Mutex
	s     *concurrency.Session
	key   string
	token int64
}

type adapter struct {
	outMu sync.Mutex
	out   io.Writer

	cli           *clientv3.Client
	ttl           int
	retryUnlock   bool
	unlockTimeout time.Duration
	retryDelay    time.Duration

	mu      sync.Mutex
	session *concurrency.Session
	leases  map[string]*held
	n       int
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func (a *adapter) send(r reply) {
	b, err := json.Marshal(r)
	if err != nil {
		logf("encode reply: %v", err)
		return
	}
	a.outMu.Lock()
	defer a.outMu.Unlock()
	a.out.Write(append(b, '\n'))
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == library {
				return d.Version
			}
		}
	}
	return "unknown"
}

func (a *adapter) hello(req request) reply {
	mode := "pinned"
	a.unlockTimeout, a.retryDelay = 0, 300*time.Millisecond
	for k, v := range req.Options {
		var err error
		switch k {
		case "endpoints":
			if v != "pinned" && v != "all" {
				err = errors.New("want pinned or all")
			}
			mode = v
		case "unlock":
			if v != "once" && v != "retry" {
				err = errors.New("want once or retry")
			}
			a.retryUnlock = v == "retry"
		case "unlock-timeout":
			a.unlockTimeout, err = time.ParseDuration(v)
		case "unlock-retry-delay":
			a.retryDelay, err = time.ParseDuration(v)
		default:
			return reply{"type": "error", "message": "unknown option " + k + " (known: endpoints, unlock, unlock-timeout, unlock-retry-delay)"}
		}
		if err != nil {
			return reply{"type": "error", "message": fmt.Sprintf("option %s=%q: %v", k, v, err)}
		}
	}
	eps := req.Endpoints
	if mode == "pinned" {
		n, err := strconv.Atoi(strings.TrimPrefix(req.Client, "c"))
		if err != nil || n < 1 || len(eps) == 0 {
			return reply{"type": "error", "message": fmt.Sprintf("pinned endpoints need a client named cN and endpoints, got %q", req.Client)}
		}
		eps = []string{eps[(n-1)%len(eps)]}
	}
	a.ttl = int((time.Duration(req.TTL)*time.Millisecond + time.Second - 1) / time.Second)
	if a.ttl < 1 {
		return reply{"type": "error", "message": "the lease TTL must be at least 1s"}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: eps, DialTimeout: time.Second, DialKeepAliveTime: time.Second, DialKeepAliveTimeout: time.Second,
		Logger: zap.NewNop(),
	})
	if err != nil {
		return reply{"type": "error", "message": "etcd client: " + err.Error()}
	}
	a.cli = cli
	return reply{"type": "hello_ok", "protocol": 1, "library": library + "/concurrency", "version": version(), "language": "go",
		"offers": map[string]any{"token": true, "renew": true, "renew_mode": "watchdog", "checked_release": true, "held": true}}
}

// sessionFor returns a live session, granting a lease (bounded by ctx)
// when there is none or the last one ended.
func (a *adapter) sessionFor(ctx context.Context) (*concurrency.Session, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.session != nil {
		select {
		case <-a.session.Done():
			logf("session of lease %x ended: not kept alive", a.session.Lease())
			a.session = nil
		default:
			return a.session, nil
		}
	}
	g, err := a.cli.Grant(ctx, int64(a.ttl))
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	s, err := concurrency.NewSession(a.cli, concurrency.WithLease(g.ID), concurrency.WithTTL(a.ttl))
	if err != nil {
		return nil, fmt.Errorf("start session: %w", err)
	}
	a.session = s
	return s, nil
}

func (a *adapter) dropSession(s *concurrency.Session) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.session == s {
		a.session = nil
		s.Orphan()
	}
}

func (a *adapter) acquire(ctx context.Context, req request) reply {
	s, err := a.sessionFor(ctx)
	if err != nil {
		return reply{"type": "unavailable", "message": err.Error()}
	}
	m := concurrency.NewMutex(s, lockPrefix+req.Key+"/")
	done := make(chan error, 1)
	go func() { done <- m.Lock(ctx) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		select {
		case err = <-done:
		case <-time.After(100 * time.Millisecond):
			// Lock is stuck cleaning up on the client's own context:
			// answer now, and give back a grant that comes later.
			go func() {
				if err := <-done; err == nil {
					uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					_ = m.Unlock(uctx)
				}
			}()
			err = ctx.Err()
		}
	}
	if err != nil {
		if errors.Is(err, concurrency.ErrSessionExpired) {
			a.dropSession(s)
			return reply{"type": "unavailable", "message": "session expired: " + err.Error()}
		}
		return a.classify(req.Key, err)
	}
	gctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := a.cli.Get(gctx, m.Key())
	if err != nil || len(resp.Kvs) == 0 {
		_ = m.Unlock(gctx)
		return reply{"type": "unavailable", "message": fmt.Sprintf("read the lock's revision: %v", err)}
	}
	a.mu.Lock()
	a.n++
	lease := strconv.Itoa(a.n)
	a.leases[lease] = &held{m: m, s: s, key: m.Key(), token: resp.Kvs[0].CreateRevision}
	a.mu.Unlock()
	return reply{"type": "granted", "lease": lease, "token": resp.Kvs[0].CreateRevision}
}

// classify tells busy from unavailable after a failed Lock: a quick read
// of the key's waiters that succeeds means the service answers and someone
// holds the lock.
func (a *adapter) classify(key string, err error) reply {
	pctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	resp, perr := a.cli.Get(pctx, lockPrefix+key+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if perr == nil && resp.Count > 0 {
		return reply{"type": "busy"}
	}
	return reply{"type": "unavailable", "message": fmt.Sprintf("%v (probe: %v)", err, perr)}
}

func (a *adapter) take(lease string) *held {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.leases[lease]
	delete(a.leases, lease)
	return h
}

func (a *adapter) release(ctx context.Context, req request) reply {
	h := a.take(req.Lease)
	if h == nil {
		return reply{"type": "not_owner"}
	}
	select {
	case <-h.s.Done():
		return reply{"type": "not_owner", "message": "its session ended"}
	default:
	}
	uctx, cancel := ctx, context.CancelFunc(func() {})
	if a.unlockTimeout > 0 {
		uctx, cancel = context.WithTimeout(ctx, a.unlockTimeout)
	}
	err := h.m.Unlock(uctx)
	cancel()
	if err == nil {
		return reply{"type": "ok"}
	}
	if a.retryUnlock {
		go a.retry(h)
	}
	return reply{"type": "unavailable", "message": "unlock: " + err.Error()}
}

// retry calls Unlock again on the same Mutex until it succeeds, as an
// application that retries a failed unlock does.
func (a *adapter) retry(h *held) {
	for range 20 {
		time.Sleep(a.retryDelay)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := h.m.Unlock(ctx)
		cancel()
		if err == nil || errors.Is(err, concurrency.ErrLockReleased) {
			logf("unlock of %s (token %d) retried: %v", h.key, h.token, err)
			return
		}
	}
}

func (a *adapter) held(ctx context.Context, req request) reply {
	a.mu.Lock()
	h := a.leases[req.Lease]
	a.mu.Unlock()
	if h == nil {
		return reply{"type": "held", "held": false}
	}
	select {
	case <-h.s.Done():
		return reply{"type": "held", "held": false}
	default:
	}
	resp, err := a.cli.Get(ctx, h.key)
	if err != nil {
		return reply{"type": "unavailable", "message": err.Error()}
	}
	return reply{"type": "held", "held": len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == h.token}
}

func main() {
	a := &adapter{out: os.Stdout, leases: map[string]*held{}}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var req request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			logf("bad request %q: %v", sc.Text(), err)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(req.Deadline)*time.Millisecond)
		var r reply
		switch {
		case req.Type == "hello":
			r = a.hello(req)
		case req.Type == "close":
			a.send(reply{"id": req.ID, "type": "closed"})
			cancel()
			if a.cli != nil {
				a.cli.Close()
			}
			return
		case a.cli == nil:
			r = reply{"type": "error", "message": "no hello yet"}
		case req.Type == "acquire":
			r = a.acquire(ctx, req)
		case req.Type == "release":
			r = a.release(ctx, req)
		case req.Type == "held":
			r = a.held(ctx, req)
		default:
			r = reply{"type": "error", "message": "unsupported"}
		}
		cancel()
		r["id"] = req.ID
		a.send(r)
	}
}
