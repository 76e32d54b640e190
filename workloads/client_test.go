package workloads

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/inmem"
	"github.com/splitbrain/splitbrain/targets/store"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

// Transports between a Client and its agent: io.Pipe (no read deadlines:
// a goroutine reads ahead) and a Unix socket pair (as a console socket: the
// waiting goroutine reads).
const (
	transportPipe   = "pipe"
	transportSocket = "socket"
)

var transports = []string{transportPipe, transportSocket}

// pair runs an agent on locks and st, driven by a Client over the
// transport; the recipe's options go to the in-memory locker
// (inmem.ParseOptions).
func pair(t testing.TB, transport string, locks *inmem.Service, opts map[string]string, st *store.Mem) *Client {
	t.Helper()
	return pairOn(t, transport, locks, opts, st, history.NewMonotonicClock())
}

// pairOn is pair with the Client on clock.
func pairOn(t testing.TB, transport string, locks *inmem.Service, opts map[string]string, st *store.Mem, clock history.Clock) *Client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	serve := func(in io.Reader, out io.WriteCloser) {
		done <- agent.Serve(ctx, in, out, agent.Deps{
			Lockers:   map[string]targets.LockerFactory{inmem.Kind: locks.Factory()},
			DialStore: func(string, time.Duration) agent.Store { return st },
		})
		out.Close()
	}
	var c *Client
	switch transport {
	case transportPipe:
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		go serve(inR, outW)
		t.Cleanup(func() { cancel(); inW.Close(); <-done })
		c = NewClient("c1", 0, inW, outR, clock)
	case transportSocket:
		harnessEnd, agentEnd := socketPair(t)
		go serve(agentEnd, agentEnd)
		t.Cleanup(func() { cancel(); harnessEnd.Shutdown(); <-done })
		c = NewClient("c1", 0, harnessEnd, harnessEnd, clock)
		if c.current().lines == nil {
			t.Fatal("a socket is read without a reader goroutine")
		}
	default:
		t.Fatalf("transport %q", transport)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	recipe := targets.RecipeConfig{Kind: inmem.Kind, TTL: targets.Duration(time.Minute), Options: opts}
	if err := c.Configure(cctx, agent.Config{Client: "c1", Recipe: recipe, AcquireTimeout: targets.Duration(100 * time.Millisecond), ReleaseTimeout: targets.Duration(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(cctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// socketPair returns the two ends of a connected Unix stream socket, the
// harness's end as the runtime gives a console socket.
func socketPair(t testing.TB) (runtime.ConsoleConn, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var ends [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		ends[i] = c.(*net.UnixConn)
	}
	t.Cleanup(func() { ends[0].Close(); ends[1].Close() })
	return runtime.ConsoleConn{UnixConn: ends[0]}, ends[1]
}

// TestAgentOutcomes: an operation's outcome and progress events come back
// through the client, with the agent's times mapped to the run's; a quiet
// operation has the same outcome and times, without the events.
func TestAgentOutcomes(t *testing.T) {
	tests := []struct {
		name   string
		opts   map[string]string
		fenced bool
		pre    func(*inmem.Service, *store.Mem)
		typ    history.Type
		kind   string
		events int
	}{
		{"ok", nil, false, nil, history.OK, "", 3}, // acquired, read, write
		{"busy", nil, false, func(l *inmem.Service, _ *store.Mem) { holdLock(t, l) }, history.Fail, history.ErrBusy, 0},
		{"lock unavailable", map[string]string{"available": "no"}, false, nil, history.Fail, history.ErrLockUnavailable, 0},
		{"stale token on read", nil, true, func(_ *inmem.Service, s *store.Mem) { s.Store().Write("k", 0, 0, true, 99) }, history.Fail, history.ErrStaleToken, 1},
		{"store unreachable on write", nil, false, func(_ *inmem.Service, s *store.Mem) { s.Fail(store.Deliver, store.Refuse) }, history.Fail, history.ErrStoreUnavailable, 3},
		{"store silent on write", nil, false, func(_ *inmem.Service, s *store.Mem) { s.Fail(store.Deliver, store.LoseAnswer) }, history.Info, history.ErrStoreUnavailable, 3},
	}
	for _, tr := range transports {
		for _, tt := range tests {
			for _, quiet := range []bool{false, true} {
				name := tr + "/" + tt.name
				want := tt.events
				if quiet {
					name, want = name+"/quiet", 0
				}
				t.Run(name, func(t *testing.T) {
					locks, st := inmem.NewService(inmem.Options{}), store.NewMem(nil)
					if tt.pre != nil {
						tt.pre(locks, st)
					}
					c := pair(t, tr, locks, tt.opts, st)
					var events []agent.Response
					res, err := c.Do(context.Background(), agent.OpRequest{ID: 5, F: history.FCriticalSection, Key: "k", Fenced: tt.fenced, Quiet: quiet}, 5*time.Second, func(r agent.Response) { events = append(events, r) })
					if err != nil {
						t.Fatal(err)
					}
					if res.Type != tt.typ || res.Error != tt.kind || len(events) != want {
						t.Fatalf("result %+v with %d events, want %d", res, len(events), want)
					}
					if tt.typ == history.OK {
						if res.Read == nil || res.Write == nil || res.Write.Value != res.Read.Value+1 || res.Write.Tag != 5 || res.Token == 0 {
							t.Fatalf("bad ok result %+v", res)
						}
						if res.ReleaseError != "" || res.AcquiredMono == 0 || res.WriteMono < res.AcquiredMono || res.ReleasedMono < res.WriteMono {
							t.Fatalf("bad timings or release %+v", res)
						}
						if at := c.RunTime(res.AcquiredMono); at <= 0 {
							t.Fatalf("agent time maps to %d", at)
						}
					}
				})
			}
		}
	}
}

// holdLock has another client take key k's lock for the test's length.
func holdLock(t *testing.T, l *inmem.Service) {
	t.Helper()
	if _, err := l.Locker("other", time.Hour, inmem.Faults{}).Acquire(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
}

func TestClientTimeoutThenDrain(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			st := store.NewMem(nil)
			var slow atomic.Bool
			slow.Store(true)
			st.SetGate(func(context.Context) error {
				if slow.Swap(false) {
					time.Sleep(200 * time.Millisecond)
				}
				return nil
			})
			c := pair(t, tr, inmem.NewService(inmem.Options{}), nil, st)
			// An op whose answer is slow: the harness gives up, then the next op
			// must not be confused by the late answer.
			_, err := c.Do(context.Background(), agent.OpRequest{ID: 1, F: history.FRead, Key: "k"}, 50*time.Millisecond, nil)
			if !errors.Is(err, ErrTimeout) {
				t.Fatalf("want timeout, got %v", err)
			}
			res, err := c.Do(context.Background(), agent.OpRequest{ID: 2, F: history.FRead, Key: "k"}, 5*time.Second, nil)
			if err != nil || res.Type != history.OK {
				t.Fatalf("after drain: %+v %v", res, err)
			}
		})
	}
}

// TestClientCancelled: a cancelled context ends a wait for the agent as a
// timeout, and the next operation still gets its answer.
func TestClientCancelled(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			st := store.NewMem(nil)
			var slow atomic.Bool
			slow.Store(true)
			st.SetGate(func(context.Context) error {
				if slow.Swap(false) {
					time.Sleep(200 * time.Millisecond)
				}
				return nil
			})
			c := pair(t, tr, inmem.NewService(inmem.Options{}), nil, st)
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(30*time.Millisecond, cancel)
			start := time.Now()
			_, err := c.Do(ctx, agent.OpRequest{ID: 1, F: history.FRead, Key: "k"}, 5*time.Second, nil)
			if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.Canceled) || time.Since(start) > 2*time.Second {
				t.Fatalf("want a prompt timeout by cancellation, got %v after %v", err, time.Since(start))
			}
			res, err := c.Do(context.Background(), agent.OpRequest{ID: 2, F: history.FRead, Key: "k"}, 5*time.Second, nil)
			if err != nil || res.Type != history.OK {
				t.Fatalf("after cancellation: %+v %v", res, err)
			}
		})
	}
}

func TestClientCrash(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			var c *Client
			switch tr {
			case transportPipe:
				inR, inW := io.Pipe()
				outR, outW := io.Pipe()
				go func() { io.Copy(io.Discard, inR) }()
				c = NewClient("c1", 0, inW, outR, history.NewMonotonicClock())
				outW.Close() // the agent died
			case transportSocket:
				harnessEnd, agentEnd := socketPair(t)
				go func() { io.Copy(io.Discard, agentEnd) }()
				c = NewClient("c1", 0, harnessEnd, harnessEnd, history.NewMonotonicClock())
				agentEnd.CloseWrite() // the agent died
			}
			_, err := c.Do(context.Background(), agent.OpRequest{ID: 1, F: history.FRead, Key: "k"}, time.Second, nil)
			if !errors.Is(err, ErrCrashed) {
				t.Fatalf("want crashed, got %v", err)
			}
		})
	}
}
