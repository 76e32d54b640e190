package checkers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
)

const ms = int64(time.Millisecond)

// mhold is one critical section for the mutex tests, times in ms.
type mhold struct {
	id                                int64
	client                            string
	invoke, acquired, write, released int64 // released 0: no release mark
	end                               int64
	typ                               history.Type
	err, releaseErr                   string
}

// mfault is a fault window, times in ms.
type mfault struct {
	f, detail  string
	targets    []string
	start, end int64
}

func mutexHistory(holds []mhold, faults []mfault) []history.Event {
	var evs []history.Event
	for _, h := range holds {
		typ := h.typ
		if typ == "" {
			typ = history.OK
		}
		end := h.end
		if end == 0 {
			end = max(h.released, h.write, h.acquired) + 10
		}
		evs = append(evs,
			history.Event{Time: h.invoke * ms, Type: history.Invoke, ID: h.id, F: history.FCriticalSection, Key: "k0", Client: h.client},
			history.Event{Time: end * ms, Type: typ, ID: h.id, F: history.FCriticalSection, Key: "k0", Client: h.client,
				Token: uint64(h.id), Acquired: h.acquired * ms, Released: h.released * ms, WriteAt: h.write * ms,
				Error: h.err, ReleaseError: h.releaseErr, Read: &history.Value{}, Write: &history.Value{Value: 1, Tag: h.id}})
	}
	for _, f := range faults {
		evs = append(evs,
			history.Event{Time: f.start * ms, Type: history.Nemesis, Process: -1, F: f.f, Phase: history.PhaseStart, Targets: f.targets, Detail: f.detail},
			history.Event{Time: f.end * ms, Type: history.Nemesis, Process: -1, F: f.f, Phase: history.PhaseEnd, Targets: f.targets})
	}
	slices.SortStableFunc(evs, func(a, b history.Event) int { return int(a.Time - b.Time) })
	return evs
}

