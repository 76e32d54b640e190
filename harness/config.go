package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/internal/clockskew"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/nemesis/clock"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/redis"
	"github.com/splitbrain/splitbrain/workloads"
)

// InputError is a problem with what the user asked for (a flag, a config,
// a history file). The CLI exits 254 on it.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// BadInput wraps err as an InputError.
func BadInput(format string, args ...any) error {
	return &InputError{Err: fmt.Errorf(format, args...)}
}

// IsBadInput reports whether err is (or wraps) an InputError.
func IsBadInput(err error) bool {
	var ie *InputError
	return errors.As(err, &ie)
}

// Config is everything a run is made of. The zero value is not usable;
// start from [DefaultConfig].
type Config struct {
	Target   string `json:"target"`
	Workload string `json:"workload"`
	// Nemesis is a comma-separated list of nemeses ("pause", "none").
	Nemesis   string        `json:"nemesis"`
	TimeLimit time.Duration `json:"time_limit_ns"`
	// Concurrency is the number of client agents.
	Concurrency int `json:"concurrency"`
	// Keys is the number of independent counters.
	Keys int `json:"keys"`
	// LeaseTTL is the lock's time to live.
	LeaseTTL time.Duration `json:"lease_ttl_ns"`
	// Work is the time a holder spends between its read and its write.
	Work time.Duration `json:"work_ns"`
	// NemesisInterval is the mean quiet time between faults.
	NemesisInterval time.Duration `json:"nemesis_interval_ns"`
	// FaultMin and FaultMax bound each fault's length; zero derives them
	// from the lease TTL (a pause must outlive the lease to matter).
	FaultMin time.Duration `json:"fault_min_ns"`
	FaultMax time.Duration `json:"fault_max_ns"`
	// PauseTargets weighs the pause nemesis's target groups
	// ("holder=2,node=1").
	PauseTargets string `json:"pause_targets"`
	// KillTargets weighs the kill nemesis's target groups.
	KillTargets string `json:"kill_targets"`
	// ClockTargets weighs the clock nemesis's target groups (holder,
	// client, node).
	ClockTargets string `json:"clock_targets"`
	// ClockModes lists the clock nemesis's modes to draw from ("bump",
	// "strobe").
	ClockModes string `json:"clock_modes"`
	// ClockMin and ClockMax bound the size of a clock offset; zero
	// derives them from the lease TTL (TTL .. 3×TTL: a jump that matters).
	ClockMin time.Duration `json:"clock_min_ns"`
	ClockMax time.Duration `json:"clock_max_ns"`
	// ClockDirection is forward, backward or both.
	ClockDirection string `json:"clock_direction"`
	// ClockMonotonic also skews CLOCK_MONOTONIC, which etcd and lockd time
	// their leases with (CLOCK_REALTIME is always skewed).
	ClockMonotonic bool `json:"clock_monotonic"`
	// ClockStrobeMin and ClockStrobeMax bound a strobe's time between
	// flips.
	ClockStrobeMin time.Duration `json:"clock_strobe_min_ns"`
	ClockStrobeMax time.Duration `json:"clock_strobe_max_ns"`
	// Partitions lists the partition topologies to draw from; empty means
	// every topology the target's size allows.
	Partitions     string        `json:"partitions"`
	AcquireTimeout time.Duration `json:"acquire_timeout_ns"`
	StoreTimeout   time.Duration `json:"store_timeout_ns"`
	// OpTimeout is how long the harness waits for one operation.
	OpTimeout time.Duration `json:"op_timeout_ns"`
	// CheckTimeout bounds the linearizability check.
	CheckTimeout time.Duration `json:"check_timeout_ns"`
	// Seed makes the schedule and client choices reproducible; zero picks
	// one (recorded in results.json).
	Seed uint64 `json:"seed"`
	// ResultsDir is where run directories are created.
	ResultsDir string `json:"results_dir"`
	// Keep leaves the containers and network after the run.
	Keep bool `json:"keep"`
	// RecipeOptions are lock-recipe switches (anti-patterns).
	RecipeOptions map[string]string `json:"recipe_options,omitempty"`
	// Bypass lists clients ("c1,c2") that write without lock or token, a
	// bypass writer beside the others (anti-pattern 6).
	Bypass string `json:"bypass,omitempty"`
}

