package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/typed/coordination/v1/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/targets"
)

func TestTimingFor(t *testing.T) {
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		opts map[string]string
		want Timing
		err  string // a word of the error, "" for none
	}{
		{"defaults from 15s", 15 * time.Second, nil, Timing{15 * time.Second, 10 * time.Second, 2 * time.Second}, ""},
		{"defaults from 3s", 3 * time.Second, nil, Timing{3 * time.Second, 2 * time.Second, 400 * time.Millisecond}, ""},
		{"lease-duration set", 2 * time.Second, map[string]string{"lease-duration": "6s"}, Timing{6 * time.Second, 4 * time.Second, 800 * time.Millisecond}, ""},
		{"all set", 2 * time.Second, map[string]string{"renew-deadline": "1500ms", "retry-period": "500ms"}, Timing{2 * time.Second, 1500 * time.Millisecond, 500 * time.Millisecond}, ""},
		{"fractional seconds", 2500 * time.Millisecond, nil, Timing{}, "whole seconds"},
		{"deadline not below duration", 2 * time.Second, map[string]string{"renew-deadline": "2s"}, Timing{}, "renew-deadline"},
		{"retry too slow", 2 * time.Second, map[string]string{"retry-period": "1200ms"}, Timing{}, "retry-period"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			decls := option.Decls(LeaseDurationOption, RenewDeadlineOption, RetryPeriodOption, TokenOption)
			set, err := option.Parse(decls, tc.opts, "option", "test")
			if err != nil {
				t.Fatal(err)
			}
			got, err := TimingFor(tc.ttl, set)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one naming %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("TimingFor = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestLeaseName(t *testing.T) {
	for key, want := range map[string]string{"k0": "splitbrain-k0", "Key_1": "splitbrain-key-5f-1", "a/b": "splitbrain-a-2f-b"} {
		if got := LeaseName(key); got != want {
			t.Errorf("LeaseName(%q) = %q, want %q", key, got, want)
		}
	}
}

// fakeCoordination is client-go's fake coordination client over an object
// tracker: Leases are stored, read and updated in memory.
func fakeCoordination(t *testing.T) *fake.FakeCoordinationV1 {
	t.Helper()
	scheme := kruntime.NewScheme()
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	tracker := k8stesting.NewObjectTracker(scheme, serializer.NewCodecFactory(scheme).UniversalDecoder())
	f := &k8stesting.Fake{}
	// The tracker keeps no resourceVersion: these reactors give each
	// write one and refuse an update of a version that is not the
	// stored one, as the API server does (409 Conflict).
	var rv atomic.Int64
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	f.AddReactor("create", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).ResourceVersion = strconv.FormatInt(rv.Add(1), 10)
		return false, nil, nil
	})
	f.AddReactor("update", "leases", func(a k8stesting.Action) (bool, kruntime.Object, error) {
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		cur, err := tracker.Get(gvr, l.Namespace, l.Name)
		if err == nil && cur.(*coordinationv1.Lease).ResourceVersion != l.ResourceVersion {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), l.Name, errors.New("the object has been modified"))
		}
		l.ResourceVersion = strconv.FormatInt(rv.Add(1), 10)
		return false, nil, nil
	})
	f.AddReactor("*", "*", k8stesting.ObjectReaction(tracker))
	return &fake.FakeCoordinationV1{Fake: f}
}

