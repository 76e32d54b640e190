package pgserver

import (
	"flag"
	"slices"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string // a word of the error, "" for none
	}{
		{"default", func(*Config) {}, ""},
		{"relative data dir", func(c *Config) { c.DataDir = "data" }, "--data-dir"},
		{"port 0", func(c *Config) { c.Port = 0 }, "--port 0"},
		{"port too high", func(c *Config) { c.Port = 70000 }, "--port 70000"},
		{"setting", func(c *Config) { c.Settings["idle_session_timeout"] = "5s" }, ""},
		{"dotted setting", func(c *Config) { c.Settings["auto_explain.log_min_duration"] = "0" }, ""},
		{"bad setting name", func(c *Config) { c.Settings["Bad-Name"] = "1" }, "--set Bad-Name"},
		{"injected line", func(c *Config) { c.Settings["work_mem"] = "1MB\nfsync=off" }, "one-line value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mutate(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// TestArgv: the durable defaults come first and the settings after them,
// sorted, so that a setting overrides a default.
func TestArgv(t *testing.T) {
	c := DefaultConfig()
	c.Port = 6000
	c.Settings["synchronous_commit"] = "off"
	c.Settings["a_setting"] = "x"
	argv := c.Argv()
	if argv[0] != BinDir+"/postgres" || argv[1] != "-D" || argv[2] != DataDir {
		t.Fatalf("argv starts %q", argv[:3])
	}
	idx := func(s string) int { return slices.Index(argv, s) }
	for _, must := range []string{"port=6000", "fsync=on", "synchronous_commit=on", "listen_addresses=*"} {
		if i := idx(must); i < 0 || argv[i-1] != "-c" {
			t.Errorf("argv lacks -c %s: %q", must, argv)
		}
	}
	a, off, on := idx("a_setting=x"), idx("synchronous_commit=off"), idx("synchronous_commit=on")
	if a < 0 || off < 0 || !(on < a && a < off) {
		t.Fatalf("settings must follow the defaults, sorted: %q", argv)
	}
}

func TestCommandAndFlags(t *testing.T) {
	cmd := Command("/usr/local/bin/splitbrain", "postgres-server", map[string]string{"wait_timeout": "5", "a": "1=2"})
	want := []string{"/usr/local/bin/splitbrain", "postgres-server", "--data-dir", DataDir, "--set", "a=1=2", "--set", "wait_timeout=5"}
	if !slices.Equal(cmd, want) {
		t.Fatalf("Command = %q, want %q", cmd, want)
	}
	// The command line parses back, through Flags, into the same settings.
	fs := flag.NewFlagSet("postgres-server", flag.ContinueOnError)
	check, _ := Flags(fs)
	if err := fs.Parse(cmd[2:]); err != nil {
		t.Fatal(err)
	}
	if err := check(); err != nil {
		t.Fatal(err)
	}
	if got := fs.Lookup("set").Value.String(); got != "a=1=2,wait_timeout=5" {
		t.Fatalf("--set parsed to %q", got)
	}
	bad := flag.NewFlagSet("x", flag.ContinueOnError)
	bad.SetOutput(new(strings.Builder))
	Flags(bad)
	if err := bad.Parse([]string{"--set", "novalue"}); err == nil || !strings.Contains(err.Error(), "NAME=VALUE") {
		t.Fatalf("--set without '=': %v", err)
	}
	rel := flag.NewFlagSet("x", flag.ContinueOnError)
	check, _ = Flags(rel)
	if err := rel.Parse([]string{"--data-dir", "rel"}); err != nil {
		t.Fatal(err)
	}
	if err := check(); err == nil {
		t.Fatal("a relative --data-dir passed the check")
	}
}

func TestConnString(t *testing.T) {
	for _, tc := range []struct{ endpoint, want string }{
		{"10.0.0.5:6000", "host=10.0.0.5 port=6000 "},
		{"10.0.0.5", "host=10.0.0.5 port=5432 "},
	} {
		got := ConnString(tc.endpoint, "c1")
		if !strings.HasPrefix(got, tc.want) || !strings.HasSuffix(got, "user=postgres dbname=postgres sslmode=disable application_name=c1") {
			t.Errorf("ConnString(%q) = %q", tc.endpoint, got)
		}
	}
}
