// Package scenario is splitbrain's catalogue of named test presets — a
// target, a lock recipe, a workload, a nemesis and the outcome expected —
// covering every anti-pattern of the lock-safety brief and the correct
// pattern, and the matrix that runs a set of them with fixed seeds and
// fails when an outcome differs from its expectation: a safe configuration
// found broken, or a known-bad one not caught (the harness's own
// sensitivity is under test).
package scenario

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/nemesis/clock"
)

// Scenario is one named preset.
type Scenario struct {
	// Name is the scenario's name in sets and on the command line.
	Name string
	// Title says in one line what the scenario shows.
	Title string
	// AntiPattern is the number of the lock-safety brief's anti-pattern
	// the scenario reproduces; 0 is the correct pattern.
	AntiPattern int
	// Targets are the backends it applies to.
	Targets []string
	// Apply sets the run's options (after the defaults and the set's time
	// limit, seed and results directory).
	Apply func(c *harness.Config)
	// Expect is the outcome a correct harness must see.
	Expect Expect
}

// Expect is what a scenario's run must show. Zero fields are not checked.
type Expect struct {
	// Valid is the verdict expected, when set.
	Valid *checkers.Verdict `json:"valid,omitempty"`
	// MinLostUpdates, MinOverlaps, MinEarlyOverlaps, MinRejections and
	// MinLateRejected are lower bounds on the checkers' counts.
	MinLostUpdates   int64 `json:"min_lost_updates,omitempty"`
	MinOverlaps      int   `json:"min_overlaps,omitempty"`
	MinEarlyOverlaps int   `json:"min_early_overlaps,omitempty"`
	MinRejections    int   `json:"min_rejections,omitempty"`
	MinLateRejected  int   `json:"min_late_rejected,omitempty"`
	// NoEarlyOverlaps requires that the lock never gave a live lock away.
	NoEarlyOverlaps bool `json:"no_early_overlaps,omitempty"`
	// MinStall is a lower bound on the longest stall; StallToEnd requires
	// a key that never recovered.
	MinStall   time.Duration `json:"min_stall_ns,omitempty"`
	StallToEnd bool          `json:"stall_to_end,omitempty"`
	// Recovers requires every key to have made progress again (no stall
	// to the end) with no stall longer than MaxStall (when set).
	Recovers bool          `json:"recovers,omitempty"`
	MaxStall time.Duration `json:"max_stall_ns,omitempty"`
	// MinBusy and MinUnavailable bound the failed acquisitions by cause
	// from below.
	MinBusy        int `json:"min_busy,omitempty"`
	MinUnavailable int `json:"min_unavailable,omitempty"`
}

func verdict(v checkers.Verdict) *checkers.Verdict { return &v }

// Mismatches lists every way r differs from e (empty: as expected).
func (e Expect) Mismatches(r *harness.Results) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if e.Valid != nil && r.Valid != *e.Valid {
		bad("verdict %s, expected %s", r.Valid, *e.Valid)
	}
	s := r.Checkers.Summary()
	m := r.Checkers.Mutex()
	f := r.Checkers.Fencing()
	l := r.Checkers.Liveness()
	if s == nil || m == nil || f == nil || l == nil {
		return append(out, "the run has no checker results")
	}
	if s.LostUpdates < e.MinLostUpdates {
		bad("%d lost updates, expected at least %d", s.LostUpdates, e.MinLostUpdates)
	}
	if m.Overlaps < e.MinOverlaps {
		bad("%d overlapping holds, expected at least %d", m.Overlaps, e.MinOverlaps)
	}
	if m.EarlyOverlaps < e.MinEarlyOverlaps {
		bad("%d early overlaps (a live lock given away), expected at least %d", m.EarlyOverlaps, e.MinEarlyOverlaps)
	}
	if e.NoEarlyOverlaps && m.EarlyOverlaps != 0 {
		bad("%d early overlaps: the lock gave a live lock away", m.EarlyOverlaps)
	}
	if s.Rejections < e.MinRejections {
		bad("%d fencing rejections, expected at least %d", s.Rejections, e.MinRejections)
	}
	if f.LateRejected < e.MinLateRejected {
		bad("%d late writes stopped by fencing, expected at least %d", f.LateRejected, e.MinLateRejected)
	}
	if l.Longest.Duration < e.MinStall {
		bad("longest stall %v, expected at least %v", l.Longest.Duration.Round(time.Millisecond), e.MinStall)
	}
	if e.StallToEnd && len(l.Stalled) == 0 {
		bad("every key recovered, expected one stalled to the end")
	}
	if e.Recovers && len(l.Stalled) > 0 {
		bad("keys %v never recovered", l.Stalled)
	}
	if e.MaxStall > 0 && l.Longest.Duration > e.MaxStall {
		bad("longest stall %v, expected at most %v", l.Longest.Duration.Round(time.Millisecond), e.MaxStall)
	}
	if r.Metrics.Busy < e.MinBusy {
		bad("%d acquisitions failed busy, expected at least %d", r.Metrics.Busy, e.MinBusy)
	}
	if r.Metrics.Unavailable < e.MinUnavailable {
		bad("%d acquisitions failed unavailable, expected at least %d", r.Metrics.Unavailable, e.MinUnavailable)
	}
	return out
}

