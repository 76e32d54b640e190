package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/store"
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

// MaxKeys bounds --keys: each key is a lock and a counter, checked on its
// own; past a thousand a run measures the harness, not the lock.
const MaxKeys = 1000

// Config is everything a run is made of. The zero value is not usable;
// start from [DefaultConfig].
type Config struct {
	Target   string `json:"target"`
	Workload string `json:"workload"`
	// Nemesis is a comma-separated list of nemeses ("pause", "none").
	Nemesis   string        `json:"nemesis"`
	TimeLimit time.Duration `json:"time_limit_ns"`
	// EndAfterFaults, when positive, ends the test phase before TimeLimit
	// once that many faults have ended and what they did was observed:
	// every critical section in flight when the last of them ended has
	// completed, and every key has completed one since (a run that forces
	// an event ends once the event happened and its outcome is in the
	// history). No fault starts after the n-th has ended. TimeLimit still
	// bounds the phase.
	EndAfterFaults int `json:"end_after_faults,omitempty"`
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
	// Faults holds each fault's settings, by name (see
	// [nemesis.Register]); those of the faults named in Nemesis are used.
	// [DefaultConfig] has every registered fault's defaults; a missing
	// name stands for its defaults.
	Faults nemesis.Specs `json:"faults"`
	// FaultOverlap gives each fault kind its own schedule, so that faults
	// of different kinds are in force at once (nemesis.Schedule.Overlap).
	FaultOverlap bool `json:"fault_overlap,omitempty"`
	// FaultsOptional judges a run in which a requested fault never came
	// into force; by default such a run is not tested ([Results.Landed]).
	FaultsOptional bool          `json:"faults_optional,omitempty"`
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
	// Serial sends a client's next operation only once its previous one is
	// done, even where it could be pipelined (workloads.CounterOptions).
	Serial bool `json:"serial,omitempty"`
	// Client is the lock client the agents use: a registered client of
	// the target (a library: "redsync", "redis-py"), or the command line
	// of an adapter the user brings ("python3 my_lock.py"), driven through
	// the client protocol; empty means the target's own recipe.
	Client string `json:"client,omitempty"`
	// ClientFiles is a directory whose files go into the client image, in
	// the adapter's working directory (/opt/splitbrain/client).
	ClientFiles string `json:"client_files,omitempty"`
	// ClientPackages are Debian packages the client image gets for it.
	ClientPackages []string `json:"client_packages,omitempty"`
	// Store is the kind of counter store (--store; store.Names); empty
	// means the built-in one.
	Store string `json:"store,omitempty"`
	// StoreOptions are its settings (--store-opt).
	StoreOptions map[string]string `json:"store_options,omitempty"`
	// Scenario names the catalogue scenario the run came from (matrix,
	// validate), for reports and serve; empty for a run made by hand.
	Scenario string `json:"scenario,omitempty"`
}

// StoreKind is the declaration of the run's kind of counter store and its
// settings, checked against the kind's declarations.
func (c Config) StoreKind() (store.Kind, option.Set, error) {
	k, err := store.Lookup(c.Store)
	if err != nil {
		return store.Kind{}, nil, BadInput("--store: %v", err)
	}
	opts, err := k.ParseOptions(c.StoreOptions)
	if err != nil {
		return store.Kind{}, nil, &InputError{Err: err}
	}
	return k, opts, nil
}

