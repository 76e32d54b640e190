package external_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/targets/external"
)

// pythonRedis is Debian's Python with python3-redis, which runs the
// redis-py adapter; the test is skipped without it (and fails in CI,
// whose deps install it).
func pythonRedis(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import redis").Run(); err != nil {
		testenv.Unavailable(t, "%s cannot import redis (apt-get install python3-redis): %v", py, err)
	}
	return py
}

// adapterSource is the redis-py adapter shipped beside the Redis backend.
func adapterSource(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../redis/redispy/redis_py_lock.py")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// check runs the conformance check on the adapter src, changed by each
// (old, new) pair, against an in-process Redis.
func check(t *testing.T, src string, edits ...string) *external.Report {
	t.Helper()
	py := pythonRedis(t)
	for i := 0; i+1 < len(edits); i += 2 {
		if !strings.Contains(src, edits[i]) {
			t.Fatalf("the adapter no longer contains %q", edits[i])
		}
		src = strings.Replace(src, edits[i], edits[i+1], 1)
	}
	path := filepath.Join(t.TempDir(), "adapter.py")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	m := miniredis.RunT(t)
	svc := external.Service{Backend: "redis", Endpoints: []string{m.Addr()}, Describe: "miniredis",
		Expire:  func(context.Context, time.Duration) error { m.FastForward(3 * time.Second); return nil },
		Advance: func(_ context.Context, d time.Duration) error { m.FastForward(d); return nil }}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep := external.Check(ctx, svc, external.CheckOptions{Command: py + " " + path, TTL: 2 * time.Second})
	var b strings.Builder
	rep.Write(&b)
	t.Log("\n" + b.String())
	return rep
}

// failed returns the says of the failed steps called step.
func failed(rep *external.Report, step string) []string {
	var out []string
	for _, f := range rep.Findings {
		if f.Step == step && !f.Pass {
			out = append(out, f.Says)
		}
	}
	return out
}

func TestCheckPassesRedisPy(t *testing.T) {
	rep := check(t, adapterSource(t))
	if rep.Failed() != 0 {
		t.Fatalf("%d steps failed", rep.Failed())
	}
	if rep.Hello.Library != "redis-py" || rep.Hello.Version == "" {
		t.Fatalf("hello: %+v", rep.Hello)
	}
}

// Each mistake an adapter author makes is named.
func TestCheckNamesMistakes(t *testing.T) {
	src := adapterSource(t)
	for _, tc := range []struct {
		name, step, says string
		edits            []string
	}{
		{"a debug print on stdout", "stdout", "not a JSON object",
			[]string{"    def acquire(self, req):\n", "    def acquire(self, req):\n        print('acquiring', req['key'])\n"}},
		{"a 3 MiB garbage line on stdout", "stdout", "a line longer than 1 MiB",
			[]string{"    def acquire(self, req):\n", "    def acquire(self, req):\n        print('x' * (3 << 20), flush=True)\n"}},
		{"busy told as unavailable", "busy", "tell busy from unavailable",
			[]string{`return {"type": "busy"}  # held`, `return {"type": "unavailable", "message": "held"}  # held`}},
		{"a release without the owner check", "not-owner", "answered ok",
			[]string{"            lock.release()\n", "            self.redis.delete(lock.name)\n"}},
		{"a token promised and not given", "acquire", `no "token"`,
			[]string{`"offers": {"token": False`, `"offers": {"token": True`}},
		{"two holders", "busy", "two holders at once",
			[]string{"if lock.acquire(blocking=True, blocking_timeout=left):", "if lock.acquire(blocking=False) or self.redis.delete(lock.name) or lock.acquire(blocking=False):"}},
		{"busy at once", "busy", "keep trying until the deadline",
			[]string{"if lock.acquire(blocking=True, blocking_timeout=left):", "if lock.acquire(blocking=False):"}},
		// Item 1's etcd-like bug in Redis terms: the lease counted from
		// the start of the wait, so a grant after a long wait comes with
		// what is left of the TTL.
		{"lease counted from the start of the wait", "long-wait", "count the lease from the grant",
			[]string{"                    self.leases += 1\n", "                    self.redis.pexpire(lock.name, max(1, int(req.get('ttl_ms', 2000) - (time.monotonic() - deadline + req['deadline_ms'] / 1000) * 1000)))\n                    self.leases += 1\n"}},
		{"unknown options ignored", "options", "accepted the unknown option",
			[]string{"        if options:\n", "        if False:\n"}},
		{"no answer to an unknown request", "unsupported", "did not answer",
			[]string{`reply = handler(req) if handler else {"type": "error", "message": "unsupported"}`, `reply = handler(req) if handler else None
            if reply is None:
                continue`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := check(t, src, tc.edits...)
			says := failed(rep, tc.step)
			if len(says) == 0 || !strings.Contains(strings.Join(says, "\n"), tc.says) {
				t.Fatalf("step %s: failures %q, want one saying %q", tc.step, says, tc.says)
			}
		})
	}
}

// A client whose first read of a held lock timed out answers unavailable
// (it does not know the lock is held); asked again, it answers busy: the
// busy step passes and says so. Answering unavailable twice fails
// (TestCheckNamesMistakes, "busy told as unavailable").
func TestCheckBusyAfterOneUnavailable(t *testing.T) {
	rep := check(t, adapterSource(t),
		`return {"type": "busy"}  # held`,
		`self.timeouts = getattr(self, "timeouts", 0) + 1; return {"type": "busy"} if self.timeouts > 1 else {"type": "unavailable", "message": "read timed out"}  # held`)
	if says := failed(rep, "busy"); len(says) != 0 {
		t.Fatalf("busy failed: %q", says)
	}
	for _, f := range rep.Findings {
		if f.Step == "busy" && f.Pass && strings.Contains(f.Says, "after answering unavailable once") {
			return
		}
	}
	t.Fatal("the busy step does not say it asked again")
}

// A grant to the second instance after the first hold's TTL has passed
// (each instance's first request is slow, as on a loaded machine; the
// first time it would answer busy, the adapter takes the lock as if the
// lease had run out) may follow the lease running out: it is not called two holders, the lock
// is taken anew and the second instance asked again.
func TestCheckLateGrantAskedAgain(t *testing.T) {
	rep := check(t, adapterSource(t),
		"        unreachable = None\n",
		"        if not getattr(self, \"slow\", False):\n            self.slow = True\n            time.sleep(0.9)\n        unreachable = None\n",
		`                return {"type": "busy"}  # held`,
		`                if self.redis.set("late-grant-given", 1, nx=True):
                    self.redis.delete(lock.name)
                    lock.acquire(blocking=False)
                    self.leases += 1
                    self.locks[str(self.leases)] = lock
                    return {"type": "granted", "lease": str(self.leases)}
                return {"type": "busy"}  # held`)
	if says := failed(rep, "busy"); len(says) != 0 {
		t.Fatalf("busy failed: %q", says)
	}
	if says := failed(rep, "release"); len(says) != 0 {
		t.Fatalf("release failed: %q", says)
	}
	for _, f := range rep.Findings {
		if f.Step == "busy" && f.Pass && strings.Contains(f.Says, "a grant after the first hold's TTL proves nothing") {
			return
		}
	}
	t.Fatal("the busy step does not say it asked again")
}