// DefaultConfig is a 30 s Redis unfenced-counter run under pauses.
func DefaultConfig() Config {
	return Config{
		Target:          "redis",
		Workload:        workloads.UnfencedCounter,
		Nemesis:         "pause",
		TimeLimit:       30 * time.Second,
		Concurrency:     5,
		Keys:            3,
		LeaseTTL:        2 * time.Second,
		Work:            100 * time.Millisecond,
		NemesisInterval: 3 * time.Second,
		PauseTargets:    "holder=3,node=1",
		KillTargets:     "node=2,holder=1",
		ClockTargets:    "node=1,holder=1,client=1",
		ClockModes:      "bump,strobe",
		ClockDirection:  clock.DirBoth,
		ClockStrobeMin:  50 * time.Millisecond,
		ClockStrobeMax:  200 * time.Millisecond,
		AcquireTimeout:  5 * time.Second,
		StoreTimeout:    time.Second,
		OpTimeout:       30 * time.Second,
		CheckTimeout:    time.Minute,
		ResultsDir:      "results",
	}
}

// Schedule is the nemesis schedule the config asks for.
func (c Config) Schedule() nemesis.Schedule {
	lo, hi := c.FaultMin, c.FaultMax
	if lo == 0 {
		lo = c.LeaseTTL + time.Second
	}
	if hi == 0 {
		hi = max(lo, 2*c.LeaseTTL+time.Second)
	}
	return nemesis.Schedule{Interval: c.NemesisInterval, MinDuration: lo, MaxDuration: hi}
}

// Validate returns an InputError naming the first problem. known maps
// target names to targets.
func (c Config) Validate(known map[string]targets.Target) error {
	var targetNames []string
	for n := range known {
		targetNames = append(targetNames, n)
	}
	slices.Sort(targetNames)
	switch {
	case !slices.Contains(targetNames, c.Target):
		return BadInput("unknown target %q (known: %s)", c.Target, strings.Join(targetNames, ", "))
	case !slices.Contains(workloads.Names(), c.Workload):
		return BadInput("unknown workload %q (known: %s)", c.Workload, strings.Join(workloads.Names(), ", "))
	case c.TimeLimit <= 0:
		return BadInput("--time-limit must be positive, got %v", c.TimeLimit)
	case c.Concurrency < 1 || c.Concurrency > 200:
		return BadInput("--concurrency must be 1..200, got %d", c.Concurrency)
	case c.Keys < 1:
		return BadInput("--keys must be at least 1, got %d", c.Keys)
	case c.LeaseTTL <= 0:
		return BadInput("--lease-ttl must be positive, got %v", c.LeaseTTL)
	case c.Work < 0:
		return BadInput("--work must not be negative, got %v", c.Work)
	case c.AcquireTimeout <= 0 || c.StoreTimeout <= 0 || c.OpTimeout <= 0 || c.CheckTimeout <= 0:
		return BadInput("timeouts must be positive")
	case c.ResultsDir == "":
		return BadInput("--results must name a directory")
	}
	if err := c.Schedule().Validate(); err != nil {
		return BadInput("%v (check --nemesis-interval, --fault-min, --fault-max)", err)
	}
	if _, err := nemesis.ParseWeights(c.PauseTargets, nemesis.PauseGroups); err != nil {
		return BadInput("--pause-targets: %v", err)
	}
	if _, err := nemesis.ParseWeights(c.KillTargets, nemesis.KillGroups); err != nil {
		return BadInput("--kill-targets: %v", err)
	}
	if _, err := nemesis.ParseWeights(c.ClockTargets, clock.Groups); err != nil {
		return BadInput("--clock-targets: %v", err)
	}
	if err := c.clockNemesis().Validate(); err != nil {
		return BadInput("clock nemesis: %v (check --clock-modes, --clock-min, --clock-max, --clock-direction)", err)
	}
	nems, err := nemesis.Parse(c.Nemesis, Nemeses(c, known[c.Target]))
	if err != nil {
		return BadInput("--nemesis: %v", err)
	}
	for _, n := range nems {
		if p, ok := n.(*nemesis.Partition); ok && len(p.Topologies) == 0 {
			return BadInput("--nemesis partition: no topology fits target %s", c.Target)
		}
	}
	if c.Partitions != "" {
		size, leads := shape(known[c.Target])
		for _, t := range splitList(c.Partitions) {
			if err := nemesis.CheckTopology(t, size, leads); err != nil {
				return BadInput("--partitions: %v", err)
			}
		}
	}
	return checkWritable(c.ResultsDir)
}