// takeOver writes k0's Lease as another candidate taking it would: holder
// named, renewed now, behind the back of whoever held it.
func takeOver(t *testing.T, coord *fake.FakeCoordinationV1, holder string) {
	t.Helper()
	ctx := context.Background()
	got, err := coord.Leases(Namespace).Get(ctx, LeaseName("k0"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Spec.HolderIdentity = &holder
	got.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := coord.Leases(Namespace).Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestLockerOnLeases follows the mapping onto the library through a
// sequence on one Lease: c1 leads (token 1: the Lease created), c2 finds it
// busy, c1 gives it back (holder cleared), c2 leads (token 2: one
// transition); c2's lease, once another candidate overwrote the Lease, is
// no longer held in the library's belief once it renews, and its release is
// refused. The same with the library's give-back and the checked one.
func TestLockerOnLeases(t *testing.T) {
	for _, checked := range []bool{false, true} {
		t.Run(fmt.Sprint("checked=", checked), func(t *testing.T) { lockerOnLeases(t, checked) })
	}
}

func lockerOnLeases(t *testing.T, checked bool) {
	coord := fakeCoordination(t)
	timing := Timing{LeaseDuration: 2 * time.Second, RenewDeadline: 1200 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}
	log := slog.New(slog.DiscardHandler)
	c1 := newLocker(coord, "c1", timing, TokenTransitions, log)
	c2 := newLocker(coord, "c2", timing, TokenTransitions, log)
	c1.checked, c2.checked = checked, checked
	ctx := context.Background()
	acquire := func(l *Locker, d time.Duration) (targets.Lease, error) { return acquireWithin(ctx, l, "k0", d) }

	l1, err := acquire(c1, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l1.Token() != 1 {
		t.Errorf("first grant's token %d, want 1 (leaseTransitions 0, plus one)", l1.Token())
	}
	if held, _ := l1.(*lease).Held(ctx); !held {
		t.Error("the leader does not believe it leads")
	}
	if _, err := acquire(c2, 700*time.Millisecond); !errors.Is(err, targets.ErrBusy) {
		t.Fatalf("second candidate: %v, want busy", err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	got, err := coord.Leases(Namespace).Get(ctx, LeaseName("k0"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := got.Spec.HolderIdentity; h == nil || *h != "" {
		t.Errorf("after the release the Lease names %v, want no holder", h)
	}
	l2, err := acquire(c2, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() != 2 {
		t.Errorf("second grant's token %d, want 2", l2.Token())
	}

	// Another candidate writes the Lease behind c2's back: c2's next
	// renewal reads it, and c2 stops leading within its RenewDeadline.
	takeOver(t, coord, "intruder")
	deadline := time.Now().Add(timing.RenewDeadline + 2*time.Second)
	for {
		held, _ := l2.(*lease).Held(ctx)
		if !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("c2 still believes it leads after the Lease named another for longer than its RenewDeadline")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := l2.Release(ctx); !errors.Is(err, targets.ErrNotOwner) {
		t.Errorf("release after losing the Lease: %v, want not owner", err)
	}
	if n := l2.(*lease).RenewFailures(); n != 1 {
		t.Errorf("renew failures %d, want 1", n)
	}
}

// TestDeadHolderLeaseComesBack: a holder that stopped renewing without
// giving the Lease back (killed, or cut off) loses it to a candidate whose
// attempts are each shorter than the LeaseDuration, as the workload's
// bounded acquisitions are. client-go judges a lease expired by how long
// the candidate has seen it unchanged; that time must add up across the
// attempts, else the lock never comes back — for client-go's recipe and
// for controller-runtime's, whose manager campaigns until it leads (validate
// on kubernetes, 2026-12-06: busy-vs-unavailable's 1 s attempts against a
// 2 s lease stalled 20.4 s when each attempt was a new election).
func TestDeadHolderLeaseComesBack(t *testing.T) {
	timing := Timing{LeaseDuration: 2 * time.Second, RenewDeadline: 1200 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}
	for _, tc := range []struct {
		name   string
		locker func(*fake.FakeCoordinationV1) targets.Locker
	}{
		{"client-go", func(coord *fake.FakeCoordinationV1) targets.Locker {
			return newLocker(coord, "c2", timing, TokenTransitions, slog.New(slog.DiscardHandler))
		}},
		{"controller-runtime", func(coord *fake.FakeCoordinationV1) targets.Locker {
			return managerLocker(fakeAPIServer(t, coord), "c2", timing, false)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			coord := fakeCoordination(t)
			ctx := context.Background()
			ghost, seconds, now := "ghost", int32(2), metav1.NewMicroTime(time.Now())
			if _, err := coord.Leases(Namespace).Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: LeaseName("k0"), Namespace: Namespace},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: &ghost, LeaseDurationSeconds: &seconds,
					AcquireTime: &now, RenewTime: &now},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			c2 := tc.locker(coord)
			defer c2.Close()
			start := time.Now()
			for attempt := 1; attempt <= 15; attempt++ {
				l, err := acquireWithin(ctx, c2, "k0", 600*time.Millisecond)
				if err == nil {
					if since := time.Since(start); since < 2*time.Second {
						t.Errorf("took the Lease %v after the holder's last renewal, before its %ds were up", since, seconds)
					}
					if err := l.Release(ctx); err != nil {
						t.Errorf("release: %v", err)
					}
					return
				}
				if !errors.Is(err, targets.ErrBusy) {
					t.Fatalf("attempt %d: %v, want busy until the dead holder's lease is up", attempt, err)
				}
			}
			t.Fatalf("15 attempts of 600 ms over %v: the dead holder's Lease never came back", time.Since(start).Round(time.Millisecond))
		})
	}
}

func TestRecorderToken(t *testing.T) {
	id, tr := "c1-x-1", int32(6)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "812"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseTransitions: &tr}}
	r := &recorder{id: id}
	if _, err := r.token(TokenTransitions); err == nil {
		t.Error("a token before any write naming the candidate")
	}
	r.note(l, nil, false) // a read is not the acquisition
	if _, err := r.token(TokenTransitions); err == nil {
		t.Error("a token from a read")
	}
	r.note(l, nil, true)
	later := l.DeepCopy()
	later.ResourceVersion = "900"
	r.note(later, nil, true) // a renewal does not move the token
	if v, err := r.token(TokenTransitions); err != nil || v != 7 {
		t.Errorf("transitions token %d, %v; want 7", v, err)
	}
	if v, err := r.token(TokenResourceVersion); err != nil || v != 812 {
		t.Errorf("resource-version token %d, %v; want 812", v, err)
	}
}

func TestRequestTimeout(t *testing.T) {
	for renew, want := range map[time.Duration]time.Duration{
		10 * time.Second:        5 * time.Second, // Kubernetes's own 15 s / 10 s / 2 s
		1333 * time.Millisecond: time.Second,     // the 2 s lease TTL's
	} {
		if got := RequestTimeout(renew); got != want {
			t.Errorf("RequestTimeout(%v) = %v, want %v", renew, got, want)
		}
	}
}

// TestHungRequestsTimeOut: against an API server that accepts requests
// and never answers (a connection gone dead), an acquisition with the
// request timeout asks again after each timeout; with none (0), its first
// request waits for the whole acquisition.
func TestHungRequestsTimeOut(t *testing.T) {
	for _, tc := range []struct {
		timeout string
		min     int64
		max     int64
	}{
		{"", 2, 4},   // 1 s each in 2.5 s: the default for a 2 s lease
		{"0s", 1, 1}, // one request, hung for the whole acquisition
	} {
		t.Run("request-timeout="+tc.timeout, func(t *testing.T) {
			var requests atomic.Int64
			stop := make(chan struct{})
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				select {
				case <-r.Context().Done():
				case <-stop:
				}
			}))
			defer srv.Close()
			defer close(stop)
			opts := map[string]string{}
			if tc.timeout != "" {
				opts["request-timeout"] = tc.timeout
			}
			set, err := option.Parse(option.Decls(LeaseDurationOption, RenewDeadlineOption, RetryPeriodOption, RequestTimeoutOption, TokenOption), opts, "option", "test")
			if err != nil {
				t.Fatal(err)
			}
			ep := strings.TrimPrefix(srv.URL, "https://")
			l, err := NewLocker(context.Background(), targets.RecipeConfig{Kind: Name, Endpoints: []string{ep}, TTL: targets.Duration(2 * time.Second), Options: set}, "c1", nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2500*time.Millisecond)
			defer cancel()
			if _, err := l.Acquire(ctx, "k0"); !errors.Is(err, targets.ErrUnavailable) {
				t.Fatalf("acquire from a server that never answers: %v, want unavailable", err)
			}
			if n := requests.Load(); n < tc.min || n > tc.max {
				t.Errorf("%d requests in 2.5 s, want %d to %d", n, tc.min, tc.max)
			}
		})
	}
}

// TestReleaseOfALeaseTakenMeanwhile: a leader whose Lease another
// candidate took while it could not renew (paused past the LeaseDuration)
// releases before its elector has read the Lease again. client-go's
// give-back (ReleaseOnCancel) trusts the elector's last observation,
// overwrites the new holder's Lease and reports success: a live lock given
// away, the next candidate takes it at once. The checked give-back reads
// the Lease, finds another holder, leaves it and answers not-owner.
func TestReleaseOfALeaseTakenMeanwhile(t *testing.T) {
	tests := []struct {
		name       string
		checked    bool
		wantErr    error
		wantHolder string
	}{
		{"library (ReleaseOnCancel)", false, nil, ""},
		{"checked", true, targets.ErrNotOwner, "intruder"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			coord := fakeCoordination(t)
			// A RetryPeriod far longer than the test: the elector does
			// not renew (nor read the Lease) between the takeover and
			// the release, as a leader that has just woken up.
			timing := Timing{LeaseDuration: 20 * time.Second, RenewDeadline: 15 * time.Second, RetryPeriod: 10 * time.Second}
			c1 := newLocker(coord, "c1", timing, TokenTransitions, slog.New(slog.DiscardHandler))
			c1.checked = tt.checked
			ctx := context.Background()
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			l1, err := c1.Acquire(actx, "k0")
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			takeOver(t, coord, "intruder")
			err = l1.Release(ctx)
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("release: %v, want %v", err, tt.wantErr)
			}
			after, err := coord.Leases(Namespace).Get(ctx, LeaseName("k0"), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if h := after.Spec.HolderIdentity; h == nil || *h != tt.wantHolder {
				t.Errorf("after the release the Lease names %v, want %q", h, tt.wantHolder)
			}
		})
	}
}

// acquireWithin is l's Acquire of key, given up after d.
func acquireWithin(ctx context.Context, l targets.Locker, key string, d time.Duration) (targets.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return l.Acquire(ctx, key)
}
