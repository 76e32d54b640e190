package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/history"
)

// writeRunFixture makes a run directory the way the harness does (results.json
// from harness.Results, history.jsonl, logs) from a checkers corpus history.
func writeRunFixture(t *testing.T, results, target, workload, corpus string, started time.Time) string {
	t.Helper()
	src := filepath.Join("..", "..", "checkers", "testdata", corpus, "history.jsonl")
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	evs, rep, err := history.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	in := checkers.NewInput(evs)
	chk := checkers.Check(t.Context(), in, checkers.ForRun(checkers.Run{})...)
	cfg := harness.DefaultConfig()
	cfg.Target, cfg.Workload, cfg.ResultsDir = target, workload, results
	cfg.LeaseTTL, cfg.Keys, cfg.Seed = 300*time.Nanosecond, 1, 42
	res := harness.Results{
		Valid: chk.Valid, RunID: started.Format("150405") + "-f1x7", Target: target, Workload: workload, Nemesis: "pause", Seed: cfg.Seed,
		Config: cfg, Started: started, Duration: 33 * time.Second, Phases: map[string]time.Duration{"setup": 2 * time.Second, "test": 30 * time.Second},
		Versions: map[string]string{target: "1.0-test"}, Harness: map[string]string{"go": "test"}, Checkers: chk.Checkers,
		Faults: checkers.Windows(in.Faults), Metrics: harness.Metrics(in), History: rep,
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(results, fmt.Sprintf("%s-%s-pause", target, workload), started.Format("20060102T150405000Z"))
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if d, ok := chk.Checkers["linearizable"].Details.(*checkers.LinearizableDetails); ok {
		f, err := os.Create(filepath.Join(dir, "linearizability.html"))
		if err != nil {
			t.Fatal(err)
		}
		if err := d.WriteVisualization(f, in.Faults, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	for name, content := range map[string][]byte{"results.json": b, "history.jsonl": data, "logs/c1.log": []byte("agent c1\n"), "harness.log": []byte("log\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// serveFixture is a results directory of four runs on two targets.
func serveFixture(t *testing.T) (root, invalid, valid string) {
	t.Helper()
	root = t.TempDir()
	day := func(d int) time.Time { return time.Date(2026, 12, d, 9, 30, 0, 0, time.UTC) }
	invalid = writeRunFixture(t, root, "redis", "unfenced-counter", "lost-update-invalid", day(1))
	valid = writeRunFixture(t, root, "redis", "fenced-counter", "fenced-rejection-valid", day(2))
	writeRunFixture(t, root, "etcd", "unfenced-counter", "lost-update-invalid", day(3))
	writeRunFixture(t, root, "etcd", "unfenced-counter", "sequential-valid", day(4))
	return root, invalid, valid
}

// startServe runs serve in-process on a free loopback port.
func startServe(t *testing.T, dir string) (base string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan net.Addr, 1)
	errc := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	go func() {
		errc <- serve(ctx, serveOptions{results: dir, addr: "127.0.0.1:0"}, log, io.Discard, io.Discard, func(a net.Addr) { addrc <- a })
	}()
	var stopped bool
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-errc:
			return err
		case <-time.After(10 * time.Second):
			return errors.New("serve did not stop within 10 s of its context being cancelled")
		}
	}
	t.Cleanup(func() { _ = stop() })
	select {
	case a := <-addrc:
		return "http://" + a.String(), stop
	case err := <-errc:
		t.Fatalf("serve: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not start")
	}
	return "", nil
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func TestServeCheckLoopback(t *testing.T) {
	tests := []struct {
		addr   string
		remote bool
		ok     bool
	}{
		{"127.0.0.1:8080", false, true},
		{"127.0.0.2:0", false, true},
		{"localhost:0", false, true},
		{"[::1]:0", false, true},
		{"0.0.0.0:8080", false, false},
		{":8080", false, false},
		{"[::]:8080", false, false},
		{"192.168.1.10:8080", false, false},
		{"example.com:80", false, false},
		{"0.0.0.0:8080", true, true},
		{"nonsense", false, false},
		{"127.0.0.1:port", false, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s remote=%v", tt.addr, tt.remote), func(t *testing.T) {
			err := checkLoopback(tt.addr, tt.remote)
			if (err == nil) != tt.ok {
				t.Fatalf("err %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !harness.IsBadInput(err) {
				t.Errorf("not a bad-input error: %v", err)
			}
		})
	}
}

// TestServeFlags: mistakes are one line naming the fix, exit 254; a
// non-loopback address is refused without --allow-remote.
func TestServeFlags(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--addr", "0.0.0.0:0", "--results", dir}, "not a loopback address"},
		{[]string{"serve", "--addr", ":0", "--results", dir}, "--allow-remote"},
		{[]string{"serve", "--addr", "nonsense", "--results", dir}, "want host:port"},
		{[]string{"serve", "--results", filepath.Join(dir, "nope")}, "is not a directory"},
		{[]string{"serve", "extra"}, "accepts 0 arg"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, stderr := run(t, tt.args...)
			if code != exitBadInput || !strings.Contains(stderr, tt.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Fatalf("exit %d, stderr %q; want %d and one line with %q", code, stderr, exitBadInput, tt.want)
			}
		})
	}
}

// TestServeHTTP: the in-process server lists the runs, serves reports
// (generated on demand) and shuts down when its context is cancelled.
func TestServeHTTP(t *testing.T) {
	root, invalid, _ := serveFixture(t)
	base, stop := startServe(t, root)
	getBody := func(path string) (int, string) {
		t.Helper()
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := getBody("/"); code != 200 || strings.Count(body, `<tr class="run">`) != 4 {
		t.Fatalf("run list: %d, %d rows", code, strings.Count(body, `<tr class="run">`))
	}
	rel, _ := filepath.Rel(root, invalid)
	code, body := getBody("/runs/" + filepath.ToSlash(rel) + "/report.html")
	if code != 200 || !strings.Contains(body, "Client c1 held token 1") {
		t.Fatalf("report: %d %.200s", code, body)
	}
	if _, err := os.Stat(filepath.Join(invalid, "report.html")); err != nil {
		t.Error("report.html not generated on demand")
	}
	if code, _ := getBody("/runs/../../etc/passwd"); code == 200 {
		t.Error("path traversal served")
	}
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := http.Get(base + "/"); err == nil {
		t.Error("still serving after shutdown")
	}
}

// chromium finds Debian's chromium: a skip without it, a failure in CI.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true and chromium is missing: apt-get install -y chromium")
	}
	t.Skip("chromium is missing (apt-get install -y chromium); with CI=true this is a failure")
	return ""
}

// browse loads url (always the loopback server) in headless Chromium and
// returns what it printed; console messages (the pages have no script, so
// any is an error, e.g. a content-security-policy violation) fail the test.
func browse(t *testing.T, bin, url string, extra ...string) string {
	t.Helper()
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("refusing to point the browser at %s: loopback only", url)
	}
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--no-first-run", "--no-default-browser-check", "--disable-default-apps", "--disable-extensions",
		"--disable-dev-shm-usage", "--disable-breakpad", "--no-pings", "--no-proxy-server",
		// Nothing but the loopback server resolves, whatever the page asks.
		"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
		"--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0", "--window-size=1280,3000", "--hide-scrollbars",
	}
	args = append(append(args, extra...), url)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("chromium %s: %v in %v", url, err, time.Since(start).Round(time.Millisecond))
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, ":CONSOLE") || strings.Contains(line, "Uncaught") || strings.Contains(line, "Page load failed") {
			t.Errorf("browser console: %s", line)
		}
	}
	if err != nil {
		t.Fatalf("chromium failed: %v\n%s", err, tail(stderr.String(), 2000))
	}
	return stdout.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// TestServeBrowser opens the run list, a comparison and two reports in a
