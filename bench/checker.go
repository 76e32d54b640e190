package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/checkers/synth"
	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/report"
)

// checkerChildCmd is the hidden subcommand a checker case runs in: a fresh
// process per case, so that its peak RSS is the case's alone.
const checkerChildCmd = "checker-child"

// checkerGenCmd writes a synthetic history in a child process. Generating
// in the parent would grow it, and on Linux a child started with
// CLONE_VM|CLONE_VFORK (as os/exec does) inherits the parent's RSS high-water
// mark into its ru_maxrss at exec: every later child would report at least
// the parent's peak.
const checkerGenCmd = "checker-gen"

func runCheckerGen(args []string) error {
	fs := flag.NewFlagSet(checkerGenCmd, flag.ContinueOnError)
	file := fs.String("file", "", "history.jsonl to write")
	opts := fs.String("synth", "", "synth.Options as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var o synth.Options
	if err := json.Unmarshal([]byte(*opts), &o); err != nil {
		return err
	}
	return writeSynth(*file, o)
}

// childResult is what a checker child prints.
type childResult struct {
	Events int     `json:"events"`
	Bytes  int     `json:"bytes"`
	ReadS  float64 `json:"read_s"`
	ParseS float64 `json:"parse_s"`
	// InputS is checkers.NewInput (pairing invocations and completions).
	InputS float64 `json:"input_s"`
	// CheckS maps each checker to its time; LinearizableS is the
	// linearizable checker's.
	CheckS        map[string]float64 `json:"check_s"`
	LinearizableS float64            `json:"linearizable_s"`
	// TotalS is read + parse + input + every checker run.
	TotalS  float64 `json:"total_s"`
	Verdict string  `json:"verdict"`
	// Checked, Dropped and Kept are the linearizable checker's counts.
	Checked int `json:"checked"`
	Dropped int `json:"dropped_unknown"`
	Kept    int `json:"kept_unknown"`
	// ExplainS is report.Explain's time when asked for; Anomalies what it
	// found.
	ExplainS  float64 `json:"explain_s,omitempty"`
	Anomalies int     `json:"anomalies,omitempty"`
	// HWMAfterParseKiB is the process's peak RSS once the history is
	// parsed and paired, before any checker ran; HWMEndKiB at the end
	// (VmHWM of /proc/self/status, a cross-check of the parent's Maxrss).
	HWMAfterParseKiB int64 `json:"hwm_after_parse_kib"`
	// CPUS is the child's user+system CPU time (from its rusage, filled
	// in by the parent): less sensitive than wall time to a loaded machine.
	CPUS      float64 `json:"cpu_s"`
	HWMEndKiB int64   `json:"hwm_end_kib"`
}

// runCheckerChild: checker-child --file F --mode pipeline|linearizable [--keep] [--timeout] [--explain]
func runCheckerChild(args []string) error {
	fs := flag.NewFlagSet(checkerChildCmd, flag.ContinueOnError)
	file := fs.String("file", "", "history.jsonl")
	mode := fs.String("mode", "pipeline", "pipeline (every checker of a run) or linearizable")
	keep := fs.Bool("keep", false, "LinearizableOptions.KeepUnobserved")
	timeout := fs.Duration("timeout", time.Minute, "linearizability check timeout")
	explain := fs.Bool("explain", false, "also run report.Explain")
	ttl := fs.Duration("ttl", 2*time.Second, "lease TTL given to the checkers")
	asLimit := fs.Float64("as-limit-gib", 0, "cap this process's address space (RLIMIT_AS), so that a case too big for the machine fails alone")
	porcOnly := fs.Bool("porcupine-only", false, "the old path: every key to Porcupine, no search budget")
	memX := fs.Float64("mem-limit-x", 0, "set the Go memory limit to this many times the history's size, as `splitbrain check` does (0: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *asLimit > 0 {
		n := uint64(*asLimit * (1 << 30))
		if err := unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: n, Max: n}); err != nil {
			return err
		}
	}
	var res childResult
	t0 := time.Now()
	st, err := os.Stat(*file)
	if err != nil {
		return err
	}
	if *memX > 0 {
		debug.SetMemoryLimit(max(int64(*memX*float64(st.Size())), 64<<20))
	}
	// history.ReadFile reads and decodes a block at a time: read_s is 0,
	// parse_s both.
	events, _, err := history.ReadFile(*file)
	if err != nil {
		return err
	}
	t2 := time.Now()
	in := checkers.NewInput(events)
	t3 := time.Now()
	res.Events, res.Bytes = len(events), int(st.Size())
	res.ParseS, res.InputS = t2.Sub(t0).Seconds(), t3.Sub(t2).Seconds()
	res.HWMAfterParseKiB = procStatusKiB("VmHWM")

	opts := checkers.LinearizableOptions{Timeout: *timeout, KeepUnobserved: *keep}
	if *porcOnly {
		opts.PorcupineOnly, opts.SearchBudget = true, -1
	}
	var cs []checkers.Checker
	if *mode == "linearizable" {
		cs = []checkers.Checker{checkers.NewLinearizable(opts)}
	} else {
		cs = checkers.ForRun(checkers.Run{TTL: *ttl, Linearizable: opts})
	}
	res.CheckS = map[string]float64{}
	var verdicts []checkers.Verdict
	var illegal []string
	for _, c := range cs {
		s := time.Now()
		r := c.Check(context.Background(), in)
		res.CheckS[c.Name()] = time.Since(s).Seconds()
		if r.Judges {
			verdicts = append(verdicts, r.Verdict)
		}
		if d, ok := r.Details.(*checkers.LinearizableDetails); ok {
			res.LinearizableS = res.CheckS[c.Name()]
			res.Checked, res.Dropped, res.Kept = d.Checked, d.DroppedUnknown, d.KeptUnknown
			illegal = d.IllegalKeys
		}
	}
	res.Verdict = checkers.And(verdicts...).String()
	res.TotalS = time.Since(t0).Seconds()
	if *explain {
		s := time.Now()
		as := report.Explain(events, report.ExplainOptions{LeaseTTL: *ttl, IllegalKeys: illegal})
		res.ExplainS = time.Since(s).Seconds()
		res.Anomalies = len(as)
	}
	res.HWMEndKiB = procStatusKiB("VmHWM")
	return json.NewEncoder(os.Stdout).Encode(res)
}

