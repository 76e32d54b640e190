package server

import (
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	peers := "n1=10.0.0.11:7001,n2=10.0.0.12:7001,n3=10.0.0.13:7001"
	base := []string{"--id", "n1", "--peers", peers}
	tests := []struct {
		name    string
		args    []string
		wantErr []string // substrings; nil means success
		check   func(t *testing.T, c Config)
	}{
		{"minimal", base, nil, func(t *testing.T, c Config) {
			want := []Peer{{"n1", "10.0.0.11:7001"}, {"n2", "10.0.0.12:7001"}, {"n3", "10.0.0.13:7001"}}
			if !reflect.DeepEqual(c.Peers, want) {
				t.Fatalf("peers %+v", c.Peers)
			}
			if c.raftBind() != "10.0.0.11:7001" || c.httpAdvertise() != "10.0.0.11:7002" {
				t.Fatalf("raft bind %q, http advertise %q", c.raftBind(), c.httpAdvertise())
			}
			d := DefaultConfig()
			if c.MaxTTL != d.MaxTTL || c.LockDelay != 0 || c.DataDir != d.DataDir {
				t.Fatalf("defaults not kept: %+v", c)
			}
		}},
		{"everything", append(append([]string(nil), base...),
			"--raft-addr", "0.0.0.0:7001", "--http-addr", ":8080", "--http-advertise", "lockd1:8080",
			"--data-dir", "/data", "--max-ttl", "30s", "--default-ttl", "3s", "--lease-margin", "2s",
			"--lock-delay", "1s", "--max-wait", "4s", "--apply-timeout", "1s", "--expiry-interval", "20ms",
			"--heartbeat-timeout", "500ms", "--election-timeout", "600ms", "--leader-lease-timeout", "250ms",
			"--commit-timeout", "10ms", "--snapshot-interval", "1m", "--snapshot-threshold", "100", "--snapshot-retain", "3"),
			nil, func(t *testing.T, c Config) {
				if c.raftBind() != "0.0.0.0:7001" || c.httpAdvertise() != "lockd1:8080" || c.DataDir != "/data" ||
					c.MaxTTL != 30*time.Second || c.DefaultTTL != 3*time.Second || c.LeaseMargin != 2*time.Second ||
					c.LockDelay != time.Second || c.MaxWait != 4*time.Second || c.ApplyTimeout != time.Second ||
					c.ExpiryInterval != 20*time.Millisecond || c.HeartbeatTimeout != 500*time.Millisecond ||
					c.ElectionTimeout != 600*time.Millisecond || c.LeaderLeaseTimeout != 250*time.Millisecond ||
					c.CommitTimeout != 10*time.Millisecond || c.SnapshotInterval != time.Minute ||
					c.SnapshotThreshold != 100 || c.SnapshotRetain != 3 {
					t.Fatalf("config %+v", c)
				}
			}},
		{"nothing", nil, []string{"--id is required", "--peers is required"}, nil},
		{"id not a peer", []string{"--id", "n4", "--peers", peers}, []string{`"n4" is not one of --peers`}, nil},
		{"duplicate id", []string{"--id", "n1", "--peers", "n1=10.0.0.11:7001,n1=10.0.0.12:7001"}, []string{`id "n1" appears twice`}, nil},
		{"duplicate address", []string{"--id", "n1", "--peers", "n1=10.0.0.11:7001,n2=10.0.0.11:7001"}, []string{"appears twice"}, nil},
		{"peer syntax", []string{"--id", "n1", "--peers", "n1"}, []string{"not id=host:port"}, nil},
		{"peer without port", []string{"--id", "n1", "--peers", "n1=10.0.0.11"}, []string{"not host:port"}, nil},
		{"bad port", append(append([]string(nil), base...), "--http-addr", ":http"), []string{"--http-addr", "bad port"}, nil},
		{"default ttl above max", append(append([]string(nil), base...), "--max-ttl", "1s", "--default-ttl", "2s"), []string{"--default-ttl"}, nil},
		{"negative lock delay", append(append([]string(nil), base...), "--lock-delay", "-1s"), []string{"--lock-delay must not be negative"}, nil},
		{"raft timing", append(append([]string(nil), base...), "--heartbeat-timeout", "100ms", "--leader-lease-timeout", "200ms"), []string{"raft timing"}, nil},
		{"unknown flag", append(append([]string(nil), base...), "--bogus"), []string{"bogus"}, nil},
		{"stray argument", append(append([]string(nil), base...), "extra"), []string{"unexpected arguments"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseFlags(tt.args)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("ParseFlags: %v", err)
				}
				tt.check(t, cfg)
				return
			}
			if err == nil {
				t.Fatalf("ParseFlags succeeded, want an error with %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestParseFlagsHelp(t *testing.T) {
	if _, err := ParseFlags([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
}

func TestRegisterFlagsOnAFlagSet(t *testing.T) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--id=n2", "--peers=n1=127.0.0.1:1,n2=127.0.0.1:2", "--lock-delay=2s"}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.ID != "n2" || len(cfg.Peers) != 2 || cfg.LockDelay != 2*time.Second || fs.Lookup("peers").Value.String() != "n1=127.0.0.1:1,n2=127.0.0.1:2" {
		t.Fatalf("config %+v", cfg)
	}
}

func TestHTTPAdvertise(t *testing.T) {
	peers := []Peer{{"n1", "10.0.0.11:7001"}}
	tests := []struct{ httpAddr, advertise, want string }{
		{":7002", "", "10.0.0.11:7002"},
		{"0.0.0.0:7002", "", "10.0.0.11:7002"},
		{"[::]:7002", "", "10.0.0.11:7002"},
		{"10.0.0.99:7002", "", "10.0.0.99:7002"},
		{":7002", "lockd1:80", "lockd1:80"},
	}
	for _, tt := range tests {
		c := Config{ID: "n1", Peers: peers, HTTPAddr: tt.httpAddr, HTTPAdvertise: tt.advertise}
		if got := c.httpAdvertise(); got != tt.want {
			t.Errorf("httpAdvertise(%q, %q) = %q, want %q", tt.httpAddr, tt.advertise, got, tt.want)
		}
	}
}
