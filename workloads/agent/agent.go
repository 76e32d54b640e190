package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/store"
)

// Store is the counter store as the agent uses it; *store.Client is one.
type Store = store.Counter

// Deps are what an agent is built from.
type Deps struct {
	// Lockers maps a recipe kind to its factory.
	Lockers map[string]targets.LockerFactory
	// DialStore returns the store client; nil means the client of the
	// configured kind of store (store.Dial).
	DialStore func(addr string, timeout time.Duration) Store
	// Step, when set, is called between the steps of an operation. The
	// in-memory runtime uses it to freeze an agent as SIGSTOP would.
	Step func()
	// Mono reads the monotonic clock in ns; nil means CLOCK_MONOTONIC by
	// system call (history.MonotonicNow), and then the agent tells the
	// harness which clock that is (pong's clock).
	Mono func() int64
	Log  *slog.Logger
}

// ClockDomain names the CLOCK_MONOTONIC this process reads: the kernel's
// boot and the process's time namespace. Two processes with the same
// non-empty domain read the same clock (containers on one engine share the
// host's unless given a time namespace). Empty when it cannot tell.
func ClockDomain() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/time")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(boot)) + " " + ns
}

// Serve runs the agent protocol over in and out until in is closed, a stop
// request arrives, or ctx is done.
func Serve(ctx context.Context, in io.Reader, out io.Writer, deps Deps) error {
	var domain string
	if deps.Mono == nil {
		deps.Mono, domain = history.MonotonicNow, ClockDomain()
	}
	if deps.Step == nil {
		deps.Step = func() {}
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	a := &agent{deps: deps, enc: json.NewEncoder(out)}
	defer a.close()

	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- append([]byte(nil), sc.Bytes()...):
			case <-ctx.Done():
				return
			}
		}
		readErr <- sc.Err()
	}()
	for {
		var line []byte
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-readErr:
			if err != nil {
				return fmt.Errorf("agent read: %w", err)
			}
			return nil // stdin closed: the harness is gone
		case line = <-lines:
		}
		var req Request
		if err := json.Unmarshal(line, &req); err != nil {
			a.send(Response{Type: RespError, Error: fmt.Sprintf("bad request: %v", err)})
			continue
		}
		switch req.Type {
		case ReqPing:
			a.send(Response{Type: RespPong, Seq: req.Seq, Mono: a.deps.Mono(), Clock: domain})
		case ReqConfig:
			if err := a.configure(ctx, req.Config); err != nil {
				a.send(Response{Type: RespError, Error: err.Error()})
				continue
			}
			a.send(Response{Type: RespReady, Client: a.describe()})
		case ReqOp:
			if a.locker == nil || req.Op == nil {
				a.send(Response{Type: RespError, ID: opID(req.Op), Error: "operation before config"})
				continue
			}
			start := a.deps.Mono()
			res := a.do(ctx, *req.Op, start)
			res.StartMono, res.EndMono = start, a.deps.Mono()
			a.send(Response{Type: RespDone, ID: req.Op.ID, Result: &res})
		case ReqStop:
			return nil
		default:
			a.send(Response{Type: RespError, Error: fmt.Sprintf("unknown request type %q", req.Type)})
		}
	}
}

func opID(op *OpRequest) int64 {
	if op == nil {
		return 0
	}
	return op.ID
}

type agent struct {
	deps   Deps
	enc    *json.Encoder
	cfg    Config
	locker targets.Locker
	store  Store
}

func (a *agent) send(r Response) {
	if err := a.enc.Encode(r); err != nil {
		a.deps.Log.Error("agent write", "err", err)
	}
}

// describe says what the lock client is, when it can tell by itself (an
// adapter process, from its handshake); nil otherwise.
func (a *agent) describe() *targets.ClientInfo {
	if d, ok := a.locker.(targets.Describer); ok {
		info := d.Describe()
		return &info
	}
	return nil
}

func (a *agent) close() {
	if a.locker != nil {
		_ = a.locker.Close()
	}
	if c, ok := a.store.(io.Closer); ok {
		_ = c.Close()
	}
}

func (a *agent) configure(ctx context.Context, cfg *Config) error {
	if cfg == nil {
		return errors.New("config request without config")
	}
	f, ok := a.deps.Lockers[cfg.Recipe.Kind]
	if !ok {
		return fmt.Errorf("unknown lock recipe %q", cfg.Recipe.Kind)
	}
	l, err := f(ctx, cfg.Recipe, cfg.Client, a.deps.Log)
	if err != nil {
		return fmt.Errorf("lock recipe %s: %w", cfg.Recipe.Kind, err)
	}
	var st Store
	if a.deps.DialStore != nil {
		st = a.deps.DialStore(cfg.Store, time.Duration(cfg.StoreTimeout))
	} else if st, err = store.Dial(cfg.StoreKind, cfg.Store, time.Duration(cfg.StoreTimeout), cfg.StoreOptions); err != nil {
		_ = l.Close()
		return fmt.Errorf("counter store: %w", err)
	}
	a.close()
	a.cfg, a.locker, a.store = *cfg, l, st
	a.deps.Log.Info("agent configured", "client", cfg.Client, "recipe", cfg.Recipe.Kind, "endpoints", cfg.Recipe.Endpoints)
	return nil
}

