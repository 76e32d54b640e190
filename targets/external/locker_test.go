package external_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/external"
)

// The test binary doubles as a fake adapter: with FAKE_ADAPTER set it
// speaks the protocol on stdin/stdout, misbehaving as the mode says; with
// SERVE_RECIPE set it serves that shipped recipe (conformance_test.go).
func TestMain(m *testing.M) {
	if mode := os.Getenv("FAKE_ADAPTER"); mode != "" {
		os.Exit(fakeAdapter(mode))
	}
	if kind := os.Getenv("SERVE_RECIPE"); kind != "" {
		os.Exit(serveRecipe(kind))
	}
	os.Exit(m.Run())
}

func fakeAdapter(mode string) int {
	out := bufio.NewWriter(os.Stdout)
	send := func(v any) {
		b, _ := json.Marshal(v)
		out.Write(append(b, '\n'))
		out.Flush()
	}
	held := map[string]string{} // key → lease
	var token uint64
	acquires := 0
	// firstLife says this is the adapter's first life (FAKE_MARK names a
	// file the first life creates); without a mark, every life is.
	firstLife := true
	if mark := os.Getenv("FAKE_MARK"); mark != "" && mode != "die" {
		if _, err := os.Stat(mark); err == nil {
			firstLife = false
		}
		os.WriteFile(mark, nil, 0o644)
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var req external.Request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "bad request:", err)
			return 2
		}
		if req.Key != "" {
			fmt.Fprintf(os.Stderr, "read %s %s %d\n", req.Type, req.Key, req.ID)
		}
		if req.Type == external.TypeAcquire {
			acquires++
			switch {
			case mode == "lateonce" && acquires == 1:
				// Single-threaded, like the protocol's example: busy
				// with this request past its deadline, it reads nothing
				// else meanwhile.
				time.Sleep(time.Duration(req.DeadlineMillis)*time.Millisecond + 600*time.Millisecond)
			case mode == "silent" && acquires == 1 && firstLife:
				continue // never answers
			}
		}
		switch req.Type {
		case external.TypeHello:
			send(map[string]any{"id": req.ID, "type": "hello_ok", "protocol": 1, "library": "fake", "version": "0.1", "language": "go",
				"offers": map[string]any{"token": true, "renew": false, "checked_release": true, "held": true}})
		case external.TypeAcquire:
			switch {
			case mode == "garbage" && token == 0 && firstLife:
				token++
				fmt.Fprintln(os.Stdout, "acquiring lock...")
				continue
			case mode == "late":
				time.Sleep(time.Duration(req.DeadlineMillis)*time.Millisecond + 600*time.Millisecond)
			case mode == "die" && os.Getenv("FAKE_MARK") != "":
				if _, err := os.Stat(os.Getenv("FAKE_MARK")); err != nil {
					os.WriteFile(os.Getenv("FAKE_MARK"), nil, 0o644)
					fmt.Fprintln(os.Stderr, "boom: cannot reach the lock")
					return 3
				}
			}
			if _, busy := held[req.Key]; busy {
				time.Sleep(time.Duration(req.DeadlineMillis) * time.Millisecond / 2)
				send(map[string]any{"id": req.ID, "type": "busy"})
				continue
			}
			token++
			lease := fmt.Sprintf("L%d", token)
			held[req.Key] = lease
			if mode == "notoken" {
				send(map[string]any{"id": req.ID, "type": "granted", "lease": lease})
				continue
			}
			send(map[string]any{"id": req.ID, "type": "granted", "lease": lease, "token": token})
		case external.TypeRelease:
			fmt.Fprintln(os.Stderr, "release", req.Key, req.Lease)
			if mode == "dieonrelease" {
				return 4
			}
			if held[req.Key] != req.Lease {
				send(map[string]any{"id": req.ID, "type": "not_owner"})
				continue
			}
			delete(held, req.Key)
			send(map[string]any{"id": req.ID, "type": "ok"})
		case external.TypeHeld:
			send(map[string]any{"id": req.ID, "type": "held", "held": held[req.Key] == req.Lease})
		case external.TypeClose:
			send(map[string]any{"id": req.ID, "type": "closed"})
			return 0
		default:
			send(map[string]any{"id": req.ID, "type": "error", "message": "unsupported"})
		}
	}
	return 0
}

