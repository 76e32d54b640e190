package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/report"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/docker"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/workloads"
)

// detectRun is one harness run of the detection benchmark.
type detectRun struct {
	Target   string `json:"target"`
	Schedule string `json:"schedule"`
	Seed     uint64 `json:"seed"`
	Verdict  string `json:"verdict"`
	// FirstLateMS is the test time (from the first invocation) at which
	// the first late write the store accepted completed; -1 when none.
	FirstLateMS float64 `json:"first_accepted_late_write_ms"`
	// FirstExplainedMS is the completion time of the late writer of
	// report.Explain's earliest anomaly; -1 when it found none.
	FirstExplainedMS float64 `json:"first_explained_anomaly_ms"`
	Anomalies        int     `json:"anomalies"`
	LateAccepted     int     `json:"late_accepted"`
	LostUpdates      int64   `json:"lost_updates"`
	// Faults counts the pauses by target group (holder, client, node, store).
	Faults      map[string]int `json:"faults"`
	FirstFaultS float64        `json:"first_fault_s"`
	OKOps       int            `json:"ok_ops"`
	DurationS   float64        `json:"run_s"`
	Dir         string         `json:"dir,omitempty"`
	Err         string         `json:"error,omitempty"`
}

// detectSummary is one (target, schedule) cell.
type detectSummary struct {
	Target        string  `json:"target"`
	Schedule      string  `json:"schedule"`
	PauseTargets  string  `json:"pause_targets"`
	Runs          int     `json:"runs"`
	Detected      int     `json:"detected"`
	Fraction      float64 `json:"fraction_detected"`
	MedianFirstS  float64 `json:"median_first_anomaly_s"`
	P90FirstS     float64 `json:"p90_first_anomaly_s"`
	MaxFirstS     float64 `json:"max_first_anomaly_s"`
	MedianExplS   float64 `json:"median_first_explained_s"`
	By10, By20    float64 `json:"-"`
	DetectedBy10s float64 `json:"fraction_detected_by_10s"`
	DetectedBy20s float64 `json:"fraction_detected_by_20s"`
	MeanFaults    float64 `json:"mean_faults"`
	MeanHolder    float64 `json:"mean_holder_pauses"`
	Errors        int     `json:"errors"`
}

type detectData struct {
	TimeLimit float64           `json:"time_limit_s"`
	Seeds     []uint64          `json:"seeds"`
	Schedules map[string]string `json:"schedules"`
	Runs      []detectRun       `json:"runs"`
	Summary   []detectSummary   `json:"summary"`
}

