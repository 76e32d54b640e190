package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/inmem"
	"github.com/splitbrain/splitbrain/targets/store"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

var (
	_ agent.Store = (*store.Client)(nil)
	_ agent.Store = (*store.Mem)(nil)
)

// session is an agent served over pipes, spoken to in JSON lines.
type session struct {
	t     *testing.T
	in    *io.PipeWriter
	resps chan agent.Response
	done  chan error
}

// serve starts an agent with deps; the test's end stops it.
func serve(t *testing.T, deps agent.Deps) *session {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{t: t, in: inW, resps: make(chan agent.Response, 16), done: make(chan error, 1)}
	go func() {
		err := agent.Serve(ctx, inR, outW, deps)
		outW.Close()
		s.done <- err
	}()
	go func() {
		defer close(s.resps)
		dec := json.NewDecoder(outR)
		for {
			var r agent.Response
			if err := dec.Decode(&r); err != nil {
				return
			}
			s.resps <- r
		}
	}()
	t.Cleanup(func() { cancel(); inW.Close(); <-s.done })
	return s
}

// send writes one request line (a string is sent as it is).
func (s *session) send(req any) {
	s.t.Helper()
	b, ok := req.(string)
	if !ok {
		j, err := json.Marshal(req)
		if err != nil {
			s.t.Fatal(err)
		}
		b = string(j)
	}
	if _, err := io.WriteString(s.in, b+"\n"); err != nil {
		s.t.Fatal(err)
	}
}

func (s *session) recv() agent.Response {
	s.t.Helper()
	select {
	case r, ok := <-s.resps:
		if !ok {
			s.t.Fatal("the agent closed its output")
		}
		return r
	case <-time.After(5 * time.Second):
		s.t.Fatal("no answer from the agent")
	}
	return agent.Response{}
}

// ended waits for Serve to return and gives its error.
func (s *session) ended() error {
	s.t.Helper()
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		return err
	case <-time.After(5 * time.Second):
		s.t.Fatal("the agent did not stop")
	}
	return nil
}

// op runs one operation and returns its result and the events before it.
func (s *session) op(op agent.OpRequest) (agent.Result, []agent.Response) {
	s.t.Helper()
	s.send(agent.Request{Type: agent.ReqOp, Op: &op})
	var events []agent.Response
	for {
		r := s.recv()
		switch {
		case r.Type == agent.RespEvent && r.ID == op.ID:
			events = append(events, r)
		case r.Type == agent.RespDone && r.ID == op.ID && r.Result != nil:
			return *r.Result, events
		default:
			s.t.Fatalf("op %d: unexpected %+v", op.ID, r)
		}
	}
}

func config(opts map[string]string) *agent.Config {
	return &agent.Config{
		Client:         "c1",
		Recipe:         targets.RecipeConfig{Kind: inmem.Kind, TTL: targets.Duration(time.Minute), Options: opts},
		AcquireTimeout: targets.Duration(50 * time.Millisecond),
		ReleaseTimeout: targets.Duration(50 * time.Millisecond),
		Work:           targets.Duration(time.Millisecond),
	}
}

// closeCounter counts the Close calls of the lockers it makes.
type closeCounter struct {
	targets.Locker
	closed *atomic.Int32
}

func (c closeCounter) Close() error { c.closed.Add(1); return c.Locker.Close() }

