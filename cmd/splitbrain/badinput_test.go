package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefusedBeforeDocker is the table of bad input: each is refused with
// one line naming what is wrong and what is accepted, exit 254, before any
// image or container work, writing nothing. The Docker daemon is
// unreachable here (DOCKER_HOST names a socket that does not exist), so
// input that got as far as the engine would end with exit 255 "docker
// daemon unreachable" instead; the command runs in an empty directory
// outside the repository, and neither its --results directory nor a
// ./results is there afterwards. The second table shows that good input of
// the same commands does get as far as the engine (the first table's
// refusals are not the daemon's doing).
func TestRefusedBeforeDocker(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no.sock"))
	history, err := filepath.Abs(filepath.Join("..", "..", "checkers", "testdata", "lost-update-invalid"))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	t.Chdir(work)
	file := func(name, body string) string {
		p := filepath.Join(work, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notADir := file("f", "x")
	empty := file("empty.yaml", "")
	typeTop := file("type-top.yaml", "name: x\ntime_limit: 5\nseeds: [1]\nscenarios:\n  - name: correct-pattern\n")
	typeEntry := file("type-entry.yaml", "name: x\ntime_limit: 5s\nseeds: [1]\nscenarios:\n  - name: correct-pattern\n    targets: redis\n")
	typeList := file("type-list.yaml", "name: x\ntime_limit: 5s\nscenarios: 3\n")
	typo := file("typo.yaml", "name: x\ntime_limit: 5s\nscenarios:\n  - name: correct-pattern\n    target: [redis]\n")
	top := file("top.yaml", "name: x\ntime_limit: 5s\nseed: [1]\nscenarios:\n  - name: correct-pattern\n")
	badOpt := file("opt.yaml", "name: x\ntime_limit: 5s\nscenarios:\n  - {name: correct-pattern, targets: [redis], recipe_options: {persistence: never}}\n")
	unknownScenario := file("sc.yaml", "name: x\ntime_limit: 5s\nscenarios:\n  - name: no-such-scenario\n")
	unwritable := filepath.Join(notADir, "sub") // under a file: cannot be made

	const noResults = "" // the command takes no --results
	tests := []struct {
		name    string
		args    []string
		results string // "results" appends --results DIR
		want    string
	}{
		// issue 33, item 3: accepted, changed silently or refused late.
		{"bypass client that does not exist", []string{"run", "--bypass-clients", "c99"}, "results", `--bypass-clients: no client "c99" (this run has c1..c5`},
		{"bypass client not a client name", []string{"run", "--bypass-clients", "holder"}, "results", `--bypass-clients: no client "holder"`},
		{"bypass client past --concurrency", []string{"run", "--concurrency", "2", "--bypass-clients", "c3"}, "results", "this run has c1..c2"},
		{"none beside a fault", []string{"run", "--nemesis", "none,pause"}, "results", "none stands alone"},
		// Recipe settings that each pass their own declaration but not
		// together (or with the TTL): refused before any container, not
		// by the agents once the cluster is up (issue 36).
		{"kubernetes lease-duration not whole seconds", []string{"run", "--target", "kubernetes", "--recipe-opt", "lease-duration=1500ms"}, "results", "--recipe-opt: lease-duration 1.5s: want whole seconds"},
		{"kubernetes renew-deadline past lease-duration", []string{"run", "--target", "kubernetes", "--client", "kubernetes-checked", "--recipe-opt", "renew-deadline=3s"}, "results", "--recipe-opt: renew-deadline 3s: want less than lease-duration 2s"},
		{"controller-runtime retry-period too long", []string{"run", "--target", "kubernetes", "--client", "controller-runtime", "--recipe-opt", "retry-period=1500ms"}, "results", "--recipe-opt: retry-period 1.5s: want more than 0 and renew-deadline"},
		{"controller-runtime release-on-cancel misspelt", []string{"run", "--target", "kubernetes", "--client", "controller-runtime", "--recipe-opt", "release-on-cancel=yes"}, "results", "release-on-cancel"},
		{"empty nemesis", []string{"run", "--nemesis", ""}, "results", "--nemesis: empty (want none, or a comma-separated list of clock, kill"},
		{"empty nemesis item", []string{"run", "--nemesis", "pause,"}, "results", "has an empty item"},
		{"nemesis twice", []string{"run", "--nemesis", "pause,pause"}, "results", "names pause twice"},
		{"a million keys", []string{"run", "--keys", "1000000"}, "results", "--keys must be 1..1000, got 1000000"},
		{"zero keys", []string{"run", "--keys", "0"}, "results", "--keys must be 1..1000"},
		{"matrix parallel 1000", []string{"matrix", "--set", "smoke", "--parallel", "1000"}, "results", "--parallel 1000: want 1..16"},
		{"validate parallel 0", []string{"validate", "--target", "redis", "--parallel", "0"}, "results", "--parallel 0: want 1..16"},
		{"matrix repeat 0", []string{"matrix", "--set", "smoke", "--repeat", "0"}, "results", "--repeat 0: want 1 or more"},
		{"matrix repeat -2", []string{"matrix", "--set", "smoke", "--repeat", "-2"}, "results", "--repeat -2: want 1 or more"},
		{"check negative timeout", []string{"check", "--timeout", "-1s", history}, noResults, "--timeout must be positive, got -1s"},
		{"check zero timeout", []string{"check", "--timeout", "0s", history}, noResults, "--timeout must be positive"},
		{"check negative memory", []string{"check", "--memory-mib", "-5", history}, noResults, "--memory-mib must be a positive number of MiB, got -5"},
		{"client-check zero ttl", []string{"client-check", "--ttl", "0s", "--", "true"}, noResults, "--ttl must be positive, got 0s"},
		{"client-check malformed endpoint", []string{"client-check", "--backend", "etcd", "--endpoints", "localhost", "--", "true"}, noResults, `--endpoints "localhost": want host:port`},
		{"client-check endpoint bad port", []string{"client-check", "--backend", "etcd", "--endpoints", "127.0.0.1:99999", "--", "true"}, noResults, `--endpoints "127.0.0.1:99999": want host:port`},
		{"client-check unknown backend with endpoints", []string{"client-check", "--backend", "consul", "--endpoints", "127.0.0.1:8500", "--", "true"}, noResults, `--backend: unknown target "consul" (known: etcd, kubernetes, lockd`},
		{"client-check no such dir", []string{"client-check", "--dir", "/nonexistent", "--", "true"}, noResults, "--dir /nonexistent: no such directory"},
		{"client-check missing adapter file", []string{"client-check", "--", "./my_lock.py"}, noResults, "adapter program ./my_lock.py: no such file"},
		{"client-check missing adapter program", []string{"client-check", "--", "no-such-adapter-program"}, noResults, "adapter program no-such-adapter-program: not found on PATH"},
		{"client-check no adapter", []string{"client-check"}, noResults, "give the adapter's command after --"},
		{"client-check no service for the backend", []string{"client-check", "--backend", "etcd", "--", "true"}, noResults, "--backend etcd: give --endpoints of the etcd you run on loopback (client-check brings its own service only for redis, redlock)"},
		{"client-check unknown recipe", []string{"client-check", "--recipe", "nope"}, noResults, `--recipe: unknown lock recipe "nope"`},
		{"client-check recipe and adapter", []string{"client-check", "--recipe", "redis", "--", "true"}, noResults, "give either --recipe or the adapter's command after --, not both"},
		{"client-check recipe that is an adapter", []string{"client-check", "--recipe", "redis-py"}, noResults, "--recipe redis-py runs an adapter process of its own"},
		{"python adapter without python", []string{"run", "--client", "python3 x.py"}, "results", "the client image has no python3; its interpreter comes from --client-packages"},
		{"node adapter without node", []string{"run", "--client", "node lock.js", "--client-packages", "python3-redis"}, "results", "the client image has no node"},
		{"matrix results not writable", []string{"matrix", "--set", "smoke", "--results", unwritable}, noResults, "--results " + unwritable + " cannot be made: " + notADir + " is a file"},
		{"validate results not writable", []string{"validate", "--target", "redis", "--results", unwritable}, noResults, "--results " + unwritable + " cannot be made: " + notADir + " is a file"},
		{"matrix junit not writable", []string{"matrix", "--set", "smoke", "--junit", filepath.Join(unwritable, "j.xml")}, "results", "--junit " + unwritable + " cannot be made"},
		{"matrix rates not writable", []string{"matrix", "--set", "smoke", "--rates", filepath.Join(unwritable, "r.md")}, "results", "--rates " + unwritable + " cannot be made"},
		{"matrix rates is a directory", []string{"matrix", "--set", "smoke", "--rates", work}, "results", "--rates " + work + ": is a directory"},
		{"validate page not writable", []string{"validate", "--target", "redis", "--page", filepath.Join(unwritable, "p.html")}, "results", "--page " + unwritable + " cannot be made"},
		{"validate junit not writable", []string{"validate", "--target", "redis", "--junit", filepath.Join(unwritable, "j.xml")}, "results", "--junit " + unwritable + " cannot be made"},
		{"set: duration as a number", []string{"matrix", "--set", typeTop}, "results", "line 2, key time_limit: cannot unmarshal !!int `5` (want a duration such as 30s)"},
		{"set: a list as a string", []string{"matrix", "--set", typeEntry}, "results", "line 6, key scenarios[0].targets: cannot unmarshal !!str `redis` (want a list of strings)"},
		{"set: scenarios not a list", []string{"matrix", "--set", typeList}, "results", "line 3, key scenarios: cannot unmarshal !!int `3` (want a list of scenarios"},
		{"set: empty file", []string{"matrix", "--set", empty}, "results", "the file is empty (want name, time_limit, seeds and scenarios"},
		{"acquire timeout named", []string{"run", "--acquire-timeout", "0s"}, "results", "--acquire-timeout must be positive, got 0s"},
		{"store timeout named", []string{"run", "--store-timeout", "-1s"}, "results", "--store-timeout must be positive, got -1s"},
		{"op timeout named", []string{"run", "--op-timeout", "0s"}, "results", "--op-timeout must be positive"},
		{"check timeout named", []string{"run", "--check-timeout", "0s"}, "results", "--check-timeout must be positive"},
		{"validate client of another target", []string{"validate", "--target", "redis", "--client", "etcd"}, "results", "no --client etcd serves --target redis (clients of each target: redis: redis, redis-py, redislock, redsync)"},

		// Inputs that already behaved.
		{"unknown command", []string{"frobnicate"}, noResults, "unknown command"},
		{"unknown flag", []string{"run", "--frobnicate"}, "results", "unknown flag"},
		{"malformed duration", []string{"run", "--time-limit", "soon"}, "results", "invalid argument"},
		{"zero time limit", []string{"run", "--time-limit", "0s"}, "results", "--time-limit must be positive"},
		{"unknown target", []string{"run", "--target", "consul"}, "results", "unknown target"},
		{"unknown workload", []string{"run", "--workload", "bank"}, "results", "unknown workload"},
		{"unknown nemesis", []string{"run", "--nemesis", "meteor"}, "results", `unknown nemesis "meteor" (known: none, `},
		{"negative clients", []string{"run", "--concurrency", "-1"}, "results", "--concurrency must be 1..200"},
		{"too many clients", []string{"run", "--concurrency", "201"}, "results", "--concurrency must be 1..200"},
		{"zero lease", []string{"run", "--lease-ttl", "0s"}, "results", "--lease-ttl must be positive"},
		{"negative work", []string{"run", "--work", "-1s"}, "results", "--work must not be negative"},
		{"run results under a file", []string{"run", "--results", unwritable}, noResults, "--results " + unwritable + " cannot be made"},
		{"malformed recipe option", []string{"run", "--recipe-opt", "novalue"}, "results", "key=value"},
		{"misspelt recipe option", []string{"run", "--target", "redis", "--recipe-opt", "expiri=none"}, "results", "known: persistence, expiry, release"},
		{"unknown store", []string{"run", "--store", "mysql"}, "results", `unknown store "mysql" (known: builtin, postgres)`},
		{"unknown store option", []string{"run", "--store", "postgres", "--store-opt", "mode=x"}, "results", "unknown --store-opt mode for store postgres (known: check)"},
		{"bad store option value", []string{"run", "--store", "postgres", "--store-opt", "check=row"}, "results", "want one of token, version"},
		{"impossible partition", []string{"run", "--target", "redis", "--nemesis", "partition", "--partitions", "majority"}, "results", "needs at least 3 lock nodes"},
		{"malformed weights", []string{"run", "--pause-targets", "holder=x"}, "results", "--pause-targets"},
		{"unknown clock mode", []string{"run", "--clock-modes", "wobble"}, "results", "--clock-modes"},
		{"bad control channel", []string{"run", "--control", "pigeon"}, "results", "--control"},
		{"bad log level", []string{"run", "--log-level", "loud"}, "results", "--log-level"},
		{"fenced with a tokenless client", []string{"run", "--target", "redis", "--client", "redsync", "--workload", "fenced-counter"}, "results", "redsync"},
		{"client of another target", []string{"run", "--target", "redis", "--client", "etcd"}, "results", "does not serve target redis"},
		{"no such client name", []string{"run", "--target", "redis", "--client", "nope"}, "results", `--client "nope": no such client for target redis`},
		{"client files with a library", []string{"run", "--target", "redis", "--client", "redsync", "--client-files", work}, "results", "--client-files and --client-packages go with --client CMD"},
		{"bad package name", []string{"run", "--client", "./a.sh", "--client-packages", "a;b"}, "results", "is not a Debian package name"},
		{"check without args", []string{"check"}, noResults, "accepts 1 arg"},
		{"check missing history", []string{"check", filepath.Join(work, "nope")}, noResults, "no history"},
		{"images unknown role", []string{"images", "build", "--roles", "mainframe"}, noResults, "unknown role"},
		{"images unknown subcommand", []string{"images", "bogus"}, noResults, `unknown command "bogus" for "splitbrain images" (known: build)`},
		{"unknown set", []string{"matrix", "--set", "weekly"}, "results", `unknown matrix set "weekly" (shipped: `},
		{"missing set file", []string{"matrix", "--set", "./nope.yaml"}, "results", "read matrix set"},
		{"unknown key in an entry", []string{"matrix", "--set", typo}, "results", `unknown key "target" at line 5 (known: name, targets, valid`},
		{"unknown key in a set", []string{"matrix", "--set", top}, "results", `unknown key "seed" at line 3 (known: name, time_limit, seeds, repetitions, scenarios, early_end)`},
		{"bad option in a set", []string{"matrix", "--set", badOpt}, "results", "want one of none, aof-always, aof-everysec"},
		{"unknown scenario in a set", []string{"matrix", "--set", unknownScenario}, "results", "no-such-scenario"},
		{"validate unknown recipe option", []string{"validate", "--target", "redis", "--recipe-opt", "nosuch=1"}, "results", "unknown option nosuch for target redis (known: persistence, expiry, release)"},
		{"validate option the backend lacks", []string{"validate", "--target", "etcd", "--recipe-opt", "persistence=aof-always"}, "results", "unknown option persistence for target etcd"},
		{"validate negative time limit", []string{"validate", "--target", "lockd", "--time-limit", "-1s"}, "results", "--time-limit must be positive"},
		{"validate unknown target", []string{"validate", "--target", "consul"}, "results", `unknown target "consul"`},
		{"validate unknown client", []string{"validate", "--client", "nope"}, "results", `unknown lock recipe "nope"`},
		{"serve remote address", []string{"serve", "--addr", "0.0.0.0:8080"}, noResults, "is not a loopback address"},
		{"serve malformed address", []string{"serve", "--addr", "nowhere"}, noResults, "--addr \"nowhere\": want host:port"},
		{"serve results not a directory", []string{"serve", "--results", notADir}, noResults, "is not a directory"},
		{"ssh nodes and nodes file", []string{"run", "--nodes", "a,b,c", "--nodes-file", notADir}, "results", "--nodes-file and --nodes exclude each other"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			res := filepath.Join(work, "res", string(rune('a'+i%26))+strings.Repeat("x", i/26))
			if tt.results != noResults {
				args = append(append([]string{}, args...), "--results", res)
			}
			code, out, stderr := run(t, args...)
			if code != exitBadInput || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, want %d; stderr %q lacks %q\nstdout: %.300s", code, exitBadInput, stderr, tt.want, out)
			}
			if n := strings.Count(strings.TrimSpace(stderr), "\n"); n != 0 || strings.Contains(stderr, "goroutine") {
				t.Fatalf("want one line, got %q", stderr)
			}
			if strings.Contains(stderr, "docker daemon") {
				t.Fatalf("refused only at the engine: %q", stderr)
			}
			for _, p := range []string{res, filepath.Join(work, "results")} {
				if _, err := os.Stat(p); err == nil {
					t.Fatalf("bad input wrote %s", p)
				}
			}
		})
	}

	// Good input of the same kinds gets past the checks to the engine.
	for _, args := range [][]string{
		{"run", "--bypass-clients", "c1,c5", "--time-limit", "1s"},
		{"run", "--nemesis", "none"},
		{"run", "--nemesis", "pause,kill", "--keys", "1000"},
		{"run", "--client", "python3 x.py", "--client-packages", "python3-redis"},
		{"matrix", "--set", "smoke", "--repeat", "1", "--parallel", "16", "--junit", filepath.Join(work, "out", "j.xml"), "--rates", filepath.Join(work, "out", "r.md")},
		{"validate", "--target", "redis", "--client", "redsync", "--page", filepath.Join(work, "out", "p.html")},
	} {
		t.Run("reaches the engine: "+strings.Join(args, " "), func(t *testing.T) {
			code, _, stderr := run(t, append(args, "--results", filepath.Join(work, "good"))...)
			if code != exitHarness || !strings.Contains(stderr, "docker daemon unreachable") {
				t.Fatalf("exit %d, want %d at the engine; stderr %q", code, exitHarness, stderr)
			}
		})
	}
}