// logSink collects log messages.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) Enabled(context.Context, slog.Level) bool { return true }
func (s *logSink) Handle(_ context.Context, r slog.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	line := r.Message
	r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	s.lines = append(s.lines, line)
	return nil
}
func (s *logSink) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s *logSink) WithGroup(string) slog.Handler      { return s }
func (s *logSink) has(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

func start(t *testing.T, mode string, env ...string) (*external.Locker, *logSink) {
	t.Helper()
	sink := &logSink{}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l, err := external.Start(context.Background(), external.Config{
		Command: "exec " + exe, Env: append([]string{"FAKE_ADAPTER=" + mode}, env...),
		Client: "c1", Backend: "fake", TTL: time.Second, Log: slog.New(sink),
	})
	if err != nil {
		t.Fatalf("start %s adapter: %v", mode, err)
	}
	t.Cleanup(func() { l.Close() })
	return l, sink
}

func acquire(t *testing.T, l *external.Locker, key string, d time.Duration) (targets.Lease, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return l.Acquire(ctx, key)
}

func TestGoodAdapter(t *testing.T) {
	l, _ := start(t, "good")
	info := l.Describe()
	if info.Library != "fake" || info.Version != "0.1" || !info.Fencing || !info.CheckedRelease || info.Recipe != "external" {
		t.Fatalf("describe: %+v", info)
	}
	a, err := acquire(t, l, "k", time.Second)
	if err != nil || a.Token() != 1 {
		t.Fatalf("acquire: %v (token %v)", err, a)
	}
	if _, err := acquire(t, l, "k", 400*time.Millisecond); !errors.Is(err, targets.ErrBusy) {
		t.Fatalf("second acquire: %v, want busy", err)
	}
	if held, err := a.(*external.Lease).Held(context.Background()); err != nil || !held {
		t.Fatalf("held: %v %v", held, err)
	}
	if err := a.Release(context.Background()); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := a.Release(context.Background()); !errors.Is(err, targets.ErrNotOwner) {
		t.Fatalf("second release: %v, want not owner", err)
	}
	b, err := acquire(t, l, "k", time.Second)
	if err != nil || b.Token() != 2 {
		t.Fatalf("re-acquire: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func TestGarbageIsAProtocolError(t *testing.T) {
	l, sink := start(t, "garbage", "FAKE_MARK="+t.TempDir()+"/garbled")
	_, err := acquire(t, l, "k", time.Second)
	if targets.ErrorKind(err) != history.ErrClientProtocol || !strings.Contains(err.Error(), "acquiring lock...") {
		t.Fatalf("acquire: %v (kind %q), want a protocol error quoting the line", err, targets.ErrorKind(err))
	}
	// The garbled request was never answered: the next one for the key
	// waits for its answer, in vain, and the adapter is restarted.
	if _, err := acquire(t, l, "k", time.Second); targets.ErrorKind(err) != history.ErrClientTimeout {
		t.Fatalf("second acquire: %v, want a client timeout (not sent)", err)
	}
	if _, err := acquire(t, l, "k", 5*time.Second); err != nil || l.Lives() != 2 {
		t.Fatalf("the run goes on with a new adapter: %v (lives %d)", err, l.Lives())
	}
	if !sink.has("broke the protocol") {
		t.Error("no warning logged")
	}
}

func TestLateReplyTimesOutAndIsGivenBack(t *testing.T) {
	l, sink := start(t, "late")
	start := time.Now()
	_, err := acquire(t, l, "k", time.Second)
	if targets.ErrorKind(err) != history.ErrClientTimeout {
		t.Fatalf("acquire: %v, want a client timeout", err)
	}
	if took := time.Since(start); took > 1100*time.Millisecond {
		t.Fatalf("the deadline was not kept: %v", took)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !sink.has("release k L1") || !sink.has("late reply") {
		if time.Now().After(deadline) {
			t.Fatalf("the late grant was not given back: %v", sink.lines)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLateAnswerIsAwaited: after a client-side timeout the adapter gets no
// other request for the key until it has answered the late one (and the
// late grant was given back): the next acquire waits for the answer, then
// is sent and granted. The adapter logs each request as it reads it.
func TestLateAnswerIsAwaited(t *testing.T) {
	l, sink := start(t, "lateonce")
	if _, err := acquire(t, l, "k", time.Second); targets.ErrorKind(err) != history.ErrClientTimeout {
		t.Fatalf("first acquire: %v, want a client timeout", err)
	}
	s, err := acquire(t, l, "k", 5*time.Second)
	if err != nil {
		t.Fatalf("second acquire: %v, want it granted once the late answer came", err)
	}
	defer s.Release(context.Background())
	if s.Token() != 2 || l.Lives() != 1 {
		t.Fatalf("token %d, lives %d: want the second grant of the same adapter", s.Token(), l.Lives())
	}
	// stderr is read apart from stdout: wait for the last line.
	for end := time.Now().Add(3 * time.Second); !sink.has("read acquire k 4") && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	var order []string
	for _, line := range sink.lines {
		for _, w := range []string{"read acquire k 2", "read release k 3", "read acquire k 4", "release k L1"} {
			if strings.Contains(line, w) && !slices.Contains(order, w) {
				order = append(order, w)
			}
		}
	}
	want := []string{"read acquire k 2", "read release k 3", "release k L1", "read acquire k 4"}
	if !slices.Equal(order, want) {
		t.Fatalf("the adapter read %v, want %v (the late grant given back before the next acquire)\n%s", order, want, strings.Join(sink.lines, "\n"))
	}
}

// TestSilentAdapterIsRestarted: an adapter that never answers keeps its
// key: the next request for it is not sent, fails when its own deadline
// passes, and the adapter is restarted; the one after is granted.
func TestSilentAdapterIsRestarted(t *testing.T) {
	l, sink := start(t, "silent", "FAKE_MARK="+t.TempDir()+"/silent")
	if _, err := acquire(t, l, "k", 500*time.Millisecond); targets.ErrorKind(err) != history.ErrClientTimeout {
		t.Fatalf("first acquire: %v, want a client timeout", err)
	}
	_, err := acquire(t, l, "k", 500*time.Millisecond)
	if targets.ErrorKind(err) != history.ErrClientTimeout || !strings.Contains(err.Error(), "not sent") {
		t.Fatalf("second acquire: %v, want a client timeout, not sent", err)
	}
	if sink.has("read acquire k 3") {
		t.Fatal("the adapter was sent a second request for k before answering the first")
	}
	s, err := acquire(t, l, "k", 5*time.Second)
	if err != nil || l.Lives() != 2 {
		t.Fatalf("third acquire: %v, lives %d: want a restarted adapter's grant", err, l.Lives())
	}
	_ = s.Release(context.Background())
	if !sink.has("restarting it") {
		t.Error("the restart was not logged")
	}
}

func TestDeadAdapterIsRestarted(t *testing.T) {
	mark := t.TempDir() + "/died"
	l, _ := start(t, "die", "FAKE_MARK="+mark)
	_, err := acquire(t, l, "k", time.Second)
	if targets.ErrorKind(err) != history.ErrClientCrashed || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("acquire: %v, want a crash quoting stderr", err)
	}
	s, err := acquire(t, l, "k", 5*time.Second)
	if err != nil {
		t.Fatalf("acquire after the restart: %v", err)
	}
	if l.Lives() != 2 {
		t.Fatalf("lives %d, want 2", l.Lives())
	}
	_ = s.Release(context.Background())
}

func TestLeaseOfADeadAdapter(t *testing.T) {
	l, _ := start(t, "dieonrelease")
	s, err := acquire(t, l, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(context.Background()); targets.ErrorKind(err) != history.ErrClientCrashed {
		t.Fatalf("release: %v, want crashed", err)
	}
	if err := s.Release(context.Background()); targets.ErrorKind(err) != history.ErrClientCrashed || !strings.Contains(err.Error(), "left to expire") {
		t.Fatalf("release again: %v", err)
	}
}

func TestMissingTokenIsAProtocolError(t *testing.T) {
	l, _ := start(t, "notoken")
	_, err := acquire(t, l, "k", time.Second)
	if targets.ErrorKind(err) != history.ErrClientProtocol || !strings.Contains(err.Error(), "no \"token\"") {
		t.Fatalf("acquire: %v", err)
	}
}

func TestHelloRefused(t *testing.T) {
	_, err := external.Start(context.Background(), external.Config{Command: `read line; echo '{"id":1,"type":"error","message":"unknown option x"}'`, TTL: time.Second})
	if err == nil || !strings.Contains(err.Error(), "unknown option x") {
		t.Fatalf("start: %v", err)
	}
	_, err = external.Start(context.Background(), external.Config{Command: `echo nope >&2; exit 7`, TTL: time.Second})
	if targets.ErrorKind(err) != history.ErrClientCrashed || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("start of a dying adapter: %v", err)
	}
}
