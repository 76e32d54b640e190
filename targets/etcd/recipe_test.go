//go:build linux

package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/splitbrain/splitbrain/targets"
)

// locker is the recipe's Locker for client on endpoint, closed at cleanup.
func locker(t *testing.T, endpoint, client string) *Locker {
	t.Helper()
	l, err := NewLocker(context.Background(), targets.RecipeConfig{Kind: Name, Endpoints: []string{endpoint},
		TTL: targets.Duration(2 * time.Second)}, client, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.(*Locker)
}

// Acquire answers before its caller's deadline, whatever the answer: the
// lock granted (free, or released while it waited), busy when another
// held it to the end (and not before half the deadline: it waited), and
// unavailable when the service cannot be reached: never there, gone
// after the client's session began, or frozen while the client waited
// behind a holder (Lock's cleanup then hangs). The recipe used to wait on
// until the deadline, then up to 1 s for Lock's cleanup and 500 ms for
// its probe: busy came after the deadline, late.
// agentGrace is what the client agent allows a reply past deadline_ms
// (external.DefaultGrace).
const agentGrace = 200 * time.Millisecond

func TestAcquireAnswersBeforeDeadline(t *testing.T) {
	shared := localEtcd(t)
	for i, tc := range []struct {
		name     string
		held     bool          // another client holds the key
		release  time.Duration // ... and releases it after this (0: never)
		endpoint string        // the caller's endpoint ("": the service's)
		fault    string        // "kill": the service ends once the caller's session began; "freeze": it is frozen after freezeAt
		deadline time.Duration
		want     string // granted, busy or unavailable
		// probeMayTimeOut: unavailable also passes when the probe that
		// tells busy from unavailable itself ran out of time.
		probeMayTimeOut bool
	}{
		{name: "free", deadline: time.Second, want: "granted"},
		{name: "held, 1.5s", held: true, deadline: 1500 * time.Millisecond, want: "busy"},
		{name: "held, 1s", held: true, deadline: time.Second, want: "busy"},
		// 400 ms leave the probe 25-75 ms: beside two busy loops it ran
		// out of time, and unavailable is then the honest answer (it saw
		// no holder); the longer deadlines must tell busy.
		{name: "held, 400ms", held: true, deadline: 400 * time.Millisecond, want: "busy", probeMayTimeOut: true},
		{name: "released while waiting", held: true, release: 300 * time.Millisecond, deadline: 1500 * time.Millisecond, want: "granted"},
		{name: "unreachable", endpoint: freePort(t), deadline: time.Second, want: "unavailable"},
		{name: "gone after the session began", fault: "kill", deadline: time.Second, want: "unavailable"},
		{name: "frozen while waiting behind a holder", held: true, fault: "freeze", deadline: 1500 * time.Millisecond, want: "unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := fmt.Sprintf("deadline-%d", i)
			svc := shared
			if tc.fault != "" {
				svc = localEtcd(t) // a service of its own to break
			}
			ep := svc.Endpoint
			if tc.held {
				holder := locker(t, ep, "c2")
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				s, err := holder.Acquire(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if tc.release > 0 {
					time.AfterFunc(tc.release, func() { _ = s.Release(context.Background()) })
				}
			}
			endpoint := ep
			if tc.endpoint != "" {
				endpoint = tc.endpoint
			}
			l := locker(t, endpoint, "c1")
			switch tc.fault {
			case "kill":
				// A session first (its lease granted), then no service.
				if _, err := l.sessionFor(context.Background()); err != nil {
					t.Fatal(err)
				}
				svc.Kill()
			case "freeze":
				time.AfterFunc(tc.deadline/2, svc.Freeze)
				defer svc.Thaw()
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
			defer cancel()
			start := time.Now()
			s, err := l.Acquire(ctx, key)
			took := time.Since(start)
			got := "granted"
			switch {
			case errors.Is(err, targets.ErrBusy):
				got = "busy"
			case errors.Is(err, targets.ErrUnavailable):
				got = "unavailable"
			case err != nil:
				got = err.Error()
			}
			t.Logf("%s after %v of %v (%v)", got, took.Round(time.Millisecond), tc.deadline, err)
			probeOut := got == "unavailable" && err != nil && strings.Contains(err.Error(), "(probe: context deadline exceeded)")
			if got != tc.want && !(tc.probeMayTimeOut && probeOut) {
				t.Errorf("answered %s, want %s (%v)", got, tc.want, err)
			}
			// The recipe keeps a reserve to answer before the deadline;
			// on a loaded machine its last wake-ups can come later. A
			// reply still counts for its caller within the client agent's
			// grace past deadline_ms (external.DefaultGrace, 200 ms):
			// seen 67 ms past beside two busy loops and the test suite.
			if took >= tc.deadline+agentGrace {
				t.Errorf("answered %v after the call, past its %v deadline and the agent's %v grace", took.Round(time.Millisecond), tc.deadline, agentGrace)
			} else if took >= tc.deadline {
				t.Logf("answered %v past the deadline, within the agent's grace", (took - tc.deadline).Round(time.Millisecond))
			}
			if got == "busy" && took < tc.deadline/2 {
				t.Errorf("busy after %v of %v: it gave up early", took.Round(time.Millisecond), tc.deadline)
			}
			if err == nil {
				if s.Token() == 0 {
					t.Error("granted with token 0")
				}
				if err := s.Release(context.Background()); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		})
	}
}

// classify answers busy only when Lock was cut short by its deadline and
// the key's oldest waiter (its holder) belongs to another session; a Lock
// failed by the service before its deadline, no key, or the client's own
// key first (a waiter key of its own not yet cleaned up) is unavailable.
func TestClassify(t *testing.T) {
	l := locker(t, localEtcd(t).Endpoint, "c1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	grant := func() clientv3.LeaseID {
		g, err := l.cli.Grant(ctx, 30)
		if err != nil {
			t.Fatal(err)
		}
		return g.ID
	}
	own, other := grant(), grant()
	cut, cancelCut := context.WithCancel(ctx)
	cancelCut()
	failed := errors.New("the service failed it")
	for i, tc := range []struct {
		name    string
		keys    []clientv3.LeaseID // waiter keys put in this order
		lctx    context.Context    // the context Lock ran on
		want    error
		because string
	}{
		{"another holds it", []clientv3.LeaseID{other}, cut, targets.ErrBusy, "held under lease"},
		{"another holds it, ours waits", []clientv3.LeaseID{other, own}, cut, targets.ErrBusy, "held under lease"},
		{"no key", nil, cut, targets.ErrUnavailable, "no holder found"},
		{"our own key first", []clientv3.LeaseID{own, other}, cut, targets.ErrUnavailable, "this client's own"},
		{"failed before the deadline, another holds it", []clientv3.LeaseID{other}, ctx, targets.ErrUnavailable, "the service failed it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("%sclassify-%d/", lockPrefix, i)
			for j, lease := range tc.keys {
				if _, err := l.cli.Put(ctx, fmt.Sprintf("%s/%x-%d", prefix, lease, j), "", clientv3.WithLease(lease)); err != nil {
					t.Fatal(err)
				}
			}
			err := l.classify(ctx, tc.lctx, prefix, own, failed)
			if !errors.Is(err, tc.want) || !errors.Is(err, failed) {
				t.Fatalf("classify = %v, want %v wrapping the Lock's error", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.because) {
				t.Errorf("classify = %v, want it to say %q", err, tc.because)
			}
		})
	}
	// A probe that cannot reach the service sees no holder.
	down := locker(t, freePort(t), "c1")
	actx, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	if err := down.classify(actx, cut, lockPrefix+"classify-down/", own, failed); !errors.Is(err, targets.ErrUnavailable) {
		t.Errorf("classify on an unreachable service = %v, want unavailable", err)
	}
}
