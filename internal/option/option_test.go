package option_test

import (
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
)

var (
	expiry = option.Enum("expiry", "who expires a lock", "ttl", "client", "none")
	delay  = option.Duration("delay", "a wait", 200*time.Millisecond, 0, 5*time.Second)
	wait   = option.Int("wait", "replicas", 0, 0, 2)
	lag    = option.Int("lag", "seconds", 10, 1, int(^uint(0)>>1))
	idle   = option.Text("idle", "a number", "", func(v string) error {
		if strings.Trim(v, "0123456789") != "" {
			return errNotNumber
		}
		return nil
	})
	known = option.Decls(expiry, delay, wait, lag, idle)
)

type constErr string

func (e constErr) Error() string { return string(e) }

const errNotNumber = constErr("want a number")

// TestParse: every setting is checked against its declaration once, and
// the error names the setting, its owner and what is accepted.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		raw map[string]string
		err string
	}{
		{nil, ""},
		{map[string]string{"expiry": "none", "delay": "1s", "wait": "2", "lag": "3", "idle": "42"}, ""},
		{map[string]string{"expiry": "never"}, `option expiry="never" for target t: want one of ttl, client, none`},
		{map[string]string{"delay": "soon"}, `option delay="soon" for target t: want a duration such as 200ms`},
		{map[string]string{"delay": "6s"}, `option delay="6s" for target t: want a duration from 0s to 5s`},
		{map[string]string{"delay": "-1s"}, `want a duration from 0s to 5s`},
		{map[string]string{"wait": "3"}, `option wait="3" for target t: want a whole number from 0 to 2`},
		{map[string]string{"lag": "0"}, `want a whole number of at least 1`},
		{map[string]string{"idle": "1; DROP"}, `option idle="1; DROP" for target t: want a number`},
		{map[string]string{"expiry": "none", "expirey": "none"}, "unknown option expirey for target t (known: expiry, delay, wait, lag, idle)"},
	} {
		set, err := option.Parse(known, tc.raw, "option", "target t")
		if tc.err == "" {
			if err != nil || len(set) != len(tc.raw) {
				t.Errorf("Parse(%v) = %v, %v", tc.raw, set, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Parse(%v): %v, want %q", tc.raw, err, tc.err)
		}
	}
	if _, err := option.Parse(nil, map[string]string{"x": "1"}, "--store-opt", "store b"); err == nil || err.Error() != "--store-opt x: store b takes none" {
		t.Errorf("no options: %v", err)
	}
}

// TestGet: the typed value of a parsed set, or the declaration's default.
func TestGet(t *testing.T) {
	set, err := option.Parse(known, map[string]string{"expiry": "client", "delay": "1.5s", "wait": "1"}, "option", "t")
	if err != nil {
		t.Fatal(err)
	}
	if v := expiry.Get(set); v != "client" {
		t.Errorf("expiry %q", v)
	}
	if v := delay.Get(set); v != 1500*time.Millisecond {
		t.Errorf("delay %v", v)
	}
	if v := wait.Get(set); v != 1 {
		t.Errorf("wait %d", v)
	}
	if v, ok := lag.Lookup(set); v != 10 || ok {
		t.Errorf("lag %d %v, want the default, not given", v, ok)
	}
	if v := expiry.Get(nil); v != "ttl" {
		t.Errorf("default expiry %q", v)
	}
	defer func() {
		if recover() == nil {
			t.Error("a value its declaration refuses was read")
		}
	}()
	wait.Get(option.Set{"wait": "many"})
}

// TestParts: Only and Without part a set by declarations.
func TestParts(t *testing.T) {
	set := option.Set{"expiry": "none", "wait": "1", "other": "x"}
	own := set.Only(option.Decls(wait))
	rest := set.Without(option.Decls(wait))
	if len(own) != 1 || own["wait"] != "1" || len(rest) != 2 || rest["expiry"] != "none" || rest["other"] != "x" {
		t.Errorf("only %v, without %v", own, rest)
	}
	if s := set.Only(option.Decls(delay)); s != nil {
		t.Errorf("only of none: %v", s)
	}
}

// TestUsage: help texts show choices, or the default.
func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		d    option.Declarer
		want string
	}{
		{expiry, "expiry=ttl|client|none"},
		{delay, "delay (default 200ms)"},
		{idle, "idle"},
		{option.Duration("max", "", 0, 0, 0).Described("the lease TTL"), "max (default the lease TTL)"},
	} {
		if got := tc.d.Decl().Usage(); got != tc.want {
			t.Errorf("usage %q, want %q", got, tc.want)
		}
	}
}
