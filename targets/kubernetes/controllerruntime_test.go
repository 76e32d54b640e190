package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/kubernetes/typed/coordination/v1/fake"

	"github.com/splitbrain/splitbrain/targets"
)

// fakeAPIServer serves the Leases of coord over HTTPS as the API server
// does (requests in JSON or protobuf, answers in JSON; a Status for each
// error, 409 for a stale update), accepts
// Events, and answers 404 to anything else. It returns the endpoint
// (host:port).
func fakeAPIServer(t *testing.T, coord *fake.FakeCoordinationV1) string {
	t.Helper()
	leases := "/apis/coordination.k8s.io/v1/namespaces/" + Namespace + "/leases"
	reply := func(w http.ResponseWriter, code int, obj any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(obj)
	}
	fail := func(w http.ResponseWriter, err error) {
		var st metav1.Status
		if s, ok := err.(apierrors.APIStatus); ok {
			st = s.Status()
		} else {
			st = apierrors.NewInternalError(err).Status()
		}
		st.Kind, st.APIVersion = "Status", "v1"
		reply(w, int(st.Code), st)
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		typed := func(l *coordinationv1.Lease, err error, code int) {
			if err != nil {
				fail(w, err)
				return
			}
			l.Kind, l.APIVersion = "Lease", coordinationv1.SchemeGroupVersion.String()
			reply(w, code, l)
		}
		body := func() *coordinationv1.Lease {
			var l coordinationv1.Lease
			b, err := io.ReadAll(r.Body)
			if err == nil {
				_, _, err = scheme.Codecs.UniversalDeserializer().Decode(b, nil, &l)
			}
			if err != nil {
				t.Errorf("%s %s: %v", r.Method, r.URL.Path, err)
			}
			l.Namespace = Namespace
			return &l
		}
		name, one := strings.CutPrefix(r.URL.Path, leases+"/")
		switch {
		case r.Method == http.MethodGet && one:
			l, err := coord.Leases(Namespace).Get(ctx, name, metav1.GetOptions{})
			typed(l, err, http.StatusOK)
		case r.Method == http.MethodPut && one:
			l, err := coord.Leases(Namespace).Update(ctx, body(), metav1.UpdateOptions{})
			typed(l, err, http.StatusOK)
		case r.Method == http.MethodPost && r.URL.Path == leases:
			l, err := coord.Leases(Namespace).Create(ctx, body(), metav1.CreateOptions{})
			typed(l, err, http.StatusCreated)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/events"):
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(b)
		default:
			fail(w, apierrors.NewNotFound(coordinationv1.Resource("unknown"), r.URL.Path))
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "https://")
}

// managerLocker is the controller-runtime recipe of client on the API
// server at ep.
func managerLocker(ep, client string, timing Timing, releaseOnCancel bool) *ManagerLocker {
	return newManagerLocker(RESTConfig(ep, client, 0), client, timing, TokenTransitions, releaseOnCancel, slog.New(slog.DiscardHandler))
}

// holderNow is the holder k0's Lease names now.
func holderNow(t *testing.T, coord *fake.FakeCoordinationV1) string {
	t.Helper()
	got, err := coord.Leases(Namespace).Get(context.Background(), LeaseName("k0"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return holderOf(got)
}

// TestManagerLockerOnLeases follows the mapping onto controller-runtime's
// manager through a sequence on one Lease, over HTTP: c1 is elected
// (token 1: the Lease created), c2 finds it busy, c1 stops its manager;
// by default (release-on-cancel=false) the Lease still names c1 and c2 is
// elected once it has seen it unchanged for the LeaseDuration (its
// election, given up while c1 held, campaigning on), with
// release-on-cancel=true the Lease is given back and c2 takes it at once
// (token 2 either way); c2's manager, once another candidate overwrote the
// Lease, stops leading and its release is refused.
func TestManagerLockerOnLeases(t *testing.T) {
	for _, tc := range []struct {
		name            string
		releaseOnCancel bool
		minWait         time.Duration // before c2 is elected after c1's last write
	}{
		{"default", false, 2 * time.Second},
		{"release-on-cancel", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			coord := fakeCoordination(t)
			ep := fakeAPIServer(t, coord)
			timing := Timing{LeaseDuration: 2 * time.Second, RenewDeadline: 1200 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}
			c1 := managerLocker(ep, "c1", timing, tc.releaseOnCancel)
			c2 := managerLocker(ep, "c2", timing, tc.releaseOnCancel)
			defer c1.Close()
			defer c2.Close()
			ctx := context.Background()
			acquire := func(l *ManagerLocker, d time.Duration) (targets.Lease, error) { return acquireWithin(ctx, l, "k0", d) }

			l1, err := acquire(c1, 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if l1.Token() != 1 {
				t.Errorf("first grant's token %d, want 1 (leaseTransitions 0, plus one)", l1.Token())
			}
			id1 := l1.(*managerLease).id
			if h := holderNow(t, coord); h != id1 || id1 == "" {
				t.Errorf("the Lease names %q, the grant %q", h, id1)
			}
			if held, _ := l1.(*managerLease).Held(ctx); !held {
				t.Error("the elected manager does not run")
			}
			if _, err := acquire(c2, 700*time.Millisecond); !errors.Is(err, targets.ErrBusy) {
				t.Fatalf("second candidate: %v, want busy", err)
			}
			if err := l1.Release(ctx); err != nil {
				t.Fatalf("release: %v", err)
			}
			want := id1
			if tc.releaseOnCancel {
				want = ""
			}
			if h := holderNow(t, coord); h != want {
				t.Errorf("after the release the Lease names %q, want %q", h, want)
			}
			// c2's election, given up above, goes on campaigning: it may
			// have seen c1's last record already, so its wait runs from its
			// first sight of that record, not from the release. client-go
			// compares records as JSON, renewTime in whole seconds: the
			// renewals of one second read the same, so the wait may run
			// from the first of them.
			got, err := coord.Leases(Namespace).Get(ctx, LeaseName("k0"), metav1.GetOptions{})
			if err != nil || got.Spec.RenewTime == nil {
				t.Fatalf("the Lease after the release: %v, %v", got, err)
			}
			lastWrite := got.Spec.RenewTime.Time.Truncate(time.Second)
			l2, err := acquire(c2, 4*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(lastWrite); took < tc.minWait {
				t.Errorf("c2 elected %v after the second of c1's last write of the Lease began, before the LeaseDuration %v", took, tc.minWait)
			}
			if l2.Token() != 2 {
				t.Errorf("second grant's token %d, want 2", l2.Token())
			}

			// Another candidate writes the Lease behind c2's back: c2's
			// next renewal reads it, and its manager stops.
			takeOver(t, coord, "intruder")
			deadline := time.Now().Add(timing.RenewDeadline + 2*time.Second)
			for held, _ := l2.(*managerLease).Held(ctx); held; held, _ = l2.(*managerLease).Held(ctx) {
				if time.Now().After(deadline) {
					t.Fatal("c2's manager still runs after the Lease named another for longer than its RenewDeadline")
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err := l2.Release(ctx); !errors.Is(err, targets.ErrNotOwner) {
				t.Errorf("release after losing the Lease: %v, want not owner", err)
			}
			if n := l2.(*managerLease).RenewFailures(); n != 1 {
				t.Errorf("renew failures %d, want 1", n)
			}
			if h := holderNow(t, coord); h != "intruder" {
				t.Errorf("the Lease names %q, want the intruder's", h)
			}
		})
	}
}

// TestManagerReleaseOfALeaseTakenMeanwhile: controller-runtime's
// LeaderElectionReleaseOnCancel is client-go's give-back, and hands a live
// lock away as it does (TestReleaseOfALeaseTakenMeanwhile): a manager
// whose Lease another took while it did not renew is stopped, and its
// give-back clears the new holder. By default the stopped manager writes
// nothing.
func TestManagerReleaseOfALeaseTakenMeanwhile(t *testing.T) {
	for _, tc := range []struct {
		name            string
		releaseOnCancel bool
		wantHolder      string
	}{
		{"default", false, "intruder"},
		{"release-on-cancel", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			coord := fakeCoordination(t)
			ep := fakeAPIServer(t, coord)
			// A RetryPeriod far longer than the test: the manager does
			// not renew (nor read the Lease) between the takeover and the
			// release, as one that has just woken up.
			timing := Timing{LeaseDuration: 20 * time.Second, RenewDeadline: 15 * time.Second, RetryPeriod: 10 * time.Second}
			c1 := managerLocker(ep, "c1", timing, tc.releaseOnCancel)
			defer c1.Close()
			ctx := context.Background()
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			l1, err := c1.Acquire(actx, "k0")
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // the renewal right after the election
			takeOver(t, coord, "intruder")
			if err := l1.Release(ctx); err != nil {
				t.Errorf("release: %v", err)
			}
			if h := holderNow(t, coord); h != tc.wantHolder {
				t.Errorf("after the release the Lease names %q, want %q", h, tc.wantHolder)
			}
		})
	}
}