func runDetect(args []string) error {
	var c common
	fs := newFlags("detect", &c)
	seeds := fs.Int("seeds", 20, "seeds per target and schedule (1..N)")
	limit := fs.Duration("time-limit", 30*time.Second, "test phase of each run")
	tgts := fs.String("targets", "redis,etcd", "targets")
	schedules := fs.String("schedules", "default=holder=3,node=1;uniform=client=1,node=1,store=1", "name=--pause-targets pairs, ';'-separated")
	results := fs.String("results", "", "keep the run directories here (default: a temporary directory, removed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.begin("detect", args)
	sched := map[string]string{}
	var schedNames []string
	for _, p := range strings.Split(*schedules, ";") {
		name, w, ok := strings.Cut(p, "=")
		if !ok {
			return fmt.Errorf("--schedules: %q: want name=weights", p)
		}
		if _, err := nemesis.ParseWeights(w, nemesis.PauseGroups); err != nil {
			return fmt.Errorf("--schedules: %s: %w", name, err)
		}
		sched[name] = w
		schedNames = append(schedNames, name)
	}
	targetNames := splitComma(*tgts)
	roles := []string{runtime.RoleStore, runtime.RoleClient}
	for _, t := range targetNames {
		b, err := targets.Lookup(t)
		if err != nil {
			return err
		}
		roles = append(roles, b.RoleNames()...)
	}
	ctx := context.Background()
	env, err := connectDocker(ctx, roles...)
	if err != nil {
		return err
	}
	defer env.Close()
	resDir := *results
	if resDir == "" {
		d, err := os.MkdirTemp("", "splitbrain-bench-detect-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		resDir = d
	}
	data := detectData{TimeLimit: limit.Seconds(), Schedules: sched}
	for s := 1; s <= *seeds; s++ {
		data.Seeds = append(data.Seeds, uint64(s))
	}
	total := len(targetNames) * len(schedNames) * *seeds
	n := 0
	// Interleave targets and schedules seed by seed, so that load from
	// elsewhere falls on all cells alike.
	for _, seed := range data.Seeds {
		for _, t := range targetNames {
			for _, sn := range schedNames {
				n++
				r := detectOne(ctx, env, t, sn, sched[sn], seed, *limit, resDir)
				if *results == "" {
					r.Dir = ""
				}
				data.Runs = append(data.Runs, r)
				logf("[%d/%d] %s %s seed %d: %s, first anomaly %s, faults %v %s", n, total, t, sn, seed, r.Verdict, fmtMS(r.FirstLateMS), r.Faults, r.Err)
			}
		}
	}
	for _, t := range targetNames {
		for _, sn := range schedNames {
			data.Summary = append(data.Summary, summarizeDetect(data.Runs, t, sn, sched[sn]))
		}
	}
	printDetect(&data)
	var targets []Target
	for _, s := range data.Summary {
		if s.Schedule != schedNames[0] {
			continue
		}
		tg := Target{Name: fmt.Sprintf("detection, %s, %s schedule (%s), %d runs of %v", s.Target, s.Schedule, s.PauseTargets, s.Runs, *limit), Want: ">= 95% of runs invalid"}
		if s.Runs > 0 {
			tg.Measured, tg.Value, tg.Met = true, s.Fraction, s.Fraction >= 0.95
			tg.Got = fmt.Sprintf("%.0f%% (%d/%d), median first anomaly %.1fs", 100*s.Fraction, s.Detected, s.Runs, s.MedianFirstS)
		}
		targets = append(targets, tg)
	}
	return c.finish(targets, data)
}

func fmtMS(x float64) string {
	if x < 0 {
		return "none"
	}
	return fmt.Sprintf("%.1fs", x/1000)
}

func detectOne(ctx context.Context, env *dockerEnv, target, schedName, weights string, seed uint64, limit time.Duration, resDir string) detectRun {
	r := detectRun{Target: target, Schedule: schedName, Seed: seed, FirstLateMS: -1, FirstExplainedMS: -1, Faults: map[string]int{}}
	cfg := harness.DefaultConfig()
	cfg.Target, cfg.Workload, cfg.Nemesis = target, workloads.UnfencedCounter, "pause"
	cfg.TimeLimit, cfg.Seed = limit, seed
	w, _ := nemesis.ParseWeights(weights, nemesis.PauseGroups) // checked with the flags
	nemesis.SpecOf[*nemesis.PauseSpec](cfg.Faults).Targets = w
	cfg.ResultsDir = filepath.Join(resDir, target+"-"+schedName+"-"+strconv.FormatUint(seed, 10))
	start := time.Now()
	out, err := harness.Run(ctx, cfg, env.harnessDeps(slog.New(slog.DiscardHandler), docker.ControlAuto))
	r.DurationS = time.Since(start).Seconds()
	if err != nil {
		r.Err = err.Error()
		r.Verdict = "error"
		return r
	}
	r.Dir = out.Dir
	r.Verdict = out.Results.Valid.String()
	if s, ok := out.Results.Checkers["summary"].Details.(*checkers.SummaryDetails); ok {
		r.LostUpdates = s.LostUpdates
		r.OKOps = s.OK
	}
	evs, _, err := history.ReadFile(filepath.Join(out.Dir, "history.jsonl"))
	if err != nil {
		r.Err = err.Error()
		return r
	}
	in := checkers.NewInput(evs)
	t0 := int64(-1)
	for _, op := range in.Ops {
		if op.Invoke.F == history.FCriticalSection && (t0 < 0 || op.Invoke.Time < t0) {
			t0 = op.Invoke.Time
		}
	}
	// Faults by group: a pause of a client that held a lock counts as a
	// holder pause when the fault started inside one of its holds.
	holds := checkers.Holds(in)
	for _, w := range checkers.Windows(in.Faults) {
		if r.FirstFaultS == 0 && t0 >= 0 {
			r.FirstFaultS = time.Duration(w.Start - t0).Seconds()
		}
		r.Faults[faultGroup(w, holds)]++
	}
	late, accepted := firstAcceptedLateWrite(in, holds)
	r.LateAccepted = accepted
	if late >= 0 && t0 >= 0 {
		r.FirstLateMS = ms(time.Duration(late - t0))
	}
	var illegal []string
	if d, ok := out.Results.Checkers["linearizable"].Details.(*checkers.LinearizableDetails); ok {
		illegal = d.IllegalKeys
	}
	as := report.Explain(evs, report.ExplainOptions{LeaseTTL: cfg.LeaseTTL, IllegalKeys: illegal})
	r.Anomalies = len(as)
	first := int64(-1)
	for _, a := range as {
		if a.Late != nil && a.Late.Complete > 0 && (first < 0 || a.Late.Complete < first) {
			first = a.Late.Complete
		}
	}
	if first >= 0 && t0 >= 0 {
		r.FirstExplainedMS = ms(time.Duration(first - t0))
	}
	return r
}

// faultGroup classifies a pause window by its target.
func faultGroup(w checkers.Window, holds []checkers.Hold) string {
	if len(w.Targets) != 1 {
		return "other"
	}
	t := w.Targets[0]
	switch {
	case t == "store":
		return "store"
	case strings.HasPrefix(t, "n"):
		return "node"
	case strings.HasPrefix(t, "c"):
		for _, h := range holds {
			if h.Client == t && h.Start <= w.Start && w.Start < h.End && (h.WriteAt == 0 || w.Start < h.WriteAt) {
				return "holder"
			}
		}
		return "client"
	}
	return "other"
}

// firstAcceptedLateWrite is the completion time of the earliest accepted
// late write (a write sent after a newer holder of its key was granted,
// as checkers.Fencing defines it), and how many there were.
func firstAcceptedLateWrite(in checkers.Input, holds []checkers.Hold) (int64, int) {
	done := map[int64]int64{}
	for _, op := range in.Ops {
		if op.Complete != nil {
			done[op.Invoke.ID] = op.Complete.Time
		}
	}
	byKey := map[string][]checkers.Hold{}
	for _, h := range holds {
		byKey[h.Key] = append(byKey[h.Key], h)
	}
	first, n := int64(-1), 0
	for _, hs := range byKey {
		for _, w := range hs {
			if w.WriteAt == 0 || w.Outcome != history.OK {
				continue
			}
			j := sort.Search(len(hs), func(j int) bool { return hs[j].Start > w.Start })
			if j == len(hs) || hs[j].Start >= w.WriteAt {
				continue
			}
			n++
			if t := done[w.ID]; first < 0 || t < first {
				first = t
			}
		}
	}
	return first, n
}

func summarizeDetect(runs []detectRun, target, sched, weights string) detectSummary {
	s := detectSummary{Target: target, Schedule: sched, PauseTargets: weights}
	var firsts, expl []float64
	var faults, holder float64
	for _, r := range runs {
		if r.Target != target || r.Schedule != sched {
			continue
		}
		if r.Err != "" {
			s.Errors++
			continue
		}
		s.Runs++
		for g, k := range r.Faults {
			faults += float64(k)
			if g == "holder" {
				holder += float64(k)
			}
		}
		if r.Verdict == checkers.Invalid.String() {
			s.Detected++
			t := r.FirstLateMS
			if t < 0 {
				t = r.FirstExplainedMS
			}
			if t >= 0 {
				firsts = append(firsts, t/1000)
				if t <= 10_000 {
					s.By10++
				}
				if t <= 20_000 {
					s.By20++
				}
			}
			if r.FirstExplainedMS >= 0 {
				expl = append(expl, r.FirstExplainedMS/1000)
			}
		}
	}
	if s.Runs > 0 {
		s.Fraction = float64(s.Detected) / float64(s.Runs)
		s.DetectedBy10s, s.DetectedBy20s = s.By10/float64(s.Runs), s.By20/float64(s.Runs)
		s.MeanFaults, s.MeanHolder = faults/float64(s.Runs), holder/float64(s.Runs)
	}
	st := stats(firsts)
	s.MedianFirstS, s.P90FirstS, s.MaxFirstS = st.Median, st.P90, st.Max
	s.MedianExplS = median(expl)
	return s
}

func printDetect(d *detectData) {
	fmt.Printf("## unfenced-counter under pause, %d seeds x %.0fs per target and schedule\n", len(d.Seeds), d.TimeLimit)
	tw := table(os.Stdout, "target", "schedule", "--pause-targets", "runs", "invalid", "fraction", "by 10s", "by 20s",
		"median first anomaly s", "p90", "max", "median explained s", "faults/run", "holder pauses/run", "errors")
	for _, s := range d.Summary {
		row(tw, s.Target, s.Schedule, s.PauseTargets, strconv.Itoa(s.Runs), strconv.Itoa(s.Detected),
			fmt.Sprintf("%.0f%%", 100*s.Fraction), fmt.Sprintf("%.0f%%", 100*s.DetectedBy10s), fmt.Sprintf("%.0f%%", 100*s.DetectedBy20s),
			fmt.Sprintf("%.1f", s.MedianFirstS), fmt.Sprintf("%.1f", s.P90FirstS), fmt.Sprintf("%.1f", s.MaxFirstS),
			fmt.Sprintf("%.1f", s.MedianExplS), fmt.Sprintf("%.1f", s.MeanFaults), fmt.Sprintf("%.1f", s.MeanHolder), strconv.Itoa(s.Errors))
	}
	tw.Flush()
	fmt.Println("\nfirst anomaly = completion time (test time, from the first invocation) of the first late write the store accepted;")
	fmt.Println("explained = completion of the late writer of report.Explain's earliest anomaly")

	fmt.Println("\n## Runs")
	tw = table(os.Stdout, "target", "schedule", "seed", "verdict", "first anomaly", "explained", "late accepted", "lost", "faults")
	for _, r := range d.Runs {
		var fl []string
		for g, k := range r.Faults {
			fl = append(fl, fmt.Sprintf("%s=%d", g, k))
		}
		slices.Sort(fl)
		row(tw, r.Target, r.Schedule, strconv.FormatUint(r.Seed, 10), r.Verdict, fmtMS(r.FirstLateMS), fmtMS(r.FirstExplainedMS),
			strconv.Itoa(r.LateAccepted), strconv.FormatInt(r.LostUpdates, 10), strings.Join(fl, ","))
	}
	tw.Flush()

	fmt.Println("\n## Ratios measured in this run")
	for i := 0; i+1 < len(d.Summary); i += 2 {
		a, b := d.Summary[i], d.Summary[i+1]
		if a.Target != b.Target {
			continue
		}
		ratio := "n/a"
		if a.MedianFirstS > 0 && b.MedianFirstS > 0 {
			ratio = fmt.Sprintf("%.2fx", b.MedianFirstS/a.MedianFirstS)
		}
		fmt.Printf("%s: detected %s %.0f%% vs %s %.0f%%; median time to first anomaly %s/%s = %s\n",
			a.Target, a.Schedule, 100*a.Fraction, b.Schedule, 100*b.Fraction, b.Schedule, a.Schedule, ratio)
	}
}
