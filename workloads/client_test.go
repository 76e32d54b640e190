package workloads

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/store"
	"github.com/splitbrain/splitbrain/workloads/agent"
)

// fakeLocker answers Acquire with err, or grants token.
type fakeLocker struct {
	err   error
	token uint64
}

func (l *fakeLocker) Acquire(context.Context, string) (targets.Lease, error) {
	if l.err != nil {
		return nil, l.err
	}
	l.token++
	return fakeLease(l.token), nil
}
func (l *fakeLocker) Close() error { return nil }

type fakeLease uint64

func (f fakeLease) Token() uint64                 { return uint64(f) }
func (f fakeLease) Release(context.Context) error { return targets.ErrNotOwner }

// fakeStore wraps a real store.Store, failing writes with writeErr.
type fakeStore struct {
	s         *store.Store
	writeErr  error
	readDelay time.Duration
}

func (f *fakeStore) Read(_ context.Context, key string, fenced bool, token uint64) (store.Entry, error) {
	time.Sleep(f.readDelay)
	return f.s.Read(key, fenced, token)
}
func (f *fakeStore) Write(_ context.Context, key string, v, tag int64, fenced bool, token uint64) (store.Entry, error) {
	if f.writeErr != nil {
		return store.Entry{}, f.writeErr
	}
	return f.s.Write(key, v, tag, fenced, token)
}

func pair(t *testing.T, l *fakeLocker, st *fakeStore) *Client {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.Serve(ctx, inR, outW, agent.Deps{
			Lockers: map[string]targets.LockerFactory{"fake": func(context.Context, targets.RecipeConfig, string, *slog.Logger) (targets.Locker, error) {
				return l, nil
			}},
			DialStore: func(string, time.Duration) agent.Store { return st },
		})
		outW.Close()
	}()
	t.Cleanup(func() { cancel(); inW.Close(); <-done })
	c := NewClient("c1", 0, inW, outR, history.NewMonotonicClock())
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	if err := c.Configure(cctx, agent.Config{Client: "c1", Recipe: targets.RecipeConfig{Kind: "fake"}, AcquireTimeout: targets.Duration(time.Second), ReleaseTimeout: targets.Duration(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(cctx); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAgentOutcomes(t *testing.T) {
	tests := []struct {
		name     string
		lockErr  error
		writeErr error
		fenced   bool
		pre      func(*store.Store)
		typ      history.Type
		kind     string
		events   int
	}{
		{"ok", nil, nil, false, nil, history.OK, "", 2}, // acquired, write
		{"busy", targets.ErrBusy, nil, false, nil, history.Fail, history.ErrBusy, 0},
		{"lock unavailable", targets.ErrUnavailable, nil, false, nil, history.Fail, history.ErrLockUnavailable, 0},
		{"stale token on read", nil, nil, true, func(s *store.Store) { s.Write("k", 0, 0, true, 99) }, history.Fail, history.ErrStaleToken, 1},
		{"store unreachable on write", nil, store.ErrUnreachable, false, nil, history.Fail, history.ErrStoreUnavailable, 2},
		{"store silent on write", nil, store.ErrIndeterminate, false, nil, history.Info, history.ErrStoreUnavailable, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &fakeStore{s: store.New(), writeErr: tt.writeErr}
			if tt.pre != nil {
				tt.pre(st.s)
			}
			c := pair(t, &fakeLocker{err: tt.lockErr}, st)
			var events []agent.Response
			res, err := c.Do(context.Background(), agent.OpRequest{ID: 5, F: history.FCriticalSection, Key: "k", Fenced: tt.fenced}, 5*time.Second, func(r agent.Response) { events = append(events, r) })
			if err != nil {
				t.Fatal(err)
			}
			if res.Type != tt.typ || res.Error != tt.kind || len(events) != tt.events {
				t.Fatalf("result %+v with %d events", res, len(events))
			}
			if tt.typ == history.OK {
				if res.Read == nil || res.Write == nil || res.Write.Value != res.Read.Value+1 || res.Write.Tag != 5 || res.Token == 0 {
					t.Fatalf("bad ok result %+v", res)
				}
				if res.ReleaseError != "not-owner" || res.AcquiredMono == 0 || res.WriteMono < res.AcquiredMono || res.ReleasedMono < res.WriteMono {
					t.Fatalf("bad timings or release %+v", res)
				}
				if at := c.RunTime(res.AcquiredMono); at <= 0 {
					t.Fatalf("agent time maps to %d", at)
				}
			}
		})
	}
}

func TestClientTimeoutThenDrain(t *testing.T) {
	st := &fakeStore{s: store.New(), readDelay: 200 * time.Millisecond}
	c := pair(t, &fakeLocker{}, st)
	// An op whose answer is slow: the harness gives up, then the next op
	// must not be confused by the late answer.
	slow := agent.OpRequest{ID: 1, F: history.FRead, Key: "k"}
	_, err := c.Do(context.Background(), slow, 50*time.Millisecond, nil)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("want timeout, got %v", err)
	}
	res, err := c.Do(context.Background(), agent.OpRequest{ID: 2, F: history.FRead, Key: "k"}, 5*time.Second, nil)
	if err != nil || res.Type != history.OK {
		t.Fatalf("after drain: %+v %v", res, err)
	}
}

func TestClientCrash(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() { io.Copy(io.Discard, inR) }()
	c := NewClient("c1", 0, inW, outR, history.NewMonotonicClock())
	outW.Close() // the agent died
	_, err := c.Do(context.Background(), agent.OpRequest{ID: 1, F: history.FRead, Key: "k"}, time.Second, nil)
	if !errors.Is(err, ErrCrashed) {
		t.Fatalf("want crashed, got %v", err)
	}
}