// real (headless) browser served by the in-process server.
func TestServeBrowser(t *testing.T) {
	bin := chromium(t)
	root, invalid, valid := serveFixture(t)
	base, stop := startServe(t, root)
	href := func(dir string) string {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		return base + "/runs/" + filepath.ToSlash(rel) + "/report.html"
	}

	t.Run("run list", func(t *testing.T) {
		dom := browse(t, bin, base+"/", "--dump-dom")
		if n := strings.Count(dom, `<tr class="run">`); n != 4 {
			t.Errorf("%d runs listed, want 4", n)
		}
		for _, w := range []string{"4 runs under", ">etcd<", ">redis<", `class="v-invalid">invalid<`, `class="v-valid">valid<`, `<form class="filters"`} {
			if !strings.Contains(dom, w) {
				t.Errorf("run list lacks %q", w)
			}
		}
		dom = browse(t, bin, base+"/?target=etcd&verdict=invalid", "--dump-dom")
		if n := strings.Count(dom, `<tr class="run">`); n != 1 {
			t.Errorf("filtered list: %d runs, want 1", n)
		}
	})
	t.Run("compare", func(t *testing.T) {
		dom := browse(t, bin, base+"/compare?workload=unfenced-counter&nemesis=pause", "--dump-dom")
		if strings.Count(dom, `<tr class="target">`) != 2 || !strings.Contains(dom, `id="target-etcd"`) {
			t.Errorf("comparison lacks its two targets:\n%s", tail(dom, 1500))
		}
	})
	t.Run("invalid report", func(t *testing.T) {
		dom := browse(t, bin, href(invalid), "--dump-dom")
		for _, w := range []string{`class="banner invalid"`, "What went wrong", "Client c1 held token 1 on k0",
			"its unfenced write of 1 (it had read 0) was accepted", "losing c2's increment", "window verified illegal by the checker",
			`id="latency"`, `id="throughput"`, `id="timeline"`, `class="fault"`, "lock wait (acquire)", `href="linearizability.html"`} {
			if !strings.Contains(dom, w) {
				t.Errorf("report lacks %q", w)
			}
		}
		if n := strings.Count(dom, "<svg"); n < 4 {
			t.Errorf("%d SVG figures, want the window, two plots and the timeline", n)
		}
		if n := strings.Count(dom, `class="fault"`); n < 3 {
			t.Errorf("%d shaded fault rects, want one per figure", n)
		}
		shot := filepath.Join(t.ArtifactDir(), "report-invalid.png")
		browse(t, bin, href(invalid), "--screenshot="+shot)
		if st, err := os.Stat(shot); err != nil || st.Size() < 10000 {
			t.Fatalf("screenshot %s: %v", shot, err)
		}
		t.Logf("screenshot of the invalid run's report: %s", shot)
	})
	t.Run("valid report", func(t *testing.T) {
		dom := browse(t, bin, href(valid), "--dump-dom")
		if !strings.Contains(dom, `class="banner valid"`) || strings.Contains(dom, "What went wrong") {
			t.Errorf("valid report:\n%s", tail(dom, 1500))
		}
		shot := filepath.Join(t.ArtifactDir(), "run-list.png")
		browse(t, bin, base+"/", "--screenshot="+shot, "--window-size=1280,700")
		t.Logf("screenshot of the run list: %s", shot)
	})
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}