// TestMutexJudgesMutualExclusion: the lock is invalid exactly when a
// second grant certainly came while the first holder's lock was alive,
// with both holders named; holders that outlived their lease, grants a
// fault may have delayed, sessions a fault may have ended, one client's own
// lock handed back and clients whose clock was skewed are not counted.
func TestMutexJudgesMutualExclusion(t *testing.T) {
	const ttl = 2 * time.Second
	pauseC1 := mfault{f: "pause", detail: "SIGSTOP", targets: []string{"c1"}, start: 300, end: 3200}
	tests := []struct {
		name    string
		m       Mutex
		holds   []mhold
		faults  []mfault
		want    Verdict
		early   int
		expired int
		names   []string // in the reason
	}{
		// Item 1's first adapter: a release that deletes without checking
		// its owner, under holder pauses. c1 outlives its lease (paused),
		// c2 is granted lawfully, c1 wakes and deletes c2's key, and c3 is
		// granted while c2's lease was certainly alive.
		{"unchecked release under a holder pause", Mutex{TTL: ttl}, []mhold{
			{id: 1, client: "c1", invoke: 0, acquired: 100, write: 3250, released: 3300, typ: history.Fail, err: history.ErrStaleToken},
			{id: 2, client: "c2", invoke: 500, acquired: 2300, write: 3500, released: 3550, typ: history.Fail, err: history.ErrStaleToken},
			{id: 3, client: "c3", invoke: 1000, acquired: 3400, write: 3600, released: 3700},
		}, []mfault{pauseC1}, Invalid, 1, 1, []string{"c3", "c2", "k0"}},
		// The same run with a checked release: c1's release is refused and
		// c3 waits for c2's.
		{"checked release under a holder pause", Mutex{TTL: ttl}, []mhold{
			{id: 1, client: "c1", invoke: 0, acquired: 100, write: 3250, released: 3300, typ: history.Fail, err: history.ErrStaleToken, releaseErr: "not-owner"},
			{id: 2, client: "c2", invoke: 500, acquired: 2300, write: 3500, released: 3550},
			{id: 3, client: "c3", invoke: 1000, acquired: 3600, write: 3700, released: 3750},
		}, []mfault{pauseC1}, Valid, 0, 1, nil},
		// Item 1's second adapter: an etcd-like client that takes its lease
		// when it starts waiting; its grant comes with what is left of the
		// TTL, so c3 is granted 300 ms after c2 while c2 holds.
		{"lease taken at the start of a long wait", Mutex{TTL: ttl, Renews: true}, []mhold{
			{id: 1, client: "c1", invoke: 0, acquired: 50, write: 1500, released: 1800},
			{id: 2, client: "c2", invoke: 100, acquired: 1810, write: 2600, released: 2700},
			{id: 3, client: "c3", invoke: 900, acquired: 2110, write: 2200, released: 2300},
		}, nil, Invalid, 1, 0, []string{"c3", "c2", "k0"}},
		{"a lease that starts at the grant", Mutex{TTL: ttl, Renews: true}, []mhold{
			{id: 1, client: "c1", invoke: 0, acquired: 50, write: 1500, released: 1800},
			{id: 2, client: "c2", invoke: 100, acquired: 1810, write: 2600, released: 2700},
			{id: 3, client: "c3", invoke: 900, acquired: 2710, write: 2800, released: 2900},
		}, nil, Valid, 0, 0, nil},
		// A holder paused past its TTL: the lease expired lawfully.
		{"holder paused past its lease", Mutex{TTL: ttl}, []mhold{
			{id: 1, client: "c1", invoke: 0, acquired: 100, write: 3250, released: 3300},
			{id: 2, client: "c2", invoke: 500, acquired: 2200, write: 2500, released: 2600},
		}, []mfault{pauseC1}, Valid, 0, 1, nil},
		// A client paused while its grant was on the way sees it late: the
		// service granted c1 at once, its lease ran out, and c2's grant
		// (seen before c1's) was lawful. Without the fault's window the
		// pair would look like a live lock given away.
		{"grant seen late by a paused client", Mutex{TTL: ttl}, []mhold{
			{id: 1, client: "c1", invoke: 290, acquired: 3210, write: 3300, released: 3400},
			{id: 2, client: "c2", invoke: 500, acquired: 2400, write: 3000, released: 3500},
		}, []mfault{pauseC1}, Valid, 0, 1, nil},
		// Faults that overlap (--fault-overlap): the pause of c1 above
		// inside a kill of another client and beside a packet fault on a
		// third; their windows pair start and end by kind whatever the
		// interleaving, and the pause still vouches for c1's late grant.
		{"grant seen late, among overlapping faults", Mutex{TTL: ttl}, []mhold{
			{id: 1, client: "c1", invoke: 290, acquired: 3210, write: 3300, released: 3400},
			{id: 2, client: "c2", invoke: 500, acquired: 2400, write: 3000, released: 3500},
			{id: 4, client: "c4", invoke: 6000, acquired: 6010, write: 6020, released: 6030},
			{id: 5, client: "c5", invoke: 6100, acquired: 6110, write: 6120, released: 6130},
		}, []mfault{
			{f: "kill", targets: []string{"c5"}, start: 100, end: 3300},
			pauseC1,
			{f: "packet", targets: []string{"c4"}, start: 200, end: 3250},
		}, Valid, 0, 1, nil},
		// The same faults on other clients only do not excuse a live lock
		// given away between c1 and c2.
		{"overlapping faults on other clients", Mutex{TTL: ttl}, []mhold{
			{id: 1, client: "c1", invoke: 0, acquired: 100, write: 1500, released: 1600},
			{id: 2, client: "c2", invoke: 50, acquired: 450, write: 600, released: 700},
			{id: 4, client: "c4", invoke: 6000, acquired: 6010, write: 6020, released: 6030},
			{id: 5, client: "c5", invoke: 6100, acquired: 6110, write: 6120, released: 6130},
		}, []mfault{
			{f: "kill", targets: []string{"c5"}, start: 10, end: 900},
			{f: "pause", targets: []string{"c4"}, start: 20, end: 800},
			{f: "packet", targets: []string{"c4"}, start: 30, end: 850},
		}, Invalid, 1, 0, []string{"c2", "c1"}},
		// A forward clock jump on a single Redis expires the held key: the
		// lock did give a live lock away.
		{"clock jump on the lock service", Mutex{TTL: ttl}, []mhold{
			{id: 1, client: "c1", invoke: 0, acquired: 100, write: 1500, released: 1600},
			{id: 2, client: "c2", invoke: 50, acquired: 450, write: 600, released: 700},
		}, []mfault{{f: "clock", detail: "mode=bump target=n1 offset=+30s", targets: []string{"n1"}, start: 400, end: 420}}, Invalid, 1, 0, []string{"c2", "c1"}},
		// A client whose monotonic clock was moved cannot vouch for its
		// times.
		{"skewed monotonic clock", Mutex{TTL: ttl}, []mhold{
			{id: 1, client: "c1", invoke: 0, acquired: 100, write: 1500, released: 1600},
			{id: 2, client: "c2", invoke: 50, acquired: 450, write: 600, released: 700},
		}, []mfault{{f: "clock", detail: "mode=bump target=c2 clocks=realtime,monotonic", targets: []string{"c2"}, start: 10, end: 20}}, Valid, 0, 0, nil},
		// The same client's lock handed back (etcd's session key).
		{"same client", Mutex{TTL: ttl}, []mhold{
			{id: 1, client: "c1", invoke: 0, acquired: 100, write: 500, end: 600},
			{id: 2, client: "c1", invoke: 300, acquired: 400, write: 450, released: 480},
		}, nil, Valid, 0, 0, nil},
		// The first holder has no release mark (its client crashed after
		// writing): its release may have come before the second grant.
		{"no release mark", Mutex{TTL: ttl}, []mhold{
			{id: 1, client: "c1", invoke: 0, acquired: 100, write: 500, end: 800, typ: history.Info, err: history.ErrCrashed},
			{id: 2, client: "c2", invoke: 50, acquired: 650, write: 660, released: 680},
		}, nil, Valid, 0, 1, nil},
		// Session locks: two sessions at once with no fault is a broken
		// lock; a paused holder whose session the server may have ended
		// (keepalive) is not judged; nor one that reported its lock lost.
		{"two open sessions", Mutex{TTL: 5 * time.Second, Session: true}, []mhold{
			{id: 1, client: "c1", invoke: 0, acquired: 100, write: 1500, released: 1600},
			{id: 2, client: "c2", invoke: 50, acquired: 1300, write: 1400, released: 1450},
		}, nil, Invalid, 1, 0, []string{"c2", "c1"}},
		{"session of a paused holder", Mutex{TTL: 5 * time.Second, Session: true}, []mhold{
			{id: 1, client: "c1", invoke: 0, acquired: 100, write: 3300, released: 3400},
			{id: 2, client: "c2", invoke: 50, acquired: 1300, write: 1400, released: 1450},
		}, []mfault{pauseC1}, Valid, 0, 0, nil},
		{"session reported lost", Mutex{TTL: 5 * time.Second, Session: true}, []mhold{
			{id: 1, client: "c1", invoke: 0, acquired: 100, write: 1500, released: 1600, releaseErr: "not-owner"},
			{id: 2, client: "c2", invoke: 50, acquired: 1300, write: 1400, released: 1450},
		}, nil, Valid, 0, 0, nil},
		// A session that idled for its TTL may have been ended.
		{"session past its idle timeout", Mutex{TTL: time.Second, Session: true}, []mhold{
			{id: 1, client: "c1", invoke: 0, acquired: 100, write: 1500, released: 1600},
			{id: 2, client: "c2", invoke: 50, acquired: 1300, write: 1400, released: 1450},
		}, nil, Valid, 0, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := NewInput(mutexHistory(tt.holds, tt.faults))
			r := tt.m.Check(context.Background(), in)
			d := r.Details.(*MutexDetails)
			if r.Verdict != tt.want || !r.Judges || r.Aspect != AspectLock || d.EarlyOverlaps != tt.early || d.Expired != tt.expired {
				t.Fatalf("verdict %v (judges %v, aspect %q), early %d expired %d unjudged %d; want %v, %d, %d\n%s",
					r.Verdict, r.Judges, r.Aspect, d.EarlyOverlaps, d.Expired, d.Unjudged, tt.want, tt.early, tt.expired, r.Reason)
			}
			for _, n := range tt.names {
				if !strings.Contains(r.Reason, n) {
					t.Errorf("reason %q does not name %s", r.Reason, n)
				}
			}
			// The run's verdict: the lock's invalid verdict comes first.
			rep := Check(context.Background(), in, tt.m)
			if rep.Lock != tt.want {
				t.Fatalf("lock verdict %v, want %v", rep.Lock, tt.want)
			}
		})
	}
}

