package wire

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

func TestMillis(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0},
		{0, 0},
		{time.Nanosecond, 1}, // a remaining time is never rounded to nothing
		{time.Millisecond, 1},
		{time.Millisecond + time.Nanosecond, 2},
		{1999 * time.Microsecond, 2},
		{5 * time.Second, 5000},
	} {
		if got := Millis(tc.d); got != tc.want {
			t.Errorf("Millis(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// TestJSON pins the wire format: the field names the server writes and the
// client reads, and the fields left out when empty.
func TestJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"acquire", AcquireRequest{Key: "k", Owner: "c1", TTLMillis: 2000, WaitMillis: 50}, `{"key":"k","owner":"c1","ttl_ms":2000,"wait_ms":50}`},
		{"acquire defaults", AcquireRequest{Key: "k", Owner: "c1"}, `{"key":"k","owner":"c1"}`},
		{"lease", LeaseRequest{Key: "k", Owner: "c1", Token: 7}, `{"key":"k","owner":"c1","token":7}`},
		{"granted", LeaseResponse{Key: "k", Owner: "c1", Token: 7, TTLMillis: 2000}, `{"key":"k","owner":"c1","token":7,"ttl_ms":2000,"renewed":false}`},
		{"released", ReleaseResponse{Key: "k", Token: 7, Released: true}, `{"key":"k","token":7,"released":true}`},
		{"free lock", LockResponse{Key: "k", LastToken: 7}, `{"key":"k","held":false,"lock_delay":false,"last_token":7}`},
		{"held lock", LockResponse{Key: "k", Held: true, Owner: "c1", Token: 8, TTLMillis: 2000, RemainingMillis: 1500, LastToken: 8},
			`{"key":"k","held":true,"owner":"c1","token":8,"ttl_ms":2000,"remaining_ms":1500,"lock_delay":false,"last_token":8}`},
		{"lock delay", LockResponse{Key: "k", LockDelay: true, DelayRemainingMillis: 300},
			`{"key":"k","held":false,"lock_delay":true,"delay_remaining_ms":300}`},
		{"status", StatusResponse{ID: "n1", Version: "v", State: "Leader", LeaderID: "n1", Term: 2, LastIndex: 9, CommitIndex: 9, AppliedIndex: 9, Ready: true},
			`{"id":"n1","version":"v","state":"Leader","leader_id":"n1","term":2,"last_index":9,"commit_index":9,"applied_index":9,"ready":true}`},
		{"health", HealthResponse{OK: false, State: "Candidate", Reason: "no leader"}, `{"ok":false,"state":"Candidate","reason":"no leader"}`},
		{"held error", ErrorResponse{Error: CodeLockHeld, Message: "held", Token: 7, RemainingMillis: 900},
			`{"error":"lock_held","message":"held","token":7,"remaining_ms":900}`},
		{"not leader", ErrorResponse{Error: CodeNotLeader, Message: "m", LeaderID: "n2", LeaderAddr: "10.0.0.2:7002"},
			`{"error":"not_leader","message":"m","leader_id":"n2","leader_addr":"10.0.0.2:7002"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Fatalf("encoded\n %s\nwant\n %s", b, tc.want)
			}
			back := reflect.New(reflect.TypeOf(tc.v))
			if err := json.Unmarshal(b, back.Interface()); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back.Elem().Interface(), tc.v) {
				t.Fatalf("round trip: %+v, want %+v", back.Elem().Interface(), tc.v)
			}
		})
	}
}

// TestCodes: every error code is distinct (a client tells them apart).
func TestCodes(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range []string{CodeLockHeld, CodeLockDelay, CodeNotOwner, CodeNotLeader, CodeUnavailable, CodeBadRequest, CodeInternal} {
		if c == "" || seen[c] {
			t.Fatalf("code %q empty or repeated", c)
		}
		seen[c] = true
	}
}