var allTargets = []string{"redis", "etcd", "lockd"}

// holders weighs the holder group alone: every fault hits a lock holder.
func holders() nemesis.Weights { return nemesis.Weights{nemesis.GroupHolder: 1} }

// Catalogue returns every scenario.
func Catalogue() []Scenario {
	return []Scenario{
		{
			Name: "correct-pattern", AntiPattern: 0, Targets: allTargets,
			Title: "lease + owner-checked release + fencing keeps the data correct under pauses, partitions and kills",
			Apply: func(c *harness.Config) {
				c.Workload, c.Nemesis, c.Keys = "fenced-counter", "pause,partition,kill", 2
				if c.Target == "redis" {
					// A single Redis forgets its locks and tokens when
					// killed: anti-pattern 7's business, not this one's.
					c.Nemesis = "pause,partition"
				}
			},
			Expect: Expect{Valid: verdict(checkers.Valid), NoEarlyOverlaps: true},
		},
		{
			Name: "holder-lost-recovery", AntiPattern: 0, Targets: allTargets,
			Title: "a killed holder's lease expires on the service's side and the lock is granted again",
			Apply: func(c *harness.Config) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = "fenced-counter", "kill", 1, 3
				nemesis.SpecOf[*nemesis.KillSpec](c.Faults).Targets = holders()
				c.FaultMin, c.FaultMax = 500*time.Millisecond, time.Second
			},
			Expect: Expect{Valid: verdict(checkers.Valid), Recovers: true, MaxStall: 8 * time.Second, NoEarlyOverlaps: true},
		},
		{
			Name: "no-expiry-deadlock", AntiPattern: 1, Targets: []string{"redis"},
			Title: "a lock without expiry whose holder is killed deadlocks everyone",
			Apply: func(c *harness.Config) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = "fenced-counter", "kill", 1, 3
				nemesis.SpecOf[*nemesis.KillSpec](c.Faults).Targets = holders()
				c.RecipeOptions = map[string]string{"expiry": "none"}
				c.FaultMin, c.FaultMax = 500*time.Millisecond, time.Second
			},
			Expect: Expect{StallToEnd: true, MinStall: 5 * time.Second},
		},
		{
			Name: "long-ttl-unavailable", AntiPattern: 2, Targets: []string{"redis"},
			Title: "a huge TTL keeps the lock unavailable for a whole TTL after its holder is lost",
			Apply: func(c *harness.Config) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = "fenced-counter", "kill", 1, 3
				nemesis.SpecOf[*nemesis.KillSpec](c.Faults).Targets = holders()
				c.LeaseTTL, c.AcquireTimeout = 10*time.Second, 2*time.Second
				c.FaultMin, c.FaultMax = 500*time.Millisecond, time.Second
				c.NemesisInterval = 4 * time.Second
			},
			Expect: Expect{MinStall: 8 * time.Second, MinBusy: 1},
		},
		{
			Name: "client-clock-expiry", AntiPattern: 3, Targets: []string{"redis"},
			Title: "expiry judged by the holder's own wall clock breaks when a client's clock jumps",
			Apply: func(c *harness.Config) {
				c.Workload, c.Nemesis, c.Keys = "unfenced-counter", "clock", 1
				c.RecipeOptions = map[string]string{"expiry": "client"}
				cs := nemesis.SpecOf[*clock.Spec](c.Faults)
				cs.Targets, cs.Modes, cs.Direction = nemesis.Weights{nemesis.GroupClient: 1}, nemesis.List{clock.ModeBump}, clock.DirForward
			},
			Expect: Expect{MinEarlyOverlaps: 1},
		},
		{
			Name: "unchecked-release", AntiPattern: 4, Targets: []string{"redis"},
			Title: "a release without an ownership check deletes someone else's lock",
			Apply: func(c *harness.Config) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = "unfenced-counter", "pause", 1, 4
				nemesis.SpecOf[*nemesis.PauseSpec](c.Faults).Targets = holders()
				c.RecipeOptions = map[string]string{"release": "unchecked"}
			},
			Expect: Expect{MinEarlyOverlaps: 1},
		},
		{
			Name: "unfenced-late-write", AntiPattern: 5, Targets: allTargets,
			Title: "an expiring lock alone lets a paused holder write late and lose increments",
			Apply: func(c *harness.Config) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = "unfenced-counter", "pause", 1, 4
				nemesis.SpecOf[*nemesis.PauseSpec](c.Faults).Targets = holders()
				c.Work, c.NemesisInterval = 300*time.Millisecond, 2*time.Second
			},
			Expect: Expect{Valid: verdict(checkers.Invalid), MinLostUpdates: 1},
		},
		{
			Name: "bypass-writer", AntiPattern: 6, Targets: []string{"redis"},
			Title: "a writer that skips the token beside fenced clients loses updates despite fencing",
			Apply: func(c *harness.Config) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency, c.Bypass = "fenced-counter", "none", 1, 4, "c1"
			},
			Expect: Expect{Valid: verdict(checkers.Invalid), MinLostUpdates: 1},
		},
		{
			Name: "single-node-away", AntiPattern: 7, Targets: []string{"redis"},
			Title: "a single-node lock backend partitioned away stops every client",
			Apply: func(c *harness.Config) {
				c.Workload, c.Nemesis, c.Keys = "fenced-counter", "partition", 2
				nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults).Topologies = nemesis.List{nemesis.TopoLocksAway}
				c.AcquireTimeout = time.Second
			},
			Expect: Expect{Valid: verdict(checkers.Valid), MinUnavailable: 3, MinStall: 2 * time.Second},
		},
		{
			Name: "busy-vs-unavailable", AntiPattern: 8, Targets: []string{"etcd", "lockd"},
			Title: "a busy lock and an unreachable lock service are told apart and counted separately",
			Apply: func(c *harness.Config) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = "fenced-counter", "partition", 1, 5
				nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults).Topologies = nemesis.List{nemesis.TopoClientsFromLocks}
				c.AcquireTimeout = time.Second
			},
			Expect: Expect{Valid: verdict(checkers.Valid), MinBusy: 1, MinUnavailable: 1},
		},
		{
			Name: "late-writer-drill", AntiPattern: 0, Targets: allTargets,
			Title: "partition a slow holder from the lock service, heal, and watch fencing stop its late write",
			Apply: func(c *harness.Config) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = "fenced-counter", "partition", 1, 4
				nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults).Topologies = nemesis.List{nemesis.TopoClientsFromLocks}
				c.Work, c.NemesisInterval = 3*time.Second, 2*time.Second
			},
			Expect: Expect{Valid: verdict(checkers.Valid), MinLateRejected: 1},
		},
	}
}

// Lookup returns the scenario called name.
func Lookup(name string) (Scenario, error) {
	var names []string
	for _, s := range Catalogue() {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	sort.Strings(names)
	return Scenario{}, fmt.Errorf("unknown scenario %q (known: %s)", name, strings.Join(names, ", "))
}

// Config returns the run options of s on target.
func (s Scenario) Config(target string, base harness.Config) (harness.Config, error) {
	if !slices.Contains(s.Targets, target) {
		return base, fmt.Errorf("scenario %s does not apply to target %s (it does to %s)", s.Name, target, strings.Join(s.Targets, ", "))
	}
	c := base
	c.Target = target
	c.Faults = base.Faults.Clone() // Apply changes c's settings, not base's
	s.Apply(&c)
	return c, nil
}
