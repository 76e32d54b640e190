package agent

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
)

// TestSendEventIsJSON: the hand-written event line is byte for byte the
// line encoding/json makes of the same Response.
func TestSendEventIsJSON(t *testing.T) {
	for _, tc := range []struct {
		name  string
		id    int64
		ev    string
		mono  int64
		token uint64
	}{
		{"acquired", 7, EvAcquired, 123456789, 42},
		{"write, no token", 1, EvWrite, 5, 0},
		{"no time", 3, EvWrite, 0, 0},
		{"extremes", math.MaxInt64, EvAcquired, math.MaxInt64, math.MaxUint64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got, want bytes.Buffer
			a := &agent{out: &got}
			a.sendEvent(tc.id, tc.ev, tc.mono, tc.token)
			a.sendEvent(tc.id, tc.ev, tc.mono, tc.token) // the buffer is reused
			enc := json.NewEncoder(&want)
			for range 2 {
				if err := enc.Encode(Response{Type: RespEvent, ID: tc.id, Ev: tc.ev, Mono: tc.mono, Token: tc.token}); err != nil {
					t.Fatal(err)
				}
			}
			if got.String() != want.String() {
				t.Errorf("got  %q\nwant %q", got.String(), want.String())
			}
		})
	}
}