// TestProtocol speaks the protocol line by line: each request gets the
// answer the protocol says, a bad one an error, and the agent keeps
// serving after it.
func TestProtocol(t *testing.T) {
	type exchange struct {
		req  any    // agent.Request or a raw line
		want string // the answer's type; "" for none
		id   int64
	}
	ok := &agent.Config{Client: "c1", Recipe: targets.RecipeConfig{Kind: inmem.Kind, TTL: targets.Duration(time.Second)}}
	op := &agent.OpRequest{ID: 7, F: history.FRead, Key: "k"}
	tests := []struct {
		name      string
		exchanges []exchange
		closes    int32 // lockers closed when the agent ends
	}{
		{"ping", []exchange{{agent.Request{Type: agent.ReqPing, Seq: 3}, agent.RespPong, 0}}, 0},
		{"config then read", []exchange{
			{agent.Request{Type: agent.ReqConfig, Config: ok}, agent.RespReady, 0},
			{agent.Request{Type: agent.ReqOp, Op: op}, agent.RespDone, 7},
		}, 1},
		{"op before config", []exchange{{agent.Request{Type: agent.ReqOp, Op: op}, agent.RespError, 7}}, 0},
		{"op without op", []exchange{
			{agent.Request{Type: agent.ReqConfig, Config: ok}, agent.RespReady, 0},
			{agent.Request{Type: agent.ReqOp}, agent.RespError, 0},
		}, 1},
		{"config without config", []exchange{{agent.Request{Type: agent.ReqConfig}, agent.RespError, 0}}, 0},
		{"unknown recipe", []exchange{{agent.Request{Type: agent.ReqConfig, Config: &agent.Config{Recipe: targets.RecipeConfig{Kind: "zookeeper"}}}, agent.RespError, 0}}, 0},
		{"recipe refuses its options", []exchange{{agent.Request{Type: agent.ReqConfig, Config: config(map[string]string{"expiry": "sometimes"})}, agent.RespError, 0}}, 0},
		{"config twice closes the first locker", []exchange{
			{agent.Request{Type: agent.ReqConfig, Config: ok}, agent.RespReady, 0},
			{agent.Request{Type: agent.ReqConfig, Config: ok}, agent.RespReady, 0},
		}, 2},
		{"not JSON", []exchange{{"{nope", agent.RespError, 0}}, 0},
		{"unknown type", []exchange{{agent.Request{Type: "dance"}, agent.RespError, 0}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var closed atomic.Int32
			locks := inmem.NewService(inmem.Options{})
			s := serve(t, agent.Deps{
				Lockers: map[string]targets.LockerFactory{inmem.Kind: func(ctx context.Context, cfg targets.RecipeConfig, client string, log *slog.Logger) (targets.Locker, error) {
					l, err := locks.Factory()(ctx, cfg, client, log)
					if err != nil {
						return nil, err
					}
					return closeCounter{l, &closed}, nil
				}},
				DialStore: func(string, time.Duration) agent.Store { return store.NewMem(nil) },
				Mono:      func() int64 { return 42 },
			})
			for i, x := range tt.exchanges {
				s.send(x.req)
				r := s.recv()
				if r.Type != x.want || r.ID != x.id || (r.Type == agent.RespError) != (r.Error != "") {
					t.Fatalf("exchange %d: got %+v, want %s for id %d", i, r, x.want, x.id)
				}
				if r.Type == agent.RespPong && (r.Seq != 3 || r.Mono != 42 || r.Clock != "") {
					t.Fatalf("pong %+v: want seq 3 and the agent's clock, not named (it is not CLOCK_MONOTONIC)", r)
				}
			}
			// Still serving after whatever came before.
			s.send(agent.Request{Type: agent.ReqPing, Seq: 9})
			if r := s.recv(); r.Type != agent.RespPong || r.Seq != 9 {
				t.Fatalf("ping after: %+v", r)
			}
			s.send(agent.Request{Type: agent.ReqStop})
			if err := s.ended(); err != nil {
				t.Fatalf("stop: %v", err)
			}
			if n := closed.Load(); n != tt.closes {
				t.Fatalf("%d lockers closed, want %d", n, tt.closes)
			}
		})
	}
}