// DefaultConfig is a 30 s unfenced-counter run under pauses on the default
// backend (targets.Default: the catalogue names a single Redis).
func DefaultConfig() Config {
	return Config{
		Target:          targets.Default(),
		Workload:        workloads.UnfencedCounter,
		Nemesis:         "pause",
		TimeLimit:       30 * time.Second,
		Concurrency:     5,
		Keys:            3,
		LeaseTTL:        2 * time.Second,
		Work:            100 * time.Millisecond,
		NemesisInterval: 3 * time.Second,
		Faults:          nemesis.DefaultSpecs(),
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
	return nemesis.Schedule{Interval: c.NemesisInterval, MinDuration: lo, MaxDuration: hi, Overlap: c.FaultOverlap}
}

// InForce returns c as its run used it, for reports: FaultMin and FaultMax
// as [Config.Schedule] derives them where they are zero, and in Faults
// only the settings of the faults Nemesis names, each with the values that
// follow the target filled in ([nemesis.Resolver]: a clock offset from the
// lease). backends resolves the target (nil: targets.Lookup); a target it
// does not know (a run of another build) has its faults' settings resolved
// from the lease alone. c is not changed.
func (c Config) InForce(backends Backends) Config {
	s := c.Schedule()
	c.FaultMin, c.FaultMax = s.MinDuration, s.MaxDuration
	t := nemesis.Target{Name: c.Target, LeaseTTL: c.LeaseTTL}
	if b, err := c.backend(backends); err == nil {
		t = faultTarget(c, b)
	}
	used := nemesis.Specs{}
	for _, name := range splitList(c.Nemesis) {
		sp := c.Faults.Get(name)
		if sp == nil {
			continue
		}
		if r, ok := sp.(nemesis.Resolver); ok {
			sp = r.Resolved(t)
		}
		used[name] = sp
	}
	c.Faults = used
	return c
}

// Validate returns an InputError naming the first problem. backends
// resolves the target's name (nil: targets.Lookup). ([Prepare] checks the
// same and keeps what it built.)
func (c Config) Validate(backends Backends) error {
	_, err := Prepare(c, backends)
	return err
}

// Plan is a config checked once against its backend, with its nemeses
// built: what [Plan.Run] runs. A Plan runs once.
type Plan struct {
	cfg       Config
	backend   targets.Backend
	nemeses   []nemesis.Nemesis
	client    Client
	storeKind store.Kind
	opts      Options
}

// Config returns the plan's config.
func (p *Plan) Config() Config { return p.cfg }

// Backend returns the declaration of the plan's backend.
func (p *Plan) Backend() targets.Backend { return p.backend }

// Options returns the plan's option settings, checked and parted.
func (p *Plan) Options() Options { return p.opts }

// Prepare checks cfg against its backend, resolved by backends (nil:
// targets.Lookup), and returns an InputError naming the first problem; it
// builds the nemeses cfg names. Every fault's settings are checked, named
// in the run or not.
func Prepare(cfg Config, backends Backends) (*Plan, error) {
	b, err := cfg.backend(backends)
	if err != nil {
		return nil, err
	}
	p := &Plan{cfg: cfg, backend: b}
	if err := cfg.validate(p); err != nil {
		return nil, err
	}
	return p, nil
}

// validate checks c against p's backend and puts the nemeses it names,
// its lock client, its store and its options, parsed, in p.
func (c Config) validate(p *Plan) error {
	cl, err := c.ResolveClient(p.backend)
	if err != nil {
		return err
	}
	if p.opts.Backend, p.opts.Recipe, err = c.parseOptions(p.backend, cl); err != nil {
		return err
	}
	p.client = cl
	if p.storeKind, p.opts.Store, err = c.StoreKind(); err != nil {
		return err
	}
	switch {
	case !slices.Contains(workloads.Names(), c.Workload):
		return BadInput("unknown workload %q (known: %s)", c.Workload, strings.Join(workloads.Names(), ", "))
	case c.TimeLimit <= 0:
		return BadInput("--time-limit must be positive, got %v", c.TimeLimit)
	case c.EndAfterFaults < 0:
		return BadInput("end after faults must be 0 (never early) or more, got %d", c.EndAfterFaults)
	case c.Concurrency < 1 || c.Concurrency > 200:
		return BadInput("--concurrency must be 1..200, got %d", c.Concurrency)
	case c.Keys < 1 || c.Keys > MaxKeys:
		return BadInput("--keys must be 1..%d, got %d", MaxKeys, c.Keys)
	case c.LeaseTTL <= 0:
		return BadInput("--lease-ttl must be positive, got %v", c.LeaseTTL)
	case c.Work < 0:
		return BadInput("--work must not be negative, got %v", c.Work)
	case c.ResultsDir == "":
		return BadInput("--results must name a directory")
	}
	for _, t := range []struct {
		flag string
		d    time.Duration
	}{{"--acquire-timeout", c.AcquireTimeout}, {"--store-timeout", c.StoreTimeout}, {"--op-timeout", c.OpTimeout}, {"--check-timeout", c.CheckTimeout}} {
		if t.d <= 0 {
			return BadInput("%s must be positive, got %v", t.flag, t.d)
		}
	}
	for _, name := range strings.Split(c.Bypass, ",") {
		if name = strings.TrimSpace(name); name == "" && c.Bypass == "" {
			break
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(name, "c")); err != nil || !strings.HasPrefix(name, "c") || n < 1 || n > c.Concurrency || name != "c"+strconv.Itoa(n) {
			return BadInput("--bypass-clients: no client %q (this run has c1..c%d; --concurrency sets how many)", name, c.Concurrency)
		}
	}
	if err := c.Schedule().Validate(); err != nil {
		return BadInput("%v (check --nemesis-interval, --fault-min, --fault-max)", err)
	}
	names, err := nemesis.Select(c.Nemesis)
	if err != nil {
		return BadInput("--nemesis: %v", err)
	}
	ft := faultTarget(c, p.backend)
	for _, name := range nemesis.Names() {
		if err := c.Faults.Get(name).Validate(ft); err != nil {
			return &InputError{Err: err}
		}
	}
	for _, name := range names {
		spec := c.Faults.Get(name)
		if a, ok := spec.(nemesis.Availability); ok {
			if err := a.Available(ft); err != nil {
				return BadInput("--nemesis %s: %v", name, err)
			}
		}
		n, err := spec.New(ft)
		if err != nil {
			return BadInput("--nemesis %s: %v", name, err)
		}
		p.nemeses = append(p.nemeses, n)
	}
	return checkWritable(c.ResultsDir)
}

// faultTarget is what the faults of c are checked against and built for
// on backend b: its shape, and how the processes of its roles that run
// under the LD_PRELOAD clock shim tell their time (the others are skewed
// by vDSO injection).
func faultTarget(c Config, b targets.Backend) nemesis.Target {
	shims := map[string]func(context.Context, runtime.Node) (time.Time, error){}
	for _, r := range b.Roles {
		if r.Clock.Shim {
			shims[r.Name] = r.Clock.Now
		}
	}
	return nemesis.Target{Name: c.Target, Size: b.Size, Leads: b.Leads, LeaseTTL: c.LeaseTTL, ShimClocks: shims}
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

// checkWritable checks that the results directory can be written,
// without making it: a refused run leaves nothing behind.
func checkWritable(dir string) error {
	return CheckWritableDir("--results", dir)
}

// CheckWritableDir checks that directory dir, named by flag, exists and can
// be written, or could be made: its nearest existing ancestor is a
// directory in which a file can be made. It creates nothing (a probe file
// is made and removed); its error is bad input naming the flag.
func CheckWritableDir(flag, dir string) error {
	at := filepath.Clean(dir)
	for {
		fi, err := os.Stat(at)
		if err == nil {
			if !fi.IsDir() {
				return BadInput("%s %s cannot be made: %s is a file (name a writable directory)", flag, dir, at)
			}
			break
		}
		up := filepath.Dir(at)
		if up == at {
			return BadInput("%s %s cannot be made: %v", flag, dir, err)
		}
		at = up
	}
	f, err := os.CreateTemp(at, ".splitbrain-probe-")
	if err != nil {
		return BadInput("%s %s cannot be written (fix the permissions of %s or name another): %v", flag, dir, at, errors.Unwrap(err))
	}
	f.Close()
	return os.Remove(f.Name())
}

// runDirName is the results directory of a run: target-workload-nemesis.
func (c Config) runDirName() string {
	nem := strings.ReplaceAll(c.Nemesis, ",", "+")
	if nem == "" {
		nem = "none"
	}
	target := c.Target
	if c.Client != "" {
		target += "+" + clientLabel(c.Client)
	}
	return filepath.Join(c.ResultsDir, fmt.Sprintf("%s-%s-%s", target, c.Workload, nem))
}