// storeKind maps a store error to a history outcome and error kind.
func storeKind(err error) (history.Type, string) {
	switch {
	case errors.Is(err, store.ErrStaleToken):
		return history.Fail, history.ErrStaleToken
	case errors.Is(err, store.ErrUnreachable):
		return history.Fail, history.ErrStoreUnavailable
	default:
		return history.Info, history.ErrStoreUnavailable
	}
}

func (a *agent) do(ctx context.Context, op OpRequest, start int64) Result {
	switch op.F {
	case history.FRead:
		return a.read(ctx, op)
	case history.FCriticalSection:
		return a.criticalSection(ctx, op, start)
	default:
		return Result{Type: history.Fail, Error: "bad-request", Message: fmt.Sprintf("unknown operation %q", op.F)}
	}
}

func (a *agent) read(ctx context.Context, op OpRequest) Result {
	e, err := a.store.Read(ctx, op.Key, false, 0)
	if err != nil {
		return Result{Type: history.Fail, Error: history.ErrStoreUnavailable, Message: err.Error()}
	}
	return Result{Type: history.OK, Read: &history.Value{Value: e.Value, Tag: e.Tag}}
}

// criticalSection takes the lock, reads the counter, works, writes read+1
// and releases. Whatever the outcome, the lock is released if it was taken.
func (a *agent) criticalSection(ctx context.Context, op OpRequest, start int64) (res Result) {
	if op.Bypass {
		return a.readModifyWrite(ctx, op, 0)
	}
	actx, cancel := context.WithTimeout(ctx, time.Duration(a.cfg.AcquireTimeout))
	lease, err := a.locker.Acquire(actx, a.cfg.KeyPrefix+op.Key)
	cancel()
	if err != nil {
		kind := history.ErrLockUnavailable
		if errors.Is(err, targets.ErrBusy) {
			kind = history.ErrBusy
		}
		if k := targets.ErrorKind(err); k != "" {
			kind = k // an adapter's own failure: late, garbled, dead
		}
		return Result{Type: history.Fail, Error: kind, Message: err.Error(), Wait: a.deps.Mono() - start}
	}
	res.AcquiredMono = a.deps.Mono()
	res.Wait = res.AcquiredMono - start
	res.Token = lease.Token()
	if !op.Quiet {
		a.send(Response{Type: RespEvent, ID: op.ID, Ev: EvAcquired, Mono: res.AcquiredMono, Token: res.Token})
	}
	defer func() {
		a.deps.Step()
		res.ReleasedMono = a.deps.Mono()
		res.Hold = res.ReleasedMono - res.AcquiredMono
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(a.cfg.ReleaseTimeout))
		defer cancel()
		if err := lease.Release(rctx); err != nil {
			res.ReleaseError = history.ErrLockUnavailable
			if errors.Is(err, targets.ErrNotOwner) {
				res.ReleaseError = "not-owner"
			}
			if k := targets.ErrorKind(err); k != "" {
				res.ReleaseError = k
			}
		}
		if rc, ok := lease.(targets.RenewCounter); ok {
			res.RenewFailures = rc.RenewFailures()
		}
	}()

	rmw := a.readModifyWrite(ctx, op, res.Token)
	rmw.AcquiredMono, rmw.Wait, rmw.Token = res.AcquiredMono, res.Wait, res.Token
	res = rmw
	return res
}

// readModifyWrite reads the counter, works, and writes read+1, presenting
// token when the operation is fenced (and no token otherwise).
func (a *agent) readModifyWrite(ctx context.Context, op OpRequest, token uint64) (res Result) {
	fenced := op.Fenced && !op.Bypass
	if !fenced {
		token = 0
	}
	a.deps.Step()
	e, err := a.store.Read(ctx, op.Key, fenced, token)
	if err != nil {
		_, kind := storeKind(err)
		// A read changes nothing but the token mark; an unknown read is a
		// failed operation.
		res.Type, res.Error, res.Message = history.Fail, kind, err.Error()
		return res
	}
	res.Read = &history.Value{Value: e.Value, Tag: e.Tag}
	if !op.Quiet {
		a.send(Response{Type: RespEvent, ID: op.ID, Ev: EvRead, Mono: a.deps.Mono()})
	}

	a.deps.Step()
	if w := time.Duration(a.cfg.Work); w > 0 {
		select {
		case <-time.After(w):
		case <-ctx.Done():
		}
	}
	a.deps.Step()

	res.Write = &history.Value{Value: e.Value + 1, Tag: op.ID}
	res.WriteMono = a.deps.Mono()
	if !op.Quiet {
		a.send(Response{Type: RespEvent, ID: op.ID, Ev: EvWrite, Mono: res.WriteMono})
	}
	if _, err := a.store.Write(ctx, op.Key, res.Write.Value, res.Write.Tag, fenced, token); err != nil {
		res.Type, res.Error = storeKind(err)
		res.Message = err.Error()
		return res
	}
	res.Type = history.OK
	return res
}
