//go:build linux

package clockskew

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/internal/testenv"
)

// respConn is a minimal RESP client over loopback.
type respConn struct {
	c net.Conn
	r *bufio.Reader
}

// do sends a command and returns the reply: a string for simple and bulk
// strings, nil for a nil bulk string, []any for arrays, int64 for integers.
func (rc *respConn) do(args ...string) (any, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	rc.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := rc.c.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	return rc.read()
}

func (rc *respConn) read() (any, error) {
	l, err := rc.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	l = strings.TrimSuffix(l, "\r\n")
	if l == "" {
		return nil, fmt.Errorf("empty RESP line")
	}
	switch l[0] {
	case '+':
		return l[1:], nil
	case '-':
		return nil, fmt.Errorf("redis: %s", l[1:])
	case ':':
		return strconv.ParseInt(l[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(l[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rc.r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(l[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = rc.read(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("bad RESP line %q", l)
}

// redisTime returns Redis's TIME.
func (rc *respConn) redisTime() (time.Time, error) {
	v, err := rc.do("TIME")
	if err != nil {
		return time.Time{}, err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return time.Time{}, fmt.Errorf("TIME reply %v", v)
	}
	sec, err1 := strconv.ParseInt(a[0].(string), 10, 64)
	usec, err2 := strconv.ParseInt(a[1].(string), 10, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, fmt.Errorf("TIME reply %v", v)
	}
	return time.Unix(sec, usec*1000), nil
}

// TestShimRedis runs redis-server (jemalloc-linked, the case libfaketime
// deadlocks on) under the shim and makes a key expire early.
func TestShimRedis(t *testing.T) {
	server, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server not installed (CI=true requires it: apt-get install -y redis-server)")
		}
		t.Skip("redis-server not installed; apt-get install -y redis-server to run this test (required when CI=true)")
	}
	lib := buildShim(t)
	ctl := filepath.Join(t.TempDir(), "clock")
	c, err := makeControlFile(ctl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Set(Offsets{Realtime: time.Hour}); err != nil {
		t.Fatal(err)
	}

	var rc *respConn
	var cmd *exec.Cmd
	var stderr strings.Builder
	for attempt := 0; rc == nil; attempt++ {
		port := testenv.FreePorts(t, 1)[0]
		cmd = exec.Command(server, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", t.TempDir(), "--logfile", "")
		cmd.Env = append(os.Environ(), shimEnv(lib, ctl)...)
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		deadline := time.Now().Add(20 * time.Second)
		for rc == nil && time.Now().Before(deadline) {
			select {
			case err := <-exited:
				if attempt < 3 && strings.Contains(stderr.String(), "Address already in use") {
					t.Logf("port %d taken; retrying", port)
				} else {
					t.Fatalf("redis-server exited: %v\n%s", err, stderr.String())
				}
				deadline = time.Time{}
				continue
			default:
			}
			conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			rc = &respConn{c: conn, r: bufio.NewReader(conn)}
		}
		if rc == nil && !deadline.IsZero() {
			cmd.Process.Kill()
			t.Fatalf("redis-server did not accept connections\n%s", stderr.String())
		}
		if rc != nil {
			t.Cleanup(func() {
				rc.c.Close()
				cmd.Process.Kill()
				<-exited
			})
		}
	}

	checkTime := func(want time.Duration) {
		t.Helper()
		got, err := rc.redisTime()
		if err != nil {
			t.Fatal(err)
		}
		if sk := got.Sub(trueNow()); !near(sk, want, time.Second) {
			t.Fatalf("redis TIME skew %s, want %s", sk, want)
		} else {
			t.Logf("redis TIME skew %s (want %s)", sk.Round(time.Millisecond), want)
		}
	}
	checkTime(time.Hour)
	if err := c.Set(Offsets{Realtime: -30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	checkTime(-30 * time.Second)
	checkSelfUnskewed(t)

	// The fault the harness needs: a key with a 5s TTL expires at once
	// when Redis's clock jumps 10s.
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	checkTime(0)
	if v, err := rc.do("SET", "k", "v", "PX", "5000"); err != nil || v != "OK" {
		t.Fatalf("SET = %v, %v", v, err)
	}
	if v, err := rc.do("GET", "k"); err != nil || v != "v" {
		t.Fatalf("GET before the jump = %v, %v", v, err)
	}
	if err := c.Set(Offsets{Realtime: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if v, err := rc.do("GET", "k"); err != nil || v != nil {
		t.Fatalf("GET after +10s = %v, %v; want nil (expired early)", v, err)
	}
	t.Logf("key expired early, %s after the clock jump (TTL was 5s)", time.Since(start).Round(time.Microsecond))
	if v, err := rc.do("PING"); err != nil || v != "PONG" {
		t.Fatalf("PING = %v, %v", v, err)
	}
}
