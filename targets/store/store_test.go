package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// api is what Client and Mem both offer.
type api interface {
	Read(ctx context.Context, key string, fenced bool, token uint64) (Entry, error)
	Write(ctx context.Context, key string, value, tag int64, fenced bool, token uint64) (Entry, error)
}

var (
	_ api = (*Client)(nil)
	_ api = (*Mem)(nil)
)

// clients returns the ways to reach a new store: in process (Mem) and over
// HTTP (Client); each must apply the same rule.
func clients(t *testing.T) map[string]func() (api, *Store) {
	return map[string]func() (api, *Store){
		"mem": func() (api, *Store) { s := New(); return NewMem(s), s },
		"http": func() (api, *Store) {
			s := New()
			srv := httptest.NewServer((&Server{Store: s}).Handler())
			t.Cleanup(srv.Close)
			return NewClient(strings.TrimPrefix(srv.URL, "http://"), time.Second), s
		},
	}
}

func TestFencingRule(t *testing.T) {
	type step struct {
		read   bool
		fenced bool
		token  uint64
		value  int64
		stale  bool
	}
	tests := []struct {
		name  string
		steps []step
		final Entry
		rej   int64
	}{
		{"greater tokens accepted", []step{{fenced: true, token: 1, value: 1}, {fenced: true, token: 2, value: 2}}, Entry{Value: 2, Token: 2}, 0},
		{"equal token is an idempotent retry", []step{{fenced: true, token: 3, value: 1}, {fenced: true, token: 3, value: 1}}, Entry{Value: 1, Token: 3}, 0},
		{"smaller token rejected", []step{{fenced: true, token: 5, value: 1}, {fenced: true, token: 4, value: 9, stale: true}}, Entry{Value: 1, Token: 5}, 1},
		{"fenced read registers the token", []step{{read: true, fenced: true, token: 7}, {fenced: true, token: 6, value: 9, stale: true}}, Entry{Token: 7}, 1},
		{"stale read rejected", []step{{fenced: true, token: 7, value: 1}, {read: true, fenced: true, token: 2, stale: true}}, Entry{Value: 1, Token: 7}, 1},
		{"unfenced write bypasses the check", []step{{fenced: true, token: 7, value: 1}, {value: 5}}, Entry{Value: 5, Token: 7}, 0},
	}
	ctx := context.Background()
	for via, dial := range clients(t) {
		for _, tt := range tests {
			t.Run(via+"/"+tt.name, func(t *testing.T) {
				c, s := dial()
				for i, st := range tt.steps {
					var (
						e   Entry
						err error
					)
					if st.read {
						e, err = c.Read(ctx, "k", st.fenced, st.token)
					} else {
						e, err = c.Write(ctx, "k", st.value, int64(i+1), st.fenced, st.token)
					}
					if got := errors.Is(err, ErrStaleToken); got != st.stale {
						t.Fatalf("step %d: stale=%v, want %v (err %v)", i, got, st.stale, err)
					}
					if st.stale && (e != Entry{Token: tt.final.Token}) {
						t.Fatalf("step %d: a rejection answered %+v, want only the highest token", i, e)
					}
				}
				e, _ := s.Read("k", false, 0)
				if e.Value != tt.final.Value || e.Token != tt.final.Token {
					t.Fatalf("final %+v, want %+v", e, tt.final)
				}
				if r := s.Stats().Rejections; r != tt.rej {
					t.Fatalf("rejections %d, want %d", r, tt.rej)
				}
			})
		}
	}
}

// TestMemFaults: each fault fails a request as the real client's errors
// say, and applies it or not as its name says.
func TestMemFaults(t *testing.T) {
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	tests := []struct {
		name    string
		fault   Fault
		ctx     context.Context
		gate    func(context.Context) error
		want    error
		applied bool
	}{
		{"delivered", Deliver, ctx, nil, nil, true},
		{"refused", Refuse, ctx, nil, ErrUnreachable, false},
		{"dropped", Drop, ctx, nil, ErrIndeterminate, false},
		{"answer lost", LoseAnswer, ctx, nil, ErrIndeterminate, true},
		{"caller gave up", Deliver, cancelled, nil, ErrIndeterminate, false},
		{"store stopped", Deliver, ctx, func(context.Context) error { return context.DeadlineExceeded }, ErrIndeterminate, false},
		{"gate passed", Deliver, ctx, func(context.Context) error { return nil }, nil, true},
	}
	for _, tt := range tests {
		for _, write := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/write=%v", tt.name, write), func(t *testing.T) {
				m := NewMem(nil)
				m.SetGate(tt.gate)
				var err error
				if write {
					m.Fail(Deliver, tt.fault)
					_, err = m.Write(tt.ctx, "k", 5, 1, true, 3)
				} else {
					m.Fail(tt.fault, Deliver)
					_, err = m.Read(tt.ctx, "k", true, 3)
				}
				if !errors.Is(err, tt.want) {
					t.Fatalf("err %v, want %v", err, tt.want)
				}
				e, _ := m.Store().Read("k", false, 0)
				if applied := e.Token == 3; applied != tt.applied {
					t.Fatalf("applied %v, want %v (%+v)", applied, tt.applied, e)
				}
			})
		}
	}
}

func TestHTTPRoundTrip(t *testing.T) {
	srv := httptest.NewServer((&Server{Store: New()}).Handler())
	defer srv.Close()
	c := NewClient(strings.TrimPrefix(srv.URL, "http://"), time.Second)
	ctx := context.Background()
	if _, err := c.Write(ctx, "k", 1, 11, true, 4); err != nil {
		t.Fatal(err)
	}
	e, err := c.Read(ctx, "k", true, 4)
	if err != nil || e.Value != 1 || e.Tag != 11 || e.Token != 4 {
		t.Fatalf("read %+v %v", e, err)
	}
	_, err = c.Write(ctx, "k", 2, 12, true, 3)
	var se *StaleError
	if !errors.Is(err, ErrStaleToken) || !errors.As(err, &se) || se.Highest != 4 || se.Token != 3 {
		t.Fatalf("stale write: %v", err)
	}
	st, err := c.Stats(ctx)
	if err != nil || st.Rejections != 1 || st.WriteRejections != 1 || st.FencedWrites != 2 {
		t.Fatalf("stats %+v %v", st, err)
	}
}

func TestClientClassifiesTransportErrors(t *testing.T) {
	// A closed port: the dial fails, nothing can have been applied.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = NewClient(addr, 500*time.Millisecond).Write(context.Background(), "k", 1, 1, false, 0)
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("closed port: %v", err)
	}

	// A server that accepts and never answers: the outcome is unknown.
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	_, err = NewClient(ln.Addr().String(), 200*time.Millisecond).Write(context.Background(), "k", 1, 1, false, 0)
	if !errors.Is(err, ErrIndeterminate) {
		t.Fatalf("silent server: %v", err)
	}
}
