// Command etcd-early-lease is a client adapter (docs/client-protocol.md)
// with a lease bug, a fixture of the mutual-exclusion tests: it takes its
// etcd lease when an acquire BEGINS, then waits for the key, so a grant
// that comes after a long wait carries only what is left of the TTL. The
// lease is not kept alive. The key is put with that lease by a
// transaction that succeeds only while the key does not exist; its
// create revision is the fencing token (which does grow with every grant,
// so the fenced workload is allowed and its data stay valid: the store
// refuses the late writes). What it breaks is mutual exclusion: the key
// vanishes while its holder still works, and another client takes it.
//
// The tests build it static from the main module (go.etcd.io/etcd/client/v3
// of go.mod) and copy it into a client image with --client-files.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const prefix = "/splitbrain-fixture/locks/"

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
	key   string
	lease clientv3.LeaseID
}

type adapter struct {
	cli    *clientv3.Client
	name   string
	ttl    int64 // seconds
	leases map[string]held
	n      int
}

// version is the etcd client's module version this binary was built with.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "go.etcd.io/etcd/client/v3" {
				return d.Version
			}
		}
	}
	return "unknown"
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func (a *adapter) hello(req request) reply {
	if len(req.Options) > 0 {
		for k := range req.Options {
			return reply{"type": "error", "message": "unknown option " + k}
		}
	}
	a.name = req.Client
	a.ttl = (req.TTL + 999) / 1000
	if a.ttl < 1 {
		a.ttl = 1
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: req.Endpoints, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return reply{"type": "error", "message": "etcd client: " + err.Error()}
	}
	a.cli = cli
	return reply{"type": "hello_ok", "protocol": 1, "library": "go.etcd.io/etcd/client/v3", "version": version(), "language": "go",
		"offers": map[string]any{"token": true, "renew": false, "renew_mode": "none", "checked_release": true, "held": false}}
}

// acquire is the bug: the lease is granted first, for the whole TTL, and
// the wait for the key comes after it. (A lease that ran out during the
// wait is granted again, so the adapter does keep granting.)
func (a *adapter) acquire(ctx context.Context, req request) reply {
	key := prefix + req.Key
	value := fmt.Sprintf("%s-%d", a.name, req.ID)
	g, err := a.cli.Grant(ctx, a.ttl)
	if err != nil {
		return reply{"type": "unavailable", "message": "grant: " + err.Error()}
	}
	for {
		resp, err := a.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, value, clientv3.WithLease(g.ID))).
			Else(clientv3.OpGet(key)).
			Commit()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			logf("lease %x ran out while waiting for %s: granting another", g.ID, key)
			if g, err = a.cli.Grant(ctx, a.ttl); err != nil {
				return a.failed(ctx, "grant", err)
			}
			continue
		case err != nil:
			return a.failed(ctx, "txn", err)
		case resp.Succeeded:
			a.n++
			lease := strconv.Itoa(a.n)
			a.leases[lease] = held{key: key, lease: g.ID}
			return reply{"type": "granted", "lease": lease, "token": resp.Header.Revision}
		}
		// Held by another: wait for its key to go, then try again.
		rev := resp.Header.Revision
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			rev = kvs[0].ModRevision
		}
		wctx, cancel := context.WithCancel(ctx)
		for wr := range a.cli.Watch(wctx, key, clientv3.WithRev(rev+1)) {
			if wr.Err() != nil || len(wr.Events) > 0 {
				break
			}
		}
		cancel()
		if ctx.Err() != nil {
			a.revoke(g.ID)
			return reply{"type": "busy"}
		}
	}
}

func (a *adapter) failed(ctx context.Context, what string, err error) reply {
	if ctx.Err() != nil {
		return reply{"type": "busy"}
	}
	return reply{"type": "unavailable", "message": what + ": " + err.Error()}
}

func (a *adapter) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, _ = a.cli.Revoke(ctx, id)
}

// release deletes the key only while it is still ours (put with our lease).
func (a *adapter) release(ctx context.Context, req request) reply {
	h, ok := a.leases[req.Lease]
	delete(a.leases, req.Lease)
	if !ok {
		return reply{"type": "not_owner"}
	}
	resp, err := a.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(h.key), "=", h.lease)).
		Then(clientv3.OpDelete(h.key)).
		Commit()
	if err != nil {
		return reply{"type": "unavailable", "message": "txn: " + err.Error()}
	}
	a.revoke(h.lease)
	if !resp.Succeeded {
		return reply{"type": "not_owner"}
	}
	return reply{"type": "ok"}
}

func main() {
	a := &adapter{leases: map[string]held{}}
	out := bufio.NewWriter(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var req request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			logf("bad request %q: %v", sc.Text(), err)
			continue
		}
		// Answer before the deadline: stop waiting 100 ms short of it.
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(req.Deadline-100)*time.Millisecond)
		var r reply
		switch {
		case req.Type == "hello":
			r = a.hello(req)
		case req.Type == "close":
			r = reply{"type": "closed"}
		case a.cli == nil:
			r = reply{"type": "error", "message": "no hello yet"}
		case req.Type == "acquire":
			r = a.acquire(ctx, req)
		case req.Type == "release":
			r = a.release(ctx, req)
		default:
			r = reply{"type": "error", "message": "unsupported"}
		}
		cancel()
		r["id"] = req.ID
		b, _ := json.Marshal(r)
		out.Write(append(b, '\n'))
		out.Flush()
		if req.Type == "close" {
			return
		}
	}
}