// procStatusKiB reads a "Name: N kB" line of /proc/self/status.
func procStatusKiB(name string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// checkerCase is one measured configuration.
type checkerCase struct {
	Group string        `json:"group"`
	Name  string        `json:"name"`
	Synth synth.Options `json:"synth"`
	Mode  string        `json:"mode"`
	Keep  bool          `json:"keep_unobserved"`
	// PorcupineOnly runs the old path (every key to Porcupine), the
	// "before" of each before/after pair.
	PorcupineOnly bool `json:"porcupine_only,omitempty"`
	Explain       bool `json:"explain,omitempty"`
	Rounds        int  `json:"rounds"`
	// ASLimitGiB caps the child's address space (0: none).
	ASLimitGiB float64 `json:"as_limit_gib,omitempty"`

	// Measured: every round, and their summaries.
	Runs     []childResult `json:"runs"`
	MaxRSS   []int64       `json:"max_rss_kib"`
	Wall     []float64     `json:"wall_s"`
	TotalS   Stats         `json:"total_s"`
	LinS     Stats         `json:"linearizable_s"`
	PeakMiB  float64       `json:"peak_rss_mib"`
	ParseMiB float64       `json:"rss_after_parse_mib"`
	// OpsPerMinute is Ops over the median total (read, parse, pair, every
	// checker); LinOpsPerMinute over the median linearizable check alone.
	OpsPerMinute    float64 `json:"ops_per_minute"`
	LinOpsPerMinute float64 `json:"linearizable_ops_per_minute"`
	Verdict         string  `json:"verdict"`
	Err             string  `json:"error,omitempty"`
}

type checkerData struct {
	Cases []*checkerCase `json:"cases"`
	Check []*checkCLI    `json:"check_cli"`
}

func runChecker(args []string) error {
	var c common
	fs := newFlags("checker", &c)
	rounds := fs.Int("rounds", 3, "rounds per case (median time, max RSS)")
	quick := fs.Bool("quick", false, "skip the 1M-operation cases")
	timeout := fs.Duration("timeout", time.Minute, "linearizability check timeout (the harness's default --check-timeout)")
	dir := fs.String("dir", "", "where to keep the generated histories (default: a temporary directory, removed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.begin("checker", args)
	work := *dir
	if work == "" {
		d, err := os.MkdirTemp("", "splitbrain-bench-checker-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		work = d
	}
	big := 1_000_000
	if *quick {
		big = 0
	}
	var cases []*checkerCase
	add := func(group, name string, o synth.Options, mode string, keep, explain bool, r int) {
		if o.Ops == 0 {
			return
		}
		cases = append(cases, &checkerCase{Group: group, Name: name, Synth: o, Mode: mode, Keep: keep, Explain: explain, Rounds: r})
	}
	// Each main case runs twice: chain-first (today's checker) and
	// Porcupine only (the old path, named "..., Porcupine only"), side by
	// side, so that the ratios below compare them within one run.
	both := func(group, name string, o synth.Options, explain bool, r int, capGiB float64) {
		add(group, name, o, "pipeline", false, explain, r)
		add(group, name+", Porcupine only", o, "pipeline", false, explain, r)
		if len(cases) > 0 && o.Ops > 0 {
			cases[len(cases)-1].PorcupineOnly = true
			cases[len(cases)-1].ASLimitGiB = capGiB
		}
	}
	// Throughput and growth: valid histories split across 64 keys, the
	// whole pipeline (parse the file, pair, every checker of a run).
	for _, n := range []int{10_000, 100_000, big} {
		r := *rounds
		if n == big {
			r = 1
		}
		both("size", fmt.Sprintf("%d ops, 64 keys", n), synth.Options{Ops: n, Keys: 64, Clients: 20, Seed: 1}, false, r, 12)
	}
	// Keys: Porcupine's cost per key grows with the square of the key's
	// operations (see docs/performance.md), so fewer keys cost more; the
	// chain's does not. Porcupine alone on 1M operations on one key runs
	// capped, so that it fails alone instead of driving the machine into
	// swap or the OOM killer.
	both("keys", "100000 ops, 3 keys", synth.Options{Ops: 100_000, Keys: 3, Clients: 5, Seed: 1}, false, *rounds, 12)
	if big > 0 {
		both("keys", "1000000 ops, 1 key", synth.Options{Ops: big, Keys: 1, Clients: 5, Seed: 1}, false, 1, 6)
		add("keys", "1000000 ops, 3 keys", synth.Options{Ops: big, Keys: 3, Clients: 5, Seed: 1}, "pipeline", false, false, 1)
	}
	// A violation: the whole pipeline and report.Explain.
	both("violation", "100000 ops, 64 keys, 1 lost update", synth.Options{Ops: 100_000, Keys: 64, Clients: 20, Violation: true, Seed: 3}, true, *rounds, 12)
	both("violation", "1000000 ops, 64 keys, 1 lost update", synth.Options{Ops: big, Keys: 64, Clients: 20, Violation: true, Seed: 3}, true, 1, 12)
	add("violation", "1000000 ops, 1 key, 1 lost update", synth.Options{Ops: big, Keys: 1, Clients: 5, Violation: true, Seed: 3}, "pipeline", false, true, 1)
	// Unknown outcomes nobody observed: dropped (the default) vs kept as
	// may-or-may-not-apply steps; valid and violating histories.
	for _, viol := range []bool{false, true} {
		for _, u := range []int{0, 10, 50} {
			for _, keep := range []bool{false, true} {
				name := fmt.Sprintf("10000 ops, 4 keys, %d unknown, %s", u, map[bool]string{false: "dropped", true: "kept"}[keep])
				group := "unknowns"
				if viol {
					name += ", 1 lost update"
					group = "unknowns-violation"
				}
				add(group, name, synth.Options{Ops: 10_000, Keys: 4, Clients: 10, UnknownUnobserved: u, Violation: viol, Seed: 2}, "linearizable", keep, false, *rounds)
			}
		}
	}
	for _, viol := range []bool{false, true} {
		for _, u := range []int{0, 50} {
			for _, keep := range []bool{false, true} {
				name := fmt.Sprintf("100000 ops, 4 keys, %d unknown, %s", u, map[bool]string{false: "dropped", true: "kept"}[keep])
				group := "unknowns"
				if viol {
					name += ", 1 lost update"
					group = "unknowns-violation"
				}
				add(group, name, synth.Options{Ops: 100_000, Keys: 4, Clients: 10, UnknownUnobserved: u, Violation: viol, Seed: 2}, "linearizable", keep, false, *rounds)
			}
		}
	}

	files := map[string]string{}
	for _, cs := range cases {
		key := fmt.Sprintf("%+v", cs.Synth)
		path, ok := files[key]
		if !ok {
			path = filepath.Join(work, fmt.Sprintf("h%d.jsonl", len(files)))
			logf("generating %s: %s", path, key)
			if err := genInChild(path, cs.Synth); err != nil {
				return err
			}
			files[key] = path
		}
		logf("case %s / %s (%d rounds)", cs.Group, cs.Name, cs.Rounds)
		measureCase(cs, path, *timeout)
	}
	checks := measureCheckCLI(work, files, cases)
	printChecker(cases)
	printCheckCLI(checks)
	return c.finish(append(checkerTargets(cases), checkCLITargets(checks)...), checkerData{Cases: cases, Check: checks})
}

// writeSynth writes a synthetic history as a run writes history.jsonl (one
// json.Encoder line per event).
func writeSynth(path string, o synth.Options) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	enc := json.NewEncoder(w)
	for _, e := range synth.Generate(o) {
		if err := enc.Encode(e); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func genInChild(path string, o synth.Options) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	b, _ := json.Marshal(o)
	cmd := exec.Command(self, checkerGenCmd, "--file", path, "--synth", string(b))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

func measureCase(cs *checkerCase, path string, timeout time.Duration) {
	self, err := os.Executable()
	if err != nil {
		cs.Err = err.Error()
		return
	}
	var totals, lins []float64
	for range cs.Rounds {
		args := []string{checkerChildCmd, "--file", path, "--mode", cs.Mode, "--timeout", timeout.String()}
		if cs.Keep {
			args = append(args, "--keep")
		}
		if cs.Explain {
			args = append(args, "--explain")
		}
		if cs.ASLimitGiB > 0 {
			args = append(args, "--as-limit-gib", fmt.Sprint(cs.ASLimitGiB))
		}
		if cs.PorcupineOnly {
			args = append(args, "--porcupine-only")
		} else {
			args = append(args, "--mem-limit-x", "2.7") // as splitbrain check
		}
		cmd := exec.Command(self, args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		start := time.Now()
		err := cmd.Run()
		wall := time.Since(start).Seconds()
		if err != nil {
			msg := strings.TrimSpace(errb.String())
			if i := strings.IndexByte(msg, '\n'); i >= 0 {
				msg = msg[:i] // the first line (a Go fatal error's stack follows)
			}
			rss := int64(0)
			if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
				rss = ru.Maxrss
			}
			cs.Err = fmt.Sprintf("%v after %.1fs, peak RSS %.0f MiB: %s", err, wall, float64(rss)/1024, msg)
			cs.PeakMiB = float64(rss) / 1024
			cs.Wall = append(cs.Wall, wall)
			logf("  failed: %s", cs.Err)
			return
		}
		var r childResult
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			cs.Err = fmt.Sprintf("child output %q: %v", out.String(), err)
			return
		}
		rss := int64(0)
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			rss = ru.Maxrss // KiB on Linux
			r.CPUS = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		}
		cs.Runs = append(cs.Runs, r)
		cs.MaxRSS = append(cs.MaxRSS, rss)
		cs.Wall = append(cs.Wall, wall)
		totals = append(totals, r.TotalS)
		lins = append(lins, r.LinearizableS)
		cs.PeakMiB = max(cs.PeakMiB, float64(rss)/1024)
		cs.ParseMiB = max(cs.ParseMiB, float64(r.HWMAfterParseKiB)/1024)
		cs.Verdict = r.Verdict
		logf("  total %.3fs (linearizable %.3fs), peak RSS %.0f MiB, verdict %s", r.TotalS, r.LinearizableS, float64(rss)/1024, r.Verdict)
	}
	cs.TotalS, cs.LinS = stats(totals), stats(lins)
	if cs.TotalS.Median > 0 {
		cs.OpsPerMinute = float64(cs.Synth.Ops) / cs.TotalS.Median * 60
	}
	if cs.LinS.Median > 0 {
		cs.LinOpsPerMinute = float64(cs.Synth.Ops) / cs.LinS.Median * 60
	}
}

func medianOf(rs []childResult, f func(childResult) float64) float64 {
	xs := make([]float64, len(rs))
	for i, r := range rs {
		xs[i] = f(r)
	}
	return median(xs)
}

func printChecker(cases []*checkerCase) {
	groups := []string{"size", "keys", "violation", "unknowns", "unknowns-violation"}
	titles := map[string]string{
		"size":               "Whole pipeline (read + history.Parse + pair + checkers.ForRun), valid synthetic histories",
		"keys":               "Same, fewer keys (more operations per key)",
		"violation":          "A violating history: time until the verdict is invalid, and report.Explain",
		"unknowns":           "Linearizable checker alone: unobserved unknown outcomes dropped (default) vs kept",
		"unknowns-violation": "Same with one lost update (the checker must exhaust the search to say invalid)",
	}
	for _, g := range groups {
		fmt.Printf("\n## %s\n", titles[g])
		tw := table(os.Stdout, "case", "MB", "parse s", "pair s", "linearizable s", "other checkers s", "total s (median)", "max", "CPU s", "ops/min", "peak RSS MiB", "RSS after parse MiB", "verdict", "explain s")
		for _, cs := range cases {
			if cs.Group != g {
				continue
			}
			if cs.Err != "" || len(cs.Runs) == 0 {
				row(tw, cs.Name, "error: "+cs.Err)
				continue
			}
			lin := medianOf(cs.Runs, func(r childResult) float64 { return r.LinearizableS })
			others := medianOf(cs.Runs, func(r childResult) float64 {
				t := 0.0
				for n, s := range r.CheckS {
					if n != "linearizable" {
						t += s
					}
				}
				return t
			})
			explain := "-"
			if cs.Explain {
				explain = fmt.Sprintf("%.3f", medianOf(cs.Runs, func(r childResult) float64 { return r.ExplainS }))
			}
			row(tw, cs.Name,
				fmt.Sprintf("%.1f", float64(cs.Runs[0].Bytes)/1e6),
				fmt.Sprintf("%.3f", medianOf(cs.Runs, func(r childResult) float64 { return r.ParseS })),
				fmt.Sprintf("%.3f", medianOf(cs.Runs, func(r childResult) float64 { return r.InputS })),
				fmt.Sprintf("%.3f", lin), fmt.Sprintf("%.3f", others),
				fmt.Sprintf("%.3f", cs.TotalS.Median), fmt.Sprintf("%.3f", cs.TotalS.Max),
				fmt.Sprintf("%.2f", medianOf(cs.Runs, func(r childResult) float64 { return r.CPUS })),
				fmt.Sprintf("%.2fM", cs.OpsPerMinute/1e6),
				fmt.Sprintf("%.0f", cs.PeakMiB), fmt.Sprintf("%.0f", cs.ParseMiB), cs.Verdict, explain)
		}
		tw.Flush()
	}
	// Ratios measured in this run.
	fmt.Println("\n## Ratios measured in this run")
	find := func(name string) *checkerCase {
		for _, cs := range cases {
			if cs.Name == name && len(cs.Runs) > 0 {
				return cs
			}
		}
		return nil
	}
	ratio := func(label, a, b string) {
		x, y := find(a), find(b)
		if x == nil || y == nil {
			return
		}
		fmt.Printf("%s: time x%.1f, peak RSS x%.1f (%s vs %s)\n", label, x.TotalS.Median/y.TotalS.Median, x.PeakMiB/y.PeakMiB, a, b)
	}
	// Before/after: Porcupine only (the old path) over chain-first.
	for _, cs := range cases {
		if !cs.PorcupineOnly {
			continue
		}
		after := find(strings.TrimSuffix(cs.Name, ", Porcupine only"))
		if after == nil {
			continue
		}
		if len(cs.Runs) == 0 {
			fmt.Printf("before/after, %s: Porcupine only failed (%s); chain-first %.3fs, peak RSS %.0f MiB\n", after.Name, cs.Err, after.TotalS.Median, after.PeakMiB)
			continue
		}
		cpu := func(c *checkerCase) float64 { return medianOf(c.Runs, func(r childResult) float64 { return r.CPUS }) }
		fmt.Printf("before/after, %s: whole pipeline x%.2f faster (%.3fs vs %.3fs; CPU x%.2f, %.2fs vs %.2fs), linearizable x%.1f faster (%.3fs vs %.3fs), peak RSS x%.2f smaller (%.0f vs %.0f MiB), verdicts %s vs %s\n",
			after.Name, cs.TotalS.Median/after.TotalS.Median, cs.TotalS.Median, after.TotalS.Median, cpu(cs)/cpu(after), cpu(cs), cpu(after),
			cs.LinS.Median/after.LinS.Median, cs.LinS.Median, after.LinS.Median,
			cs.PeakMiB/after.PeakMiB, cs.PeakMiB, after.PeakMiB, cs.Verdict, after.Verdict)
	}
	ratio("100k vs 10k ops (x10 ops)", "100000 ops, 64 keys", "10000 ops, 64 keys")
	ratio("1M vs 100k ops (x10 ops)", "1000000 ops, 64 keys", "100000 ops, 64 keys")
	ratio("3 vs 64 keys at 100k ops", "100000 ops, 3 keys", "100000 ops, 64 keys")
	ratio("1 vs 64 keys at 1M ops", "1000000 ops, 1 key", "1000000 ops, 64 keys")
	for _, g := range []string{"unknowns", "unknowns-violation"} {
		for _, cs := range cases {
			if cs.Group != g || cs.Keep || len(cs.Runs) == 0 {
				continue
			}
			kept := find(strings.Replace(cs.Name, "dropped", "kept", 1))
			if kept == nil {
				continue
			}
			fmt.Printf("kept vs dropped, %s: linearizable time x%.1f (%.3fs vs %.3fs), peak RSS x%.2f, verdicts %s vs %s\n",
				strings.Replace(cs.Name, ", dropped", "", 1), kept.LinS.Median/cs.LinS.Median, kept.LinS.Median, cs.LinS.Median,
				kept.PeakMiB/cs.PeakMiB, kept.Verdict, cs.Verdict)
		}
	}
}

func checkerTargets(cases []*checkerCase) []Target {
	var out []Target
	for _, w := range []struct {
		name, want string
		secs, gib  float64
	}{
		{"1000000 ops, 1 key", "< 3 s, < 1 GiB, valid", 3, 1},
		{"1000000 ops, 64 keys", "< 4 s, valid", 4, 0},
	} {
		t := Target{Name: "whole pipeline, " + w.name, Want: w.want}
		for _, cs := range cases {
			if cs.Name == w.name && len(cs.Runs) > 0 {
				t.Measured, t.Value = true, cs.TotalS.Median
				t.Met = cs.TotalS.Median < w.secs && cs.Verdict == "valid" && (w.gib == 0 || cs.PeakMiB < w.gib*1024)
				t.Got = fmt.Sprintf("%.2fs (CPU-bound; see the load in the header), peak %.0f MiB", cs.TotalS.Median, cs.PeakMiB)
			}
		}
		out = append(out, t)
	}
	t := Target{Name: "checker throughput (1M ops, 64 keys, whole pipeline)", Want: ">= 1,000,000 ops/min"}
	for _, cs := range cases {
		if cs.Group == "size" && cs.Synth.Ops == 1_000_000 && !cs.PorcupineOnly && len(cs.Runs) > 0 {
			t.Measured, t.Value = true, cs.OpsPerMinute
			t.Met = cs.OpsPerMinute >= 1e6 && cs.Verdict == "valid"
			t.Got = fmt.Sprintf("%.2fM ops/min (%.2fs, peak %.0f MiB)", cs.OpsPerMinute/1e6, cs.TotalS.Median, cs.PeakMiB)
		}
	}
	out = append(out, t)
	for _, cs := range cases {
		if cs.Group != "violation" || cs.PorcupineOnly {
			continue
		}
		v := Target{Name: "violation reported (" + cs.Name + ")", Want: "< 5 s, invalid"}
		if len(cs.Runs) > 0 {
			v.Measured, v.Value = true, cs.TotalS.Max
			v.Met = cs.TotalS.Max < 5 && cs.Verdict == "invalid"
			v.Got = fmt.Sprintf("%.2fs max (median %.2fs), %s; explain %.2fs", cs.TotalS.Max, cs.TotalS.Median, cs.Verdict,
				medianOf(cs.Runs, func(r childResult) float64 { return r.ExplainS }))
		}
		out = append(out, v)
	}
	return out
}

// checkCLI is one run of the real `splitbrain check` on a generated
// history: its peak RSS against the history's size.
type checkCLI struct {
	Name     string  `json:"name"`
	Report   bool    `json:"report"`
	Bytes    int64   `json:"bytes"`
	WallS    float64 `json:"wall_s"`
	CPUS     float64 `json:"cpu_s"`
	PeakMiB  float64 `json:"peak_rss_mib"`
	PerByte  float64 `json:"peak_per_history_byte"`
	ExitCode int     `json:"exit"`
	Err      string  `json:"error,omitempty"`
}

// measureCheckCLI builds the splitbrain command and checks the 1M-operation
// histories (and the 100k one) with it, without and with report.html.
func measureCheckCLI(work string, files map[string]string, cases []*checkerCase) []*checkCLI {
	bin := filepath.Join(work, "splitbrain")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/splitbrain").CombinedOutput(); err != nil {
		logf("splitbrain check not measured: go build: %v: %s", err, out)
		return nil
	}
	var out []*checkCLI
	seen := map[string]bool{}
	for _, cs := range cases {
		if cs.PorcupineOnly || cs.Mode != "pipeline" || (cs.Synth.Ops != 1_000_000 && cs.Name != "100000 ops, 64 keys") || seen[cs.Name] {
			continue
		}
		seen[cs.Name] = true
		path := files[fmt.Sprintf("%+v", cs.Synth)]
		dir := filepath.Join(work, fmt.Sprintf("check%d", len(seen)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			continue
		}
		if err := os.Symlink(path, filepath.Join(dir, "history.jsonl")); err != nil {
			continue
		}
		st, err := os.Stat(path)
		if err != nil {
			continue
		}
		for _, withReport := range []bool{false, true} {
			c := &checkCLI{Name: cs.Name, Report: withReport, Bytes: st.Size()}
			args := []string{"check", dir}
			if !withReport {
				args = []string{"check", "--no-report", dir}
			}
			cmd := exec.Command(bin, args...)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			start := time.Now()
			err := cmd.Run()
			c.WallS = time.Since(start).Seconds()
			c.ExitCode = cmd.ProcessState.ExitCode()
			if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
				c.PeakMiB = float64(ru.Maxrss) / 1024
				c.CPUS = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
			}
			c.PerByte = c.PeakMiB * (1 << 20) / float64(c.Bytes)
			if err != nil && c.ExitCode > 2 {
				c.Err = strings.TrimSpace(errb.String())
			}
			logf("splitbrain check %s (report %v): %.2fs, peak RSS %.0f MiB = %.2fx the history, exit %d", c.Name, withReport, c.WallS, c.PeakMiB, c.PerByte, c.ExitCode)
			out = append(out, c)
		}
	}
	return out
}

func printCheckCLI(checks []*checkCLI) {
	if len(checks) == 0 {
		return
	}
	fmt.Println("\n## `splitbrain check` (the real command), peak RSS against the history's size")
	tw := table(os.Stdout, "history", "report.html", "MB", "wall s", "CPU s", "peak RSS MiB", "peak / history size", "exit")
	for _, c := range checks {
		row(tw, c.Name, fmt.Sprint(c.Report), fmt.Sprintf("%.1f", float64(c.Bytes)/1e6), fmt.Sprintf("%.2f", c.WallS), fmt.Sprintf("%.2f", c.CPUS),
			fmt.Sprintf("%.0f", c.PeakMiB), fmt.Sprintf("%.2fx", c.PerByte), fmt.Sprint(c.ExitCode))
	}
	tw.Flush()
}

func checkCLITargets(checks []*checkCLI) []Target {
	t := Target{Name: "peak memory of `splitbrain check --no-report`, 1M ops", Want: "<= 3x the history's size"}
	tr := Target{Name: "peak memory of `splitbrain check` with report.html, 1M ops", Want: "<= 3x the history's size"}
	for _, c := range checks {
		if !strings.HasPrefix(c.Name, "1000000 ") {
			continue
		}
		tt := &t
		if c.Report {
			tt = &tr
		}
		if !tt.Measured || c.PerByte > tt.Value {
			tt.Measured, tt.Value = true, c.PerByte
			tt.Met = c.PerByte <= 3 && c.Err == ""
			tt.Got = fmt.Sprintf("worst %.2fx (%s: %.0f MiB for %.0f MB)", c.PerByte, c.Name, c.PeakMiB, float64(c.Bytes)/1e6)
		}
	}
	return []Target{t, tr}
}