// TestMutexReasonWords: the reason names both holders, their grants and
// the key in plain words.
func TestMutexReasonWords(t *testing.T) {
	in := NewInput(mutexHistory([]mhold{
		{id: 1, client: "c1", invoke: 0, acquired: 100, write: 1500, released: 1600},
		{id: 2, client: "c2", invoke: 50, acquired: 450, write: 600, released: 700},
	}, nil))
	r := Mutex{TTL: 2 * time.Second}.Check(context.Background(), in)
	want := "the lock broke mutual exclusion: c2 was granted k0 at 0.450 s while c1, granted it at 0.100 s, still held it (its lock certainly alive until 1.767 s, its release begun at 1.600 s)"
	if r.Reason != want {
		t.Fatalf("reason\n %q\nwant\n %q", r.Reason, want)
	}
	// The headline counts times as the report's lines do (here: from
	// 0.4 s), not in the reason's history seconds.
	head := mutexHeadline(r, shiftedFormat{from: 400 * ms})
	if want := "the lock gave a live lock away (c2 was granted k0 at t+0.050 while c1 still held it)"; head != want {
		t.Fatalf("headline\n %q\nwant\n %q", head, want)
	}
}

// shiftedFormat counts times from from, as a report counts them from the
// test phase's start.
type shiftedFormat struct {
	secondsFormat
	from int64
}

func (f shiftedFormat) At(t int64) string { return fmt.Sprintf("t+%.3f", float64(t-f.from)/1e9) }

// TestMutexUnknownTTL: without a TTL nothing is judged, and it says so.
func TestMutexUnknownTTL(t *testing.T) {
	in := NewInput(mutexHistory([]mhold{
		{id: 1, client: "c1", invoke: 0, acquired: 100, write: 1500, released: 1600},
		{id: 2, client: "c2", invoke: 50, acquired: 450, write: 600, released: 700},
	}, nil))
	r := Mutex{}.Check(context.Background(), in)
	if d := r.Details.(*MutexDetails); r.Verdict != Valid || !r.Vacuous || d.EarlyOverlaps != -1 || d.Overlaps != 1 {
		t.Fatalf("%+v %+v", r, d)
	}
}