// shape is a target's lock-node count and whether one leads (1, false when
// the target does not say).
func shape(t targets.Target) (int, bool) {
	if s, ok := t.(targets.Sizer); ok {
		return s.Size(), s.Leads()
	}
	return 1, false
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// checkWritable makes sure dir exists (creating it) and can be written.
func checkWritable(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return BadInput("results directory %s cannot be created (choose another with --results): %v", dir, err)
	}
	f, err := os.CreateTemp(dir, ".probe-")
	if err != nil {
		return BadInput("results directory %s is not writable (fix its permissions or choose another with --results): %v", dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}

// Nemeses returns the nemeses a config can name for target t.
func Nemeses(c Config, t targets.Target) map[string]nemesis.Nemesis {
	pw, err := nemesis.ParseWeights(c.PauseTargets, nemesis.PauseGroups)
	if err != nil {
		pw = map[string]int{nemesis.GroupHolder: 1}
	}
	kw, err := nemesis.ParseWeights(c.KillTargets, nemesis.KillGroups)
	if err != nil {
		kw = map[string]int{nemesis.GroupNode: 1}
	}
	topos := splitList(c.Partitions)
	if len(topos) == 0 {
		size, leads := shape(t)
		for _, name := range nemesis.Topologies() {
			if nemesis.CheckTopology(name, size, leads) == nil {
				topos = append(topos, name)
			}
		}
	}
	return map[string]nemesis.Nemesis{
		"clock":     c.clockNemesis(),
		"pause":     &nemesis.Pause{Weights: pw, HolderWait: time.Second},
		"kill":      &nemesis.Kill{Weights: kw, HolderWait: time.Second},
		"partition": &nemesis.Partition{Topologies: topos},
	}
}

// ClockOffsets is the size range of the clock nemesis's offsets: ClockMin
// and ClockMax, or TTL .. 3×TTL where they are zero.
func (c Config) ClockOffsets() (lo, hi time.Duration) {
	lo, hi = c.ClockMin, c.ClockMax
	if lo == 0 {
		lo = c.LeaseTTL
	}
	if hi == 0 {
		hi = max(lo, 3*c.LeaseTTL)
	}
	return lo, hi
}

// clockNemesis is the clock nemesis the config asks for. Redis nodes are
// skewed through the LD_PRELOAD shim (verified by the server's TIME), all
// other processes by vDSO injection.
func (c Config) clockNemesis() *clock.Nemesis {
	w, err := nemesis.ParseWeights(c.ClockTargets, clock.Groups)
	if err != nil {
		w = map[string]int{nemesis.GroupNode: 1}
	}
	lo, hi := c.ClockOffsets()
	return &clock.Nemesis{
		Modes: splitList(c.ClockModes), Weights: w, MinOffset: lo, MaxOffset: hi,
		Direction: c.ClockDirection, Monotonic: c.ClockMonotonic,
		StrobeMin: c.ClockStrobeMin, StrobeMax: c.ClockStrobeMax, HolderWait: time.Second,
		Shims: map[string]clockskew.Shim{redis.Role: {Now: redis.ServerTime}},
	}
}

// runDirName is the results directory of a run: target-workload-nemesis.
func (c Config) runDirName() string {
	nem := strings.ReplaceAll(c.Nemesis, ",", "+")
	if nem == "" {
		nem = "none"
	}
	return filepath.Join(c.ResultsDir, fmt.Sprintf("%s-%s-%s", c.Target, c.Workload, nem))
}