// TestServeEnds: the agent ends cleanly when its input closes, and with
// the context's error when that is cancelled.
func TestServeEnds(t *testing.T) {
	deps := agent.Deps{DialStore: func(string, time.Duration) agent.Store { return store.NewMem(nil) }}
	s := serve(t, deps)
	s.in.Close()
	if err := s.ended(); err != nil {
		t.Fatalf("input closed: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	inR, inW := io.Pipe()
	defer inW.Close()
	done := make(chan error, 1)
	go func() { done <- agent.Serve(ctx, inR, io.Discard, deps) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled agent kept serving")
	}
}

// storeCall is one request a spyStore passed on.
type storeCall struct {
	write  bool
	fenced bool
	token  uint64
}

// spyStore records what the agent asks of the store, and can act between
// the read and the write (the critical section's work).
type spyStore struct {
	*store.Mem
	mu          sync.Mutex
	calls       []storeCall
	beforeWrite func()
}

func (s *spyStore) Read(ctx context.Context, key string, fenced bool, token uint64) (store.Entry, error) {
	s.record(storeCall{fenced: fenced, token: token})
	return s.Mem.Read(ctx, key, fenced, token)
}

func (s *spyStore) Write(ctx context.Context, key string, value, tag int64, fenced bool, token uint64) (store.Entry, error) {
	if s.beforeWrite != nil {
		s.beforeWrite()
	}
	s.record(storeCall{write: true, fenced: fenced, token: token})
	return s.Mem.Write(ctx, key, value, tag, fenced, token)
}

func (s *spyStore) record(c storeCall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
}

// rig is what one critical section runs against.
type rig struct {
	clock *inmem.FakeClock
	locks *inmem.Service
	st    *spyStore
}

// TestCriticalSection runs one critical section per case and checks its
// outcome, its events, the token each store request carried, and that the
// lock was given back whatever happened.
func TestCriticalSection(t *testing.T) {
	const tok = 1 // the first grant's token
	unfenced := []storeCall{{}, {write: true}}
	fenced := []storeCall{{fenced: true, token: tok}, {write: true, fenced: true, token: tok}}
	tests := []struct {
		name   string
		op     agent.OpRequest
		opts   map[string]string
		setup  func(r rig)
		typ    history.Type
		kind   string
		relErr string
		events []string
		calls  []storeCall
		value  int64 // the counter after
	}{
		{name: "ok unfenced", op: agent.OpRequest{}, typ: history.OK,
			events: []string{agent.EvAcquired, agent.EvRead, agent.EvWrite}, calls: unfenced, value: 1},
		{name: "ok fenced: the token goes with the read and the write", op: agent.OpRequest{Fenced: true}, typ: history.OK,
			events: []string{agent.EvAcquired, agent.EvRead, agent.EvWrite}, calls: fenced, value: 1},
		{name: "busy", setup: func(r rig) { hold(t, r.locks) }, typ: history.Fail, kind: history.ErrBusy},
		{name: "lock unavailable", opts: map[string]string{"available": "no"}, typ: history.Fail, kind: history.ErrLockUnavailable},
		{name: "stale token on the read", op: agent.OpRequest{Fenced: true},
			setup: func(r rig) { r.st.Store().Write("k", 0, 0, true, 99) },
			typ:   history.Fail, kind: history.ErrStaleToken, events: []string{agent.EvAcquired}, calls: fenced[:1]},
		{name: "stale token on the write", op: agent.OpRequest{Fenced: true},
			setup: func(r rig) { r.st.beforeWrite = func() { r.st.Store().Write("k", 5, 0, true, 99) } },
			typ:   history.Fail, kind: history.ErrStaleToken, events: []string{agent.EvAcquired, agent.EvRead, agent.EvWrite}, calls: fenced, value: 5},
		{name: "store unreachable on the read", setup: func(r rig) { r.st.Fail(store.Refuse, store.Deliver) },
			typ: history.Fail, kind: history.ErrStoreUnavailable, events: []string{agent.EvAcquired}, calls: unfenced[:1]},
		{name: "store silent on the read", setup: func(r rig) { r.st.Fail(store.LoseAnswer, store.Deliver) },
			typ: history.Fail, kind: history.ErrStoreUnavailable, events: []string{agent.EvAcquired}, calls: unfenced[:1]},
		{name: "store unreachable on the write", setup: func(r rig) { r.st.Fail(store.Deliver, store.Refuse) },
			typ: history.Fail, kind: history.ErrStoreUnavailable, events: []string{agent.EvAcquired, agent.EvRead, agent.EvWrite}, calls: unfenced},
		{name: "unknown outcome of the write", setup: func(r rig) { r.st.Fail(store.Deliver, store.LoseAnswer) },
			typ: history.Info, kind: history.ErrStoreUnavailable, events: []string{agent.EvAcquired, agent.EvRead, agent.EvWrite}, calls: unfenced, value: 1},
		{name: "lease lost before the release", setup: func(r rig) { r.st.beforeWrite = func() { r.clock.Advance(time.Hour) } },
			typ: history.OK, relErr: "not-owner", events: []string{agent.EvAcquired, agent.EvRead, agent.EvWrite}, calls: unfenced, value: 1},
		{name: "lock service gone before the release", setup: func(r rig) { r.st.beforeWrite = r.locks.Stop },
			typ: history.OK, relErr: history.ErrLockUnavailable, events: []string{agent.EvAcquired, agent.EvRead, agent.EvWrite}, calls: unfenced, value: 1},
		{name: "bypass writer: no lock, no token", op: agent.OpRequest{Fenced: true, Bypass: true}, typ: history.OK,
			events: []string{agent.EvRead, agent.EvWrite}, calls: unfenced, value: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := inmem.NewFakeClock(time.Unix(1000, 0))
			r := rig{clock: clock, locks: inmem.NewService(inmem.Options{Clock: clock}), st: &spyStore{Mem: store.NewMem(nil)}}
			if tt.setup != nil {
				tt.setup(r)
			}
			base := r.locks.Stats()
			var steps atomic.Int32
			s := serve(t, agent.Deps{
				Lockers:   map[string]targets.LockerFactory{inmem.Kind: r.locks.Factory()},
				DialStore: func(string, time.Duration) agent.Store { return r.st },
				Step:      func() { steps.Add(1) },
			})
			s.send(agent.Request{Type: agent.ReqConfig, Config: config(tt.opts)})
			if resp := s.recv(); resp.Type != agent.RespReady {
				t.Fatalf("config: %+v", resp)
			}
			op := tt.op
			op.ID, op.F, op.Key = 11, history.FCriticalSection, "k"
			res, events := s.op(op)

			if res.Type != tt.typ || res.Error != tt.kind || res.ReleaseError != tt.relErr {
				t.Fatalf("result %+v, want %s %q, release error %q", res, tt.typ, tt.kind, tt.relErr)
			}
			var evs []string
			for _, e := range events {
				evs = append(evs, e.Ev)
			}
			if fmt.Sprint(evs) != fmt.Sprint(tt.events) {
				t.Fatalf("events %v, want %v", evs, tt.events)
			}
			if fmt.Sprint(r.st.calls) != fmt.Sprint(tt.calls) {
				t.Fatalf("store requests %+v, want %+v", r.st.calls, tt.calls)
			}
			if e, _ := r.st.Store().Read("k", false, 0); e.Value != tt.value {
				t.Fatalf("counter %d, want %d", e.Value, tt.value)
			}
			acquired := len(evs) > 0 && evs[0] == agent.EvAcquired
			checkLockGivenBack(t, r.locks, base, res, acquired, tt.relErr)
			// Step comes before the read, around the work and before the
			// release: where a stopped node freezes an agent.
			want := map[int]int32{0: 0, 1: 1, 2: 3}[len(tt.calls)]
			if acquired {
				want++
			}
			if steps.Load() != want {
				t.Fatalf("Step called %d times, want %d", steps.Load(), want)
			}
			if res.Type == history.OK {
				if res.Read == nil || res.Write == nil || res.Write.Value != res.Read.Value+1 || res.Write.Tag != op.ID {
					t.Fatalf("ok result %+v: want a write of read+1 tagged with the op", res)
				}
			}
		})
	}
}

// checkLockGivenBack checks a critical section's lock and its times: a
// section that took the lock released it (or reports why not), and every
// step's time is in order.
func checkLockGivenBack(t *testing.T, locks *inmem.Service, base inmem.Stats, res agent.Result, acquired bool, relErr string) {
	t.Helper()
	st := locks.Stats()
	st.Grants -= base.Grants
	if !acquired {
		if st.Grants != 0 || res.Token != 0 || res.AcquiredMono != 0 || res.ReleasedMono != 0 {
			t.Fatalf("no lock expected: %+v, %+v", st, res)
		}
		return
	}
	if res.Token != 1 || res.AcquiredMono == 0 || res.ReleasedMono < res.AcquiredMono || res.Hold != res.ReleasedMono-res.AcquiredMono {
		t.Fatalf("lock times %+v", res)
	}
	if res.WriteMono != 0 && (res.WriteMono < res.AcquiredMono || res.WriteMono > res.ReleasedMono) {
		t.Fatalf("write outside the hold: %+v", res)
	}
	if relErr == "" && st.Releases != 1 {
		t.Fatalf("the lock was not released: %+v", st)
	}
	if relErr == "not-owner" && st.NotOwner != 1 {
		t.Fatalf("no release refused: %+v", st)
	}
	if c, _, held := locks.Holder("k"); held && c == "c1" && relErr == "" {
		t.Fatal("the agent still holds the lock")
	}
}

// hold has another client take the lock on k for the test's length.
func hold(t *testing.T, locks *inmem.Service) {
	t.Helper()
	if _, err := locks.Locker("other", time.Hour, inmem.Faults{NoExpiry: true}).Acquire(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
}

// TestStepFreezes: an agent whose Step blocks (a stopped node) holds its
// critical section there; released, it finishes.
func TestStepFreezes(t *testing.T) {
	gate := make(chan struct{})
	var frozen atomic.Bool
	frozen.Store(true)
	locks := inmem.NewService(inmem.Options{})
	s := serve(t, agent.Deps{
		Lockers:   map[string]targets.LockerFactory{inmem.Kind: locks.Factory()},
		DialStore: func(string, time.Duration) agent.Store { return store.NewMem(nil) },
		Step: func() {
			if frozen.Load() {
				<-gate
			}
		},
	})
	s.send(agent.Request{Type: agent.ReqConfig, Config: config(nil)})
	s.recv()
	s.send(agent.Request{Type: agent.ReqOp, Op: &agent.OpRequest{ID: 1, F: history.FCriticalSection, Key: "k"}})
	if r := s.recv(); r.Ev != agent.EvAcquired {
		t.Fatalf("first answer %+v", r)
	}
	select {
	case r := <-s.resps:
		t.Fatalf("a frozen agent answered %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	if c, _, held := locks.Holder("k"); !held || c != "c1" {
		t.Fatal("the frozen agent does not hold the lock")
	}
	frozen.Store(false)
	close(gate)
	for _, ev := range []string{agent.EvRead, agent.EvWrite} {
		if r := s.recv(); r.Ev != ev {
			t.Fatalf("after thawing: %+v, want the %s event", r, ev)
		}
	}
	if r := s.recv(); r.Type != agent.RespDone || r.Result.Type != history.OK {
		t.Fatalf("after thawing: %+v", r)
	}
}

// TestPongNamesClock: an agent on CLOCK_MONOTONIC names its clock in each
// pong (so the harness can tell whether it reads the same one), and the
// pong's reading is that clock's.
func TestPongNamesClock(t *testing.T) {
	domain := agent.ClockDomain()
	if domain == "" {
		t.Fatal("no clock domain on this machine (no /proc/sys/kernel/random/boot_id or /proc/self/ns/time)")
	}
	s := serve(t, agent.Deps{})
	before := history.MonotonicNow()
	s.send(agent.Request{Type: agent.ReqPing, Seq: 1})
	r := s.recv()
	after := history.MonotonicNow()
	if r.Type != agent.RespPong || r.Clock != domain || r.Mono < before || r.Mono > after {
		t.Fatalf("pong %+v: want clock %q and a reading in [%d, %d]", r, domain, before, after)
	}
	s.send(agent.Request{Type: agent.ReqStop})
	if err := s.ended(); err != nil {
		t.Fatal(err)
	}
}
