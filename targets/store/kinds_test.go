package store

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
)

func TestKinds(t *testing.T) {
	if _, err := Lookup(""); err != nil {
		t.Fatalf("the default store: %v", err)
	}
	if _, err := Lookup("mysql"); err == nil || !strings.Contains(err.Error(), "known: "+Builtin) {
		t.Fatalf("unknown store: %v", err)
	}
	k := Kind{Name: "t", Options: option.Decls(option.Enum("check", "", "token", "version"))}
	for _, tc := range []struct {
		opts map[string]string
		err  string
	}{
		{nil, ""},
		{map[string]string{"check": "version"}, ""},
		{map[string]string{"check": "row"}, "want one of token, version"},
		{map[string]string{"mode": "x"}, "unknown --store-opt mode for store t (known: check)"},
	} {
		set, err := k.ParseOptions(tc.opts)
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseOptions(%v) = %v, want %q", tc.opts, err, tc.err)
		}
		if err == nil && !maps.Equal(set, option.Set(tc.opts)) {
			t.Errorf("ParseOptions(%v) = %v", tc.opts, set)
		}
	}
	if _, err := (Kind{Name: "b"}).ParseOptions(map[string]string{"check": "token"}); err == nil || !strings.Contains(err.Error(), "takes none") {
		t.Errorf("a store without options took one: %v", err)
	}
	c, err := Dial(Builtin, "127.0.0.1:1", time.Second, nil)
	if _, ok := c.(*Client); err != nil || !ok {
		t.Fatalf("Dial(builtin) = %T, %v", c, err)
	}
}
