package node

import (
	"strings"
	"testing"
	"time"
)

func TestParseTime(t *testing.T) {
	tests := []struct {
		out  string
		want time.Time
		ok   bool
	}{
		{"1700000000\n123456\n", time.Unix(1700000000, 123456000), true},
		{"1700000000\r\n0\r\n", time.Unix(1700000000, 0), true},
		{"1700000000\n", time.Time{}, false},
		{"x\n1\n", time.Time{}, false},
		{"1\n1000000\n", time.Time{}, false},
		{"(error) ERR\n", time.Time{}, false},
	}
	for _, tt := range tests {
		got, err := parseTime([]byte(tt.out))
		if (err == nil) != tt.ok || !got.Equal(tt.want) {
			t.Errorf("parseTime(%q) = %v, %v; want %v ok=%v", tt.out, got, err, tt.want, tt.ok)
		}
	}
}

func TestCommandFor(t *testing.T) {
	for _, tt := range []struct {
		persistence string
		want        []string
		bad         bool
	}{
		{"", []string{"--appendonly no"}, false},
		{"none", []string{"--appendonly no"}, false},
		{"aof-always", []string{"--appendonly yes", "--appendfsync always", "--dir " + DataDir}, false},
		{"aof-everysec", []string{"--appendonly yes", "--appendfsync everysec"}, false},
		{"aof-no", []string{"--appendonly yes", "--appendfsync no", "--dir " + DataDir}, false},
		{"rdb", nil, true},
	} {
		c, err := ServerArgs(tt.persistence)
		if (err != nil) != tt.bad {
			t.Fatalf("%q: err %v", tt.persistence, err)
		}
		line := strings.Join(c, " ")
		for _, w := range tt.want {
			if !strings.Contains(line, w) {
				t.Errorf("%q: %q lacks %q", tt.persistence, line, w)
			}
		}
	}
}
