package postgres

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/splitbrain/splitbrain/targets"

	"github.com/splitbrain/splitbrain/internal/option"
)

func TestSettings(t *testing.T) {
	tests := []struct {
		name string
		opts map[string]string
		want map[string]string
		err  string
	}{
		{"none", nil, map[string]string{}, ""},
		{"recipe options are not server settings", map[string]string{"lock": "xact", "timeout": "none"}, map[string]string{}, ""},
		{"keepalives", map[string]string{"tcp_keepalives_idle": "1", "tcp_user_timeout": "2000", "lock": "try"},
			map[string]string{"tcp_keepalives_idle": "1", "tcp_user_timeout": "2000"}, ""},
		{"a duration", map[string]string{"idle_session_timeout": "5s"}, map[string]string{"idle_session_timeout": "5s"}, ""},
		{"not a number", map[string]string{"tcp_keepalives_idle": "1; DROP"}, nil, "want a number"},
		{"durability", map[string]string{"fsync": "off", "synchronous_commit": "off", "lock": "try"},
			map[string]string{"fsync": "off", "synchronous_commit": "off"}, ""},
		{"fsync neither on nor off", map[string]string{"fsync": "sometimes"}, nil, "want one of on, off"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set, err := option.Parse(append(ServerSettings(), LockMode.Decl(), Timeout.Decl()), tc.opts, "option", "target postgres")
			got := Settings(set)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || len(got) != len(tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("%s=%q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestCommand(t *testing.T) {
	got := Command(map[string]string{"tcp_keepalives_idle": "1", "tcp_keepalives_count": "2"})
	want := []string{"postgres", "--data-dir", "/var/lib/postgresql/splitbrain", "--set", "tcp_keepalives_count=2", "--set", "tcp_keepalives_idle=1"}
	if !slices.Equal(got[1:], want) {
		t.Fatalf("command %q, want ... %q", got, want)
	}
}

// TestRecipeOptions: the recipe's options are checked when a run is
// planned (unknown values refused) and again by the factory.
func TestRecipeOptions(t *testing.T) {
	b, err := targets.Lookup(Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opts map[string]string
		ok   bool
	}{
		{map[string]string{"lock": "session"}, true},
		{map[string]string{"lock": "xact", "timeout": "none"}, true},
		{map[string]string{"lock": "try", "tcp_keepalives_idle": "1"}, true},
		{map[string]string{"lock": "advisory"}, false},
		{map[string]string{"timeout": "forever"}, false},
		{map[string]string{"expiry": "none"}, false},
	} {
		if err := b.CheckOptions(tc.opts); (err == nil) != tc.ok {
			t.Errorf("CheckOptions(%v) = %v, want ok=%v", tc.opts, err, tc.ok)
		}
	}
	cfg := targets.RecipeConfig{Kind: Name, Endpoints: []string{"127.0.0.1:5432"}, TTL: targets.Duration(2e9)}
	for _, tc := range []struct {
		opts map[string]string
		err  string
	}{
		{map[string]string{"lock": "advisory"}, "want one of session, xact, try"},
		{map[string]string{"timeout": "forever"}, "want one of ttl, none"},
	} {
		cfg.Options = tc.opts
		r, err := targets.LookupRecipe(Name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Factory()(context.Background(), cfg, "c1", nil); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("NewLocker(%v) = %v, want %q", tc.opts, err, tc.err)
		}
	}
	cfg.Options, cfg.TTL = nil, 0
	if _, err := NewLocker(context.Background(), cfg, "c1", nil); err == nil {
		t.Error("timeout=ttl without a TTL accepted")
	}
}

func TestLockIDStable(t *testing.T) {
	if LockID("k0") != LockID("k0") || LockID("k0") == LockID("k1") {
		t.Fatal("lock ids not a function of the key")
	}
}
