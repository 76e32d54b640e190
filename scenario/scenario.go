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
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/nemesis"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/workloads"
)

// KnownBug is the AntiPattern of a scenario that reproduces a bug reported
// against a lock library or recipe (docs/known-bugs.md), not one of the
// brief's anti-patterns.
const KnownBug = -1

// Scenario is one named preset.
type Scenario struct {
	// Name is the scenario's name in sets and on the command line.
	Name string
	// Title says in one line what the scenario shows.
	Title string
	// AntiPattern is the number of the lock-safety brief's anti-pattern
	// the scenario reproduces; 0 is the correct pattern.
	AntiPattern int
	// Needs are what a backend must offer for the scenario to apply (all
	// of them; none: every backend). Scenarios choose backends by what
	// they declare, never by name, so a new backend gets the scenarios
	// that fit it.
	Needs []Need
	// Apply sets the run's options on backend b (after the defaults and
	// the set's time limit, seed and results directory).
	Apply func(c *harness.Config, b targets.Backend)
	// Expect is the outcome a correct harness must see.
	Expect Expect
	// EndAfterRounds is how many rounds of the scenario's faults (each
	// kind once a round) force the event it is about: in a set with
	// EarlyEnd its test phase ends once they ended and their outcome was
	// observed (harness.Config.EndAfterFaults). Zero: it runs its whole
	// time limit (what it shows needs time, or is a rate).
	EndAfterRounds int
	// Drill says that the scenario makes its holders abnormal on purpose
	// (slow, say) to show one behaviour: the adoption checklist reports
	// what it shows as the drill's result and never judges the recipe's
	// ordinary use (its hold times, say) on its runs.
	Drill bool
}

// UnderTest reports whether s runs the recipe as a team would use it:
// the correct pattern, neither an anti-pattern, a known bug nor a drill.
// The checklist judges the recipe's ordinary behaviour on these runs only.
func (s Scenario) UnderTest() bool { return s.AntiPattern == 0 && !s.Drill }

// Expect is what a scenario's run must show. Zero fields are not checked.
type Expect struct {
	// Valid is the verdict expected, when set.
	Valid *checkers.Verdict `json:"valid,omitempty"`
	// Lock and Data are the verdicts expected of the lock service's
	// promises (fence order, mutual exclusion) and of the data, when set:
	// a single Redis restarted without persistence breaks the first and
	// keeps the second.
	Lock *checkers.Verdict `json:"lock,omitempty"`
	Data *checkers.Verdict `json:"data,omitempty"`
	// MinLostUpdates, MinOverlaps, MinEarlyOverlaps, MinRejections and
	// MinLateRejected are lower bounds on the checkers' counts.
	MinLostUpdates   int64 `json:"min_lost_updates,omitempty"`
	MinOverlaps      int   `json:"min_overlaps,omitempty"`
	MinEarlyOverlaps int   `json:"min_early_overlaps,omitempty"`
	MinRejections    int   `json:"min_rejections,omitempty"`
	MinLateRejected  int   `json:"min_late_rejected,omitempty"`
	// NoEarlyOverlaps requires that the lock never gave a live lock away
	// (no second grant while the first holder's lock was certainly alive:
	// the mutex checker's invalid verdict).
	NoEarlyOverlaps bool `json:"no_early_overlaps,omitempty"`
	// MinStall is a lower bound on the longest stall; StallToEnd requires
	// a key that never recovered.
	MinStall   time.Duration `json:"min_stall_ns,omitempty"`
	StallToEnd bool          `json:"stall_to_end,omitempty"`
	// Availability: Recovers requires every key to have made progress
	// again (no stall to the end); MaxStall bounds every key's longest
	// stall (no successful critical section while clients kept trying), so
	// that "safe but stuck for a minute" fails the scenario.
	Recovers bool          `json:"recovers,omitempty"`
	MaxStall time.Duration `json:"max_stall_ns,omitempty"`
	// StartUp says that the scenario kills lock nodes, so that MaxStall
	// also allows the backend's StartUp (a killed node's time to serve
	// again): [Expect.On] adds it.
	StartUp bool `json:"start_up,omitempty"`
	// MinBusy and MinUnavailable bound the failed acquisitions by cause
	// from below, MaxBusy and MaxUnavailable from above (nil: not
	// checked), so that a busy lock and an unreachable service are told
	// apart: e.g. no acquisition may fail unavailable while the service is
	// never cut off.
	MinBusy        int  `json:"min_busy,omitempty"`
	MinUnavailable int  `json:"min_unavailable,omitempty"`
	MaxBusy        *int `json:"max_busy,omitempty"`
	MaxUnavailable *int `json:"max_unavailable,omitempty"`
	// Classified requires every failed acquisition to say busy or
	// unavailable (none left as an unknown outcome or another error).
	Classified bool `json:"classified,omitempty"`
	// Or, when set, is a second outcome that meets the expectation too:
	// the run matches when it shows e's own fields or all of Or's. For a
	// known-bad configuration whose fault can show in two ways, each of
	// them a finding (tokens given again, or the service gone for good),
	// so that only a run showing neither passes silently.
	Or *Expect `json:"or,omitempty"`
}

// On is e for a run on backend b: with StartUp, MaxStall allows b's
// StartUp on top.
func (e Expect) On(b targets.Backend) Expect {
	if e.StartUp && e.MaxStall > 0 {
		e.MaxStall += b.StartUp
	}
	if e.Or != nil {
		or := e.Or.On(b)
		e.Or = &or
	}
	return e
}

func count(n int) *int { return &n }

func verdict(v checkers.Verdict) *checkers.Verdict { return &v }

// Mismatches lists every way r differs from e (empty: as expected). With
// Or, a run that meets Or matches; one that meets neither gets e's own
// mismatches and, last, one line with Or's.
func (e Expect) Mismatches(r *harness.Results) []string {
	out := e.mismatches(r)
	if len(out) == 0 || e.Or == nil {
		return out
	}
	alt := e.Or.Mismatches(r)
	if len(alt) == 0 {
		return nil
	}
	return append(out, "nor the other outcome expected: "+strings.Join(alt, "; "))
}

// mismatches is Mismatches of e's own fields, Or aside.
func (e Expect) mismatches(r *harness.Results) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if e.Valid != nil && r.Valid != *e.Valid {
		why := ""
		if len(r.Reasons) > 0 {
			why = " (" + r.Reasons[0] + ")"
		}
		bad("verdict %s, expected %s%s", r.Valid, *e.Valid, why)
	}
	if e.Lock != nil && r.Lock != *e.Lock {
		bad("lock verdict %s (fence order and mutual exclusion), expected %s", r.Lock, *e.Lock)
	}
	if e.Data != nil && r.Data != *e.Data {
		bad("data verdict %s, expected %s", r.Data, *e.Data)
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
	if e.MaxStall > 0 {
		for _, k := range sortedKeys(l.PerKey) {
			if st := l.PerKey[k]; st.Duration > e.MaxStall {
				bad("%s stalled %v (no successful critical section while clients kept trying), expected at most %v", k, st.Duration.Round(time.Millisecond), e.MaxStall)
			}
		}
	}
	if r.Metrics.Busy < e.MinBusy {
		bad("%d acquisitions failed busy, expected at least %d", r.Metrics.Busy, e.MinBusy)
	}
	if r.Metrics.Unavailable < e.MinUnavailable {
		bad("%d acquisitions failed unavailable, expected at least %d", r.Metrics.Unavailable, e.MinUnavailable)
	}
	if e.MaxBusy != nil && r.Metrics.Busy > *e.MaxBusy {
		bad("%d acquisitions failed busy, expected at most %d", r.Metrics.Busy, *e.MaxBusy)
	}
	if e.MaxUnavailable != nil && r.Metrics.Unavailable > *e.MaxUnavailable {
		bad("%d acquisitions failed unavailable, expected at most %d", r.Metrics.Unavailable, *e.MaxUnavailable)
	}
	if e.Classified && r.Metrics.Unclassified > 0 {
		bad("%d acquisitions failed neither busy nor unavailable", r.Metrics.Unclassified)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Need is a property of a backend's declaration a scenario needs.
type Need struct {
	// Says what it is, in a few words.
	Says string
	// Test reports whether b has it.
	Test func(b targets.Backend) bool
	// Client, when set, makes it a need of the run's client: tested on
	// the client recipe a run chooses (Test then checks b's own).
	Client func(b targets.Backend, r targets.Recipe) bool
}

// Needs of the catalogue.
var (
	// SingleNode: one lock node, which partitions cut away whole.
	SingleNode = Need{Says: "a single lock node", Test: func(b targets.Backend) bool { return b.Size == 1 }}
	// SeveralMembers: a replicated lock service.
	SeveralMembers = Need{Says: "several lock nodes", Test: func(b targets.Backend) bool { return b.Size > 1 }}
	// FixedTTL: a lease that lasts one TTL, never renewed (a long TTL is
	// then the only way to cover a long critical section).
	FixedTTL = Need{Says: "a lease that is not renewed", Test: func(b targets.Backend) bool {
		r, err := b.RunRecipe()
		return err == nil && !r.Renews && !r.Session
	}}
)

// Renewing: the run's client renews its lease while it holds the lock (a
// keep-alive, a session heartbeat), so only a renewal that arrives late
// lets the lease expire under it.
var Renewing = ClientNeed("a client that renews its lease", func(_ targets.Backend, r targets.Recipe) bool { return r.Renews })

// Faults the catalogue configures beyond their defaults, named as the
// registry knows them: a scenario does not import a fault's package
// (internal/layers: only catalog imports plug-ins).
const (
	faultClock = "clock"
	// faultPowerLoss is the power-loss fault (nemesis/powerloss): lock
	// nodes lose what they had not fsynced, then restart.
	faultPowerLoss = "power-loss"
	faultPacket    = "packet"
)

// kubernetesKind is client-go's leader election recipe, named as the
// registry knows it (a scenario does not import a backend's package).
const kubernetesKind = "kubernetes"

// CandidateClockExpiry: a leader election whose candidates judge the
// holder's lease expired on their own clocks (client-go's LeaderElector:
// the recipes kubernetes and kubernetes-checked, and controller-runtime's
// manager election), named as the registry knows them.
var CandidateClockExpiry = ClientNeed("a leader election that judges expiry on each candidate's own clock", func(_ targets.Backend, r targets.Recipe) bool {
	return slices.Contains([]string{kubernetesKind, "kubernetes-checked", "controller-runtime"}, r.Kind)
})

// fastCandidateRate is the rate of leader-election-fast-candidate's fast
// clock: well above the 4 from which every run at load 1.5-28 broke (3:
// 2 of 5 runs; docs/kubernetes.md), and the 1.5-2 the code allows.
const fastCandidateRate = "10"

// The store-side fence for a client with no token, named as the store
// registry knows it (a scenario does not import a store's package): each
// counter a row of PostgreSQL, a write refused when the row's version is
// no longer the one its holder read (--store postgres --store-opt
// check=version; docs/postgres.md).
const (
	storePostgres = "postgres"
	checkVersion  = "version"
)

// storeVersionCheck fences c's writes at the store by the row's version.
func storeVersionCheck(c *harness.Config) {
	c.Store, c.StoreOptions = storePostgres, map[string]string{"check": checkVersion}
}

// setFault sets the fault's settings as its flags would
// ([nemesis.Specs.Set]). The catalogue's settings are constants that every
// test of the catalogue applies, so a mistake in them panics there.
func setFault(c *harness.Config, fault string, flags map[string]string) {
	if err := c.Faults.Set(fault, flags); err != nil {
		panic("scenario: " + err.Error())
	}
}

// slowLockLink sets c's packet fault: what a lock holder sends to the lock
// service delayed by a TTL (± a quarter), from some moment of its critical
// section on, while the other clients' links stay fast. The renewal sent
// after the delay sets in lands a TTL later, after the lease has expired:
// the lock goes to another client while the holder, answered at once and
// unaware, still works. (Half a TTL is not enough against etcd's client,
// which resends its keep-alive every 500 ms until answered: a constant
// delay then only shifts the renewals; only the gap when it sets in counts.)
func slowLockLink(c *harness.Config) {
	c.Nemesis, c.Keys, c.Concurrency = faultPacket, 1, 3
	setFault(c, faultPacket, map[string]string{"packet-effects": "latency", "packet-links": nemesis.LinkLock,
		"packet-direction": "to", "packet-clients": "holder",
		"packet-latency": c.LeaseTTL.String(), "packet-jitter": (c.LeaseTTL / 4).String()})
	c.Work, c.NemesisInterval, c.AcquireTimeout = 4*time.Second, time.Second, 10*time.Second
	c.FaultMin, c.FaultMax = 5*time.Second, 6*time.Second
}

// Fencing: the run's client gives fencing tokens (scenarios that run the
// fenced counter need one; a client without is refused).
var Fencing = ClientNeed("a client that gives fencing tokens", func(_ targets.Backend, r targets.Recipe) bool { return r.Fencing })

// CheckedRelease: the run's client releases only its own lock — a release
// that finds the lock gone to another leaves it alone. Without it a holder
// that outlived its lease (paused, cut off) and releases on waking gives the
// new holder's lock away (client-go's ReleaseOnCancel: docs/kubernetes.md).
var CheckedRelease = ClientNeed("a client whose release is owner-checked", func(_ targets.Backend, r targets.Recipe) bool { return r.CheckedRelease })

// NoToken: the run's client gives no fencing token (redsync, redis-py,
// redislock). The checklist puts such a client through the same faults
// with the unfenced counter, and fences it at the store instead (a
// version check: storeVersionCheck).
var NoToken = ClientNeed("a client that gives no fencing token", func(_ targets.Backend, r targets.Recipe) bool { return !r.Fencing })

// SessionLock: the run's client holds a lock that lives as long as its
// connection (targets.Recipe.Session), not for a TTL.
var SessionLock = ClientNeed("a lock held by the client's session", func(_ targets.Backend, r targets.Recipe) bool { return r.Session })

// ClientNeed is a need of the run's client: the backend's own recipe, or
// the library the run chooses (ConfigWith).
func ClientNeed(says string, test func(b targets.Backend, r targets.Recipe) bool) Need {
	return Need{Says: says, Client: test, Test: func(b targets.Backend) bool {
		r, err := b.RunRecipe()
		return err == nil && test(b, r)
	}}
}

// Redlock: a lock on a majority of independent nodes (several nodes, no
// leader, no replication between them).
var Redlock = Need{Says: "several independent lock nodes, no leader", Test: func(b targets.Backend) bool { return b.Size >= 3 && !b.Leads }}

// ClientOption needs the run to accept --recipe-opt name=value with its
// client (an anti-pattern switch of the client, or of the backend).
func ClientOption(name, value string) Need {
	return ClientNeed("client option "+name+"="+value, func(b targets.Backend, r targets.Recipe) bool {
		return b.CheckOptionsWith(r, map[string]string{name: value}) == nil
	})
}

// ClientIs needs the run's client to be the library kind: a scenario about
// one library's known reports (the set names the client).
func ClientIs(kind string) Need {
	return ClientNeed("the client "+kind, func(_ targets.Backend, r targets.Recipe) bool { return r.Kind == kind })
}

// ForgetsOnKill: a lock service that, killed and restarted in its default
// configuration, forgets its locks and the fencing tokens it gave.
var ForgetsOnKill = Need{Says: "a lock service that forgets its tokens when killed", Test: func(b targets.Backend) bool { return !b.Durable }}

// RecipeOption needs the run's recipe to accept --recipe-opt name=value
// (an anti-pattern switch).
func RecipeOption(name, value string) Need {
	return ClientOption(name, value)
}

// Keepalive: a server whose TCP keepalives a run can lower, so that it
// notices a silent client within seconds (targets.Backend.KeepaliveWith).
var Keepalive = Need{Says: "a server whose TCP keepalives can be lowered", Test: func(b targets.Backend) bool { return len(b.KeepaliveWith) > 0 }}

// LosesOnFailover: a lock service whose failover may lose what its old
// leader acknowledged (asynchronous replication: Redis with Sentinel).
var LosesOnFailover = Need{Says: "a failover that may lose acknowledged grants (asynchronous replication)", Test: func(b targets.Backend) bool { return b.LosesOnFailover }}

// KeepsGrants: a lock service that keeps every grant and token its leader
// acknowledged through the loss of that leader (a single node, or a
// consensus-backed service). The scenarios that expect the lock's promises
// to hold while its nodes are killed and cut off need it; a service that
// fails over asynchronously has the failover scenarios instead.
var KeepsGrants = Need{Says: "a lock service that keeps acknowledged grants through a failover", Test: func(b targets.Backend) bool { return !b.LosesOnFailover }}

// PowerCut: a lock service whose nodes keep state in directories a power
// loss can cut (targets.Role.StateDirs).
var PowerCut = Need{Says: "state directories a power loss can cut", Test: func(b targets.Backend) bool { return len(b.StateDirs()) > 0 }}

// Unsynced: a lock service with a durability switch that can be turned
// off (targets.Backend.UnsyncedWith).
var Unsynced = Need{Says: "a durability switch that can be turned off", Test: func(b targets.Backend) bool { return len(b.UnsyncedWith) > 0 }}

// durable runs a backend that is not durable by default in the
// configuration that keeps its tokens (targets.Backend.DurableWith), where
// it declares one (validate runs the configuration under test instead).
func durable(c *harness.Config, b targets.Backend) {
	if !b.Durable && len(b.DurableWith) > 0 {
		c.RecipeOptions = maps.Clone(b.DurableWith)
	}
}

// killService sets c's runs that kill the lock service: the fenced
// counter on one key while the service (its leader, when it has one) is
// killed for a second or two, about every three seconds. The fault that
// breaks a fencing token: the service that gives it forgets it (a restart
// without persistence) or a new leader gives one from a state behind the
// old one's.
func killService(c *harness.Config, b targets.Backend) {
	c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.FencedCounter, nemesis.KillName, 1, 3
	w := nemesis.Weights{nemesis.GroupNode: 1}
	if b.Size > 1 && b.Leads {
		w = nemesis.Weights{nemesis.GroupLeader: 1}
	}
	nemesis.SpecOf[*nemesis.KillSpec](c.Faults).Targets = w
	c.FaultMin, c.FaultMax, c.NemesisInterval = time.Second, 2*time.Second, 3*time.Second
}

// powerLoss sets c's power-loss runs: the fenced counter on one key while
// the lock service loses power, a second or two at a time, about every
// three seconds: all its nodes at once (a data centre's power cut; on a
// single server, its one node). A replicated service loses an entry only
// when every member that held it loses it: under a cut of a quorum the
// member left standing may hold what the others lost (lockd without sync
// lost up to 3 MiB of log at each quorum cut and gave no token twice in
// 10 runs of 10: docs/power-loss.md), so the unsynced setting could pass
// for a reason other than its disk. Both settings get the same cut, so
// that the setting is the one difference between the two cells; the
// durable one must keep its tokens through the harder cut.
func powerLoss(c *harness.Config, _ targets.Backend) {
	c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.FencedCounter, faultPowerLoss, 1, 3
	setFault(c, faultPowerLoss, map[string]string{"power-loss-targets": "all=1"})
	c.FaultMin, c.FaultMax, c.NemesisInterval = time.Second, 2*time.Second, 3*time.Second
}

// MonotonicLeases: a lock service that times its leases by a monotonic
// clock, which a jump of its nodes' wall clocks leaves alone (etcd, lockd,
// ZooKeeper; a session lock ends with its session).
var MonotonicLeases = Need{Says: "leases timed by a monotonic clock", Test: func(b targets.Backend) bool { return !b.WallClockLeases }}

// WallClockLeases: a lock service that expires its leases by its nodes'
// wall clocks (Redis): a forward jump of one expires the locks it holds.
var WallClockLeases = Need{Says: "leases expired by the nodes' wall clocks", Test: func(b targets.Backend) bool { return b.WallClockLeases }}

// AppliesTo reports whether every need of s holds for b.
func (s Scenario) AppliesTo(b targets.Backend) bool {
	for _, n := range s.Needs {
		if !n.Test(b) {
			return false
		}
	}
	return true
}

// AppliesWith reports whether every need of s holds for b run with the
// client recipe r: the client's needs are tested on r, the others on b.
func (s Scenario) AppliesWith(b targets.Backend, r targets.Recipe) bool {
	for _, n := range s.Needs {
		if n.Client != nil {
			if !n.Client(b, r) {
				return false
			}
		} else if !n.Test(b) {
			return false
		}
	}
	return true
}

// Clients lists, for backend b, the registered clients s applies with:
// b's own recipe and the libraries that serve b.
func (s Scenario) Clients(b targets.Backend) []string {
	var out []string
	for _, r := range targets.RecipesFor(b.Name) {
		if s.AppliesWith(b, r) {
			out = append(out, r.Kind)
		}
	}
	slices.SortStableFunc(out, func(x, y string) int {
		switch {
		case x == b.Recipe:
			return -1
		case y == b.Recipe:
			return 1
		}
		return 0
	})
	return out
}

// ConfigWith returns the run options of s on backend b with the client
// called client (a registered recipe; "" is b's own).
func (s Scenario) ConfigWith(b targets.Backend, client string, base harness.Config) (harness.Config, error) {
	if client == "" || client == b.Recipe {
		return s.ConfigFor(b, base)
	}
	r, err := targets.LookupRecipe(client)
	if err != nil {
		return base, err
	}
	if !r.Serves(b.Name) {
		return base, fmt.Errorf("client %s does not serve target %s", client, b.Name)
	}
	return s.configWithRecipe(b, r, client, base)
}

// configWithRecipe is ConfigWith for a client that offers what r says,
// chosen by --client client (a registered kind, or an adapter's command
// line).
func (s Scenario) configWithRecipe(b targets.Backend, r targets.Recipe, client string, base harness.Config) (harness.Config, error) {
	if !s.AppliesWith(b, r) {
		return base, fmt.Errorf("scenario %s does not apply to target %s with client %s: it needs %s", s.Name, b.Name, client, s.needs())
	}
	c := base
	c.Target, c.Client = b.Name, client
	c.Faults = base.Faults.Clone()
	s.Apply(&c, b)
	return c, nil
}

// adapterRecipe is what a user's adapter serving backend offers, as far as
// choosing its scenarios goes: an owner-checked release, and fencing
// tokens when its set or candidate says so.
func adapterRecipe(backend string, fencing bool) targets.Recipe {
	return targets.Recipe{Kind: targets.ExternalKind, Backends: []string{backend}, Fencing: fencing, CheckedRelease: true}
}

// Targets lists the registered backends s applies to, by name.
func (s Scenario) Targets() []string {
	var out []string
	for _, b := range targets.Backends() {
		if s.AppliesTo(b) {
			out = append(out, b.Name)
		}
	}
	return out
}

// needs says s's needs in a few words.
func (s Scenario) needs() string {
	var out []string
	for _, n := range s.Needs {
		out = append(out, n.Says)
	}
	return strings.Join(out, " and ")
}

// holders weighs the holder group alone: every fault hits a lock holder.
func holders() nemesis.Weights { return nemesis.Weights{nemesis.GroupHolder: 1} }

// Catalogue returns every scenario.
func Catalogue() []Scenario {
	return []Scenario{
		{
			Name: "correct-pattern", EndAfterRounds: 1, AntiPattern: 0, Needs: []Need{Fencing, CheckedRelease, KeepsGrants},
			Title: "lease + owner-checked release + fencing keeps the data correct under pauses, partitions and kills",
			Apply: func(c *harness.Config, b targets.Backend) {
				c.Workload, c.Nemesis, c.Keys = workloads.FencedCounter, nemesis.PauseName+","+nemesis.PartitionName+","+nemesis.KillName, 2
				switch {
				case b.Durable:
				case len(b.DurableWith) > 0:
					// Killed, it would forget its locks and tokens
					// (single-node-restart); run it in the configuration
					// that keeps both (a Redis with its append-only file
					// fsynced on every write: docs/redis-persistence.md).
					c.RecipeOptions = maps.Clone(b.DurableWith)
				default:
					// A backend that forgets its locks and tokens when
					// killed: anti-pattern 7's business, not this one's.
					c.Nemesis = nemesis.PauseName + "," + nemesis.PartitionName
				}
				// Each kind must land for the run to be tested. Faults come
				// each kind once a round (nemesis.Run), TTL+1..TTL+2 s each
				// (past the lease) after 0.5-1.5 s of quiet: the last kind
				// starts by k×1.5 s + (k-1)×(TTL+2 s); the run lasts that
				// and 2 s a fault more, for slow kills and heals on a
				// loaded machine (18.5 s for three kinds at the 2 s TTL).
				c.NemesisInterval, c.FaultMax = time.Second, c.LeaseTTL+2*time.Second
				k := time.Duration(strings.Count(c.Nemesis, ",") + 1)
				c.TimeLimit = max(c.TimeLimit, k*3500*time.Millisecond+(k-1)*c.FaultMax)
			},
			// Safe, and never stuck: a key may wait out a fault (at most
			// 2×TTL+1 s) and a lease, not much more — and, after a kill,
			// the killed node's start-up where the backend declares one
			// (a single API server of Kubernetes's: the service is down
			// until it serves again).
			Expect: Expect{Valid: verdict(checkers.Valid), Lock: verdict(checkers.Valid), NoEarlyOverlaps: true, MaxStall: 15 * time.Second, StartUp: true},
		},
		{
			Name: "correct-pattern-clock", AntiPattern: 0, Needs: []Need{Fencing, CheckedRelease, KeepsGrants, MonotonicLeases},
			Title: "the correct pattern while the wall clocks of lock nodes, holders and clients jump and flip: a service that times its leases by a monotonic clock gives no live lock away",
			Apply: func(c *harness.Config, _ targets.Backend) {
				// The clock fault's defaults: a jump or flips between two
				// offsets of TTL..3×TTL, either way, of CLOCK_REALTIME, on
				// a node, a holder or a client. Such a service ignores
				// them; a monotonic skew (--clock-monotonic) is another
				// fault, which makes its leases lapse early.
				c.Workload, c.Nemesis, c.Keys = workloads.FencedCounter, faultClock, 2
			},
			Expect: Expect{Valid: verdict(checkers.Valid), Lock: verdict(checkers.Valid), NoEarlyOverlaps: true},
		},
		{
			Name: "node-clock-jump", AntiPattern: KnownBug, Needs: []Need{SingleNode, WallClockLeases, Fencing},
			Title: "known behaviour: a forward jump of the wall clock of a single lock node that expires leases by it (Redis) expires a held lock at once: a second client takes it while the first works (the lock's promise is broken; fencing keeps the data)",
			Apply: func(c *harness.Config, _ targets.Backend) {
				// Three clients on one key, each working half a TTL, so
				// the key is held nearly all the time and a waiter is
				// retrying when a jump of TTL..3×TTL expires it.
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.FencedCounter, faultClock, 1, 3
				setFault(c, faultClock, map[string]string{"clock-targets": nemesis.GroupNode, "clock-modes": "bump", "clock-direction": "forward"})
				c.Work = c.LeaseTTL / 2
			},
			// Not a false positive of the mutual-exclusion verdict: the
			// service did give a live lock away.
			Expect: Expect{Lock: verdict(checkers.Invalid), Data: verdict(checkers.Valid), MinEarlyOverlaps: 1},
		},
		{
			Name: "holder-lost-recovery", EndAfterRounds: 2, AntiPattern: 0, Needs: []Need{Fencing},
			Title: "a killed holder's lease expires on the service's side and the lock is granted again",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.FencedCounter, nemesis.KillName, 1, 3
				nemesis.SpecOf[*nemesis.KillSpec](c.Faults).Targets = holders()
				c.FaultMin, c.FaultMax = 500*time.Millisecond, time.Second
			},
			Expect: Expect{Valid: verdict(checkers.Valid), Recovers: true, MaxStall: 8 * time.Second, NoEarlyOverlaps: true},
		},
		{
			Name: "holder-lost-recovery-unfenced", EndAfterRounds: 2, AntiPattern: 0, Needs: []Need{NoToken},
			Title: "a client with no token: a killed holder's lease expires on the service's side and the lock is granted again (unfenced: a dead holder writes nothing late)",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.UnfencedCounter, nemesis.KillName, 1, 3
				nemesis.SpecOf[*nemesis.KillSpec](c.Faults).Targets = holders()
				c.FaultMin, c.FaultMax = 500*time.Millisecond, time.Second
			},
			// What the item judges: the lock comes back, and no live lock
			// is given away. The data is not judged: with no token a
			// holder slowed past its lease by the machine's load may
			// lose an update, which unfenced-late-write shows on purpose.
			Expect: Expect{Recovers: true, MaxStall: 8 * time.Second, NoEarlyOverlaps: true},
		},
		{
			Name: "no-expiry-deadlock", AntiPattern: 1, Needs: []Need{RecipeOption("expiry", "none"), Fencing},
			Title: "a lock without expiry whose holder is killed deadlocks everyone",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.FencedCounter, nemesis.KillName, 1, 3
				nemesis.SpecOf[*nemesis.KillSpec](c.Faults).Targets = holders()
				c.RecipeOptions = map[string]string{"expiry": "none"}
				c.FaultMin, c.FaultMax = 500*time.Millisecond, time.Second
			},
			Expect: Expect{StallToEnd: true, MinStall: 5 * time.Second},
		},
		{
			Name: "long-ttl-unavailable", AntiPattern: 2, Needs: []Need{FixedTTL, Fencing},
			Title: "a huge TTL keeps the lock unavailable for a whole TTL after its holder is lost",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.FencedCounter, nemesis.KillName, 1, 3
				nemesis.SpecOf[*nemesis.KillSpec](c.Faults).Targets = holders()
				c.LeaseTTL, c.AcquireTimeout = 10*time.Second, 2*time.Second
				c.FaultMin, c.FaultMax = 500*time.Millisecond, time.Second
				c.NemesisInterval = 4 * time.Second
			},
			Expect: Expect{MinStall: 8 * time.Second, MinBusy: 1},
		},
		{
			Name: "client-clock-expiry", AntiPattern: 3, Needs: []Need{RecipeOption("expiry", "client")},
			Title: "expiry judged by the holder's own wall clock breaks when a client's clock jumps",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys = workloads.UnfencedCounter, faultClock, 1
				c.RecipeOptions = map[string]string{"expiry": "client"}
				setFault(c, faultClock, map[string]string{"clock-targets": nemesis.GroupClient, "clock-modes": "bump", "clock-direction": "forward"})
			},
			// A live lock given away breaks mutual exclusion: the lock's
			// verdict is invalid whatever the data shows.
			Expect: Expect{Lock: verdict(checkers.Invalid), MinEarlyOverlaps: 1},
		},
		{
			Name: "client-clock-drift", AntiPattern: 3, Needs: []Need{RecipeOption("expiry", "client")},
			Title: "expiry judged by the holder's own wall clock breaks when that clock runs slow",
			Apply: func(c *harness.Config, _ targets.Backend) {
				// The holder's clock runs at a quarter to half of true
				// speed for 8-10 s: it falls 4-7.5 s behind, more than the
				// TTL, so the deadline it writes into its next locks has
				// already passed on the others' clocks, and they take a
				// live lock. Measured (seed 1, redis, setnx): a drift at
				// 0.393x for 24 s gave 26 live locks away and lost 28
				// updates.
				c.Workload, c.Nemesis, c.Keys = workloads.UnfencedCounter, faultClock, 1
				c.RecipeOptions = map[string]string{"expiry": "client"}
				setFault(c, faultClock, map[string]string{"clock-targets": nemesis.GroupHolder, "clock-modes": "drift", "clock-direction": "backward",
					"clock-rate-min": "0.25", "clock-rate-max": "0.5"})
				c.FaultMin, c.FaultMax = 8*time.Second, 10*time.Second
			},
			Expect: Expect{Lock: verdict(checkers.Invalid), MinEarlyOverlaps: 1},
		},
		{
			Name: "unchecked-release", AntiPattern: 4, Needs: []Need{RecipeOption("release", "unchecked")},
			Title: "a release without an ownership check deletes someone else's lock",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.UnfencedCounter, nemesis.PauseName, 1, 4
				nemesis.SpecOf[*nemesis.PauseSpec](c.Faults).Targets = holders()
				c.RecipeOptions = map[string]string{"release": "unchecked"}
			},
			Expect: Expect{Lock: verdict(checkers.Invalid), MinEarlyOverlaps: 1},
		},
		{
			Name: "unfenced-late-write", EndAfterRounds: 2, AntiPattern: 5,
			Title: "an expiring lock alone lets a paused holder write late and lose increments",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.UnfencedCounter, nemesis.PauseName, 1, 4
				nemesis.SpecOf[*nemesis.PauseSpec](c.Faults).Targets = holders()
				c.Work, c.NemesisInterval = 300*time.Millisecond, 2*time.Second
			},
			Expect: Expect{Valid: verdict(checkers.Invalid), MinLostUpdates: 1},
		},
		{
			Name: "bypass-writer", AntiPattern: 6, Needs: []Need{SingleNode, Fencing},
			Title: "a writer that skips the token beside fenced clients loses updates despite fencing",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency, c.Bypass = workloads.FencedCounter, nemesis.NoFaults, 1, 4, "c1"
			},
			Expect: Expect{Valid: verdict(checkers.Invalid), MinLostUpdates: 1},
		},
		{
			Name: "single-node-away", EndAfterRounds: 2, AntiPattern: 7, Needs: []Need{SingleNode, Fencing},
			Title: "a single-node lock backend partitioned away stops every client",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys = workloads.FencedCounter, nemesis.PartitionName, 2
				nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults).Topologies = nemesis.List{nemesis.TopoLocksAway}
				c.AcquireTimeout = time.Second
			},
			Expect: Expect{Valid: verdict(checkers.Valid), MinUnavailable: 3, MinStall: 2 * time.Second, MaxStall: 15 * time.Second, Classified: true},
		},
		{
			Name: "single-node-away-unfenced", EndAfterRounds: 2, AntiPattern: 7, Needs: []Need{SingleNode, NoToken},
			Title: "a client with no token: a single-node lock backend partitioned away stops every client, and its failures say unavailable",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys = workloads.UnfencedCounter, nemesis.PartitionName, 2
				nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults).Topologies = nemesis.List{nemesis.TopoLocksAway}
				c.AcquireTimeout = time.Second
			},
			Expect: Expect{MinUnavailable: 3, MinStall: 2 * time.Second, MaxStall: 15 * time.Second, Classified: true},
		},
		{
			Name: "single-node-restart", AntiPattern: 7, Needs: []Need{SingleNode, ForgetsOnKill, Fencing},
			Title: "a single lock node killed and restarted without persistence hands out its fencing tokens again from 1",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.FencedCounter, nemesis.KillName, 1, 3
				nemesis.SpecOf[*nemesis.KillSpec](c.Faults).Targets = nemesis.Weights{nemesis.GroupNode: 1}
			},
			// The lock breaks its promise (tokens go backwards); the store
			// refuses the low tokens, so the data stays correct, at the cost
			// of refused writes and a stall.
			Expect: Expect{Valid: verdict(checkers.Invalid), Lock: verdict(checkers.Invalid), Data: verdict(checkers.Valid), MinRejections: 1},
		},
		{
			Name: "busy-vs-unavailable", EndAfterRounds: 2, AntiPattern: 8, Needs: []Need{SeveralMembers, Fencing},
			Title: "a busy lock and an unreachable lock service are told apart and counted separately",
			Apply: func(c *harness.Config, _ targets.Backend) {
				// Eight clients on one key, each holding it 300 ms: the
				// queue is longer than the 1 s acquire timeout, so busy
				// failures happen outside the partitions by construction;
				// clients cut off from the lock service fail unavailable.
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.FencedCounter, nemesis.PartitionName, 1, 8
				nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults).Topologies = nemesis.List{nemesis.TopoClientsFromLocks}
				c.AcquireTimeout, c.Work = time.Second, 300*time.Millisecond
			},
			Expect: Expect{Valid: verdict(checkers.Valid), MinBusy: 1, MinUnavailable: 1, Classified: true, MaxStall: 15 * time.Second},
		},
		{
			Name: "busy-vs-unavailable-unfenced", EndAfterRounds: 2, AntiPattern: 8, Needs: []Need{SeveralMembers, NoToken},
			Title: "a client with no token: a busy lock and an unreachable lock service are told apart and counted separately",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.UnfencedCounter, nemesis.PartitionName, 1, 8
				nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults).Topologies = nemesis.List{nemesis.TopoClientsFromLocks}
				c.AcquireTimeout, c.Work = time.Second, 300*time.Millisecond
			},
			Expect: Expect{MinBusy: 1, MinUnavailable: 1, Classified: true, MaxStall: 15 * time.Second},
		},
		{
			Name: "redlock-clock-jump", AntiPattern: KnownBug, Needs: []Need{Redlock},
			Title: "known bug: forward clock jumps on a majority of Redlock's masters during one lease let a second client take the lock",
			Apply: func(c *harness.Config, _ targets.Backend) {
				// A long lease held for most of its TTL; short forward
				// jumps larger than the TTL, one master after another,
				// expire the holder's key wherever they land: three
				// masters within one lease and another client takes a
				// majority while the first still holds (and writes).
				// A jump takes about a second to inject and verify under
				// load: a 25 s hold sees a dozen or more, landing on three
				// of the five masters or more.
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.UnfencedCounter, faultClock, 1, 3
				c.LeaseTTL, c.Work, c.AcquireTimeout = 30*time.Second, 25*time.Second, 30*time.Second
				// The harness waits out a whole wait and hold, so that the
				// second holder's operation is seen whole (not timed out).
				c.OpTimeout = 70 * time.Second
				setFault(c, faultClock, map[string]string{"clock-targets": nemesis.GroupNode, "clock-modes": "bump", "clock-direction": "forward",
					"clock-min": "31s", "clock-max": "32s"})
				c.FaultMin, c.FaultMax, c.NemesisInterval = 150*time.Millisecond, 250*time.Millisecond, 200*time.Millisecond
			},
			Expect: Expect{Valid: verdict(checkers.Invalid), MinOverlaps: 1},
		},
		{
			Name: "redlock-clock-drift", AntiPattern: KnownBug, Needs: []Need{Redlock},
			Title: "known bug: three of Redlock's five masters whose clocks run 15% fast let a second client take a live lock (2 s TTL, redsync's drift factor 0.01)",
			Apply: func(c *harness.Config, _ targets.Backend) {
				// Redlock grants a holder TTL·(1 − 0.01) − 2 ms less the
				// time the acquisition took (1.976 s of a 2 s TTL); the
				// holder uses 1.8 s of it. Masters whose clocks run at r
				// expire its keys after 2 s / r of true time: past
				// r ≈ 2/1.8 a second client takes three of them while the
				// first still works inside its validity. The drift holds
				// the whole run (three masters drawn per fault), so that
				// every hold is under it; 1.15 is the smallest rate that
				// gave overlapping holds in runs (docs/known-bugs.md).
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.UnfencedCounter, faultClock, 1, 3
				c.LeaseTTL, c.Work, c.AcquireTimeout = 2*time.Second, 1800*time.Millisecond, 5*time.Second
				setFault(c, faultClock, map[string]string{"clock-targets": nemesis.GroupNode, "clock-modes": "drift", "clock-direction": "forward",
					"clock-count": "3", "clock-rate-min": "1.15", "clock-rate-max": "1.15"})
				c.FaultMin, c.FaultMax, c.NemesisInterval = 15*time.Second, 15*time.Second, 200*time.Millisecond
				c.TimeLimit = max(c.TimeLimit, 20*time.Second)
			},
			Expect: Expect{Valid: verdict(checkers.Invalid), MinOverlaps: 1},
		},
		{
			Name: "redlock-restart-no-persistence", AntiPattern: KnownBug, Needs: []Need{Redlock},
			Title: "known bug: Redlock masters killed and restarted at once without persistence forget the holder's lock, and a second client takes it",
			Apply: func(c *harness.Config, _ targets.Backend) {
				// Redlock assumes a crashed master stays down longer than
				// a TTL; here each is back within a second, empty.
				// A kill and its restart take 3-5 s under load: a 25 s hold
				// sees about six, on three of the five masters or more.
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.UnfencedCounter, nemesis.KillName, 1, 3
				c.LeaseTTL, c.Work, c.AcquireTimeout = 30*time.Second, 25*time.Second, 30*time.Second
				// The harness waits out a whole wait and hold, so that the
				// second holder's operation is seen whole (not timed out).
				c.OpTimeout = 70 * time.Second
				nemesis.SpecOf[*nemesis.KillSpec](c.Faults).Targets = nemesis.Weights{nemesis.GroupNode: 1}
				c.FaultMin, c.FaultMax, c.NemesisInterval = 100*time.Millisecond, 200*time.Millisecond, 400*time.Millisecond
				c.RecipeOptions = map[string]string{"persistence": "none"}
			},
			Expect: Expect{Valid: verdict(checkers.Invalid), MinOverlaps: 1},
		},
		{
			Name: "etcd-unlock-retry", AntiPattern: KnownBug, Needs: []Need{ClientOption("unlock", "retry")},
			Title: "known bug (etcd issue 22082, client v3.7.3): an Unlock retried after a timeout deletes the newer lock its session took since, and another client takes it",
			Apply: func(c *harness.Config, _ targets.Backend) {
				// The application gives Unlock 1 ms (the delete may commit
				// after the client gave up) and retries it 300 ms later
				// with the same Mutex; on one key the same session has
				// often locked again by then, under the same key name.
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.UnfencedCounter, nemesis.NoFaults, 1, 3
				c.Work = 500 * time.Millisecond
				c.RecipeOptions = map[string]string{"unlock": "retry", "unlock-timeout": "1ms", "unlock-retry-delay": "300ms"}
			},
			Expect: Expect{Valid: verdict(checkers.Invalid), MinOverlaps: 1},
		},
		{
			Name: "etcd-unlock-once", AntiPattern: 0, Needs: []Need{ClientOption("unlock", "once")},
			Title: "control of etcd-unlock-retry: the same timed-out Unlocks, not retried, give no lock away",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.UnfencedCounter, nemesis.NoFaults, 1, 3
				c.Work = 500 * time.Millisecond
				c.RecipeOptions = map[string]string{"unlock": "once", "unlock-timeout": "1ms"}
			},
			Expect: Expect{Valid: verdict(checkers.Valid), NoEarlyOverlaps: true},
		},
		{
			Name: "token-across-restarts", EndAfterRounds: 2, AntiPattern: 0, Needs: []Need{Fencing, KeepsGrants},
			Title: "fencing tokens keep rising while the lock service itself is killed and restarted (its leader, when it has one)",
			Apply: func(c *harness.Config, b targets.Backend) {
				killService(c, b)
				durable(c, b)
			},
			Expect: Expect{Valid: verdict(checkers.Valid), Lock: verdict(checkers.Valid)},
		},
		{
			Name: "token-across-restarts-unsynced", AntiPattern: 0, Needs: []Need{Fencing, KeepsGrants, Unsynced},
			Title: "control of token-across-power-loss-unsynced: the same unsynced setting keeps its tokens across kills (the kernel keeps what the process wrote; only a power loss loses it)",
			Apply: func(c *harness.Config, b targets.Backend) {
				killService(c, b)
				c.RecipeOptions = maps.Clone(b.UnsyncedWith)
			},
			Expect: Expect{Valid: verdict(checkers.Valid), Lock: verdict(checkers.Valid)},
		},
		{
			Name: "token-across-power-loss", AntiPattern: 0, Needs: []Need{Fencing, KeepsGrants, PowerCut},
			Title: "fencing tokens keep rising while the lock service loses power (all its members at once, when it has several) and loses what it had not fsynced",
			Apply: func(c *harness.Config, b targets.Backend) {
				powerLoss(c, b)
				durable(c, b)
			},
			Expect: Expect{Valid: verdict(checkers.Valid), Lock: verdict(checkers.Valid)},
		},
		{
			Name: "token-across-power-loss-unsynced", AntiPattern: 0, Needs: []Need{Fencing, KeepsGrants, PowerCut, Unsynced},
			Title: "the same power losses with the lock service's durability switch off (targets.Backend.UnsyncedWith: it acknowledges grants before they are fsynced): tokens the cut took are given again, or the service never serves again (the cut took what it needs to start)",
			Apply: func(c *harness.Config, b targets.Backend) {
				powerLoss(c, b)
				c.RecipeOptions = maps.Clone(b.UnsyncedWith)
			},
			// Either outcome is the setting's finding, never a silent
			// pass: tokens given again (Redis aof-everysec, 9 of 10), or
			// the service gone for the rest of the run (the key stalled
			// to the end, 10 s at least) because the cut took what it
			// needs to start — PostgreSQL fsync=off's postmaster.pid
			// ("lock file is empty"), ZooKeeper's first snapshot, etcd
			// unsafe-no-fsync's whole log and backend. Not forced: a cut
			// must land after an unsynced grant. At this fault rate a
			// durable service may also stall to the end (slow restarts,
			// ZooKeeper's unsynced first snapshot): the stall says the
			// run showed a failure, the nodes' logs say whose.
			// docs/power-loss.md has the rates and the logs.
			Expect: Expect{Lock: verdict(checkers.Invalid), Or: &Expect{StallToEnd: true, MinStall: 10 * time.Second}},
		},
		{
			Name: "late-writer-drill", EndAfterRounds: 3, AntiPattern: 0, Needs: []Need{Fencing}, Drill: true,
			Title: "partition a slow holder from the lock service, heal, and watch fencing stop its late write",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.FencedCounter, nemesis.PartitionName, 1, 4
				nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults).Topologies = nemesis.List{nemesis.TopoClientsFromLocks}
				c.Work, c.NemesisInterval = 3*time.Second, 2*time.Second
			},
			Expect: Expect{Valid: verdict(checkers.Valid), MinLateRejected: 1},
		},
		{
			Name: "late-writer-drill-store-fence", EndAfterRounds: 3, AntiPattern: 0, Needs: []Need{NoToken}, Drill: true,
			Title: "a client with no token, fenced at the store: partition a slow holder from the lock service, heal, and watch the counter row's version check (--store postgres --store-opt check=version) refuse the stale write",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.UnfencedCounter, nemesis.PartitionName, 1, 4
				nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults).Topologies = nemesis.List{nemesis.TopoClientsFromLocks}
				c.Work, c.NemesisInterval = 3*time.Second, 2*time.Second
				storeVersionCheck(c)
			},
			// Of two writes whose reads saw the same version, the later is
			// refused (the late writer's, or the next holder's when the
			// late one landed first): no update is lost. 3 s of work
			// against a 2 s lease makes such pairs by construction.
			Expect: Expect{Valid: verdict(checkers.Valid), MinRejections: 1},
		},
		{
			Name: "delayed-renewal-unfenced", AntiPattern: 5, Needs: []Need{Renewing},
			Title: "a holder's slow link to the lock service (a TTL ± a quarter on what it sends) delays its renewal past the TTL: the lease expires under a working holder and an unfenced write is lost",
			Apply: func(c *harness.Config, _ targets.Backend) {
				slowLockLink(c)
				c.Workload = workloads.UnfencedCounter
			},
			Expect: Expect{Valid: verdict(checkers.Invalid), MinLostUpdates: 1},
		},
		{
			Name: "delayed-renewal-fenced", AntiPattern: 0, Needs: []Need{Renewing, Fencing, CheckedRelease},
			Title: "the same slow link to the lock service with fencing: the lease still expires under the holder, and its stale write is refused",
			Apply: func(c *harness.Config, _ targets.Backend) {
				slowLockLink(c)
				c.Workload = workloads.FencedCounter
			},
			Expect: Expect{Valid: verdict(checkers.Valid)},
		},
		{
			Name: "slow-store-late-write", AntiPattern: 0, Needs: []Need{FixedTTL, Fencing},
			Title: "a slow link from the holder to the store (¾ TTL on each request it sends, half a TTL of work): its write lands after its lease expired, behind the next holder's read: fencing refuses the late write",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.FencedCounter, faultPacket, 1, 3
				setFault(c, faultPacket, map[string]string{"packet-effects": "latency", "packet-links": nemesis.LinkStore,
					"packet-direction": "to", "packet-clients": "holder", "packet-latency": (c.LeaseTTL * 3 / 4).String()})
				// The fault lands just after a grant, when the holder's
				// read is often already sent: its write alone is slow.
				// Half a TTL of work puts that write past the lease
				// (sent at ½ TTL, it lands at 1¼ TTL, a quarter after
				// the next holder's grant and read), so every section
				// the fault reaches has a late write. With 300 ms of
				// work it landed within the lease, and a rejection
				// needed the same holder to take the lock again while
				// the fault lasted: missed in 1 run of 8, and in 1 of 8
				// with faults of 3 TTLs (another client kept the lock).
				c.Work, c.NemesisInterval = c.LeaseTTL/2, 2*time.Second
				c.StoreTimeout = 2 * c.LeaseTTL
			},
			Expect: Expect{Valid: verdict(checkers.Valid), MinRejections: 1},
		},
		// Known reports (the known-bugs set; docs/zookeeper.md has the
		// sources, versions and what was observed).
		{
			Name: "curator-disconnect-two-holders", AntiPattern: KnownBug, Needs: []Need{ClientIs("curator")},
			Title: "Curator InterProcessMutex: a holder cut from ZooKeeper past its session timeout still holds while another acquires (CURATOR-206)",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.UnfencedCounter, nemesis.PartitionName, 1, 3
				nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults).Topologies = nemesis.List{nemesis.TopoClientsFromLocks}
				c.Work, c.NemesisInterval = 3*time.Second, 2*time.Second
			},
			Expect: Expect{Valid: verdict(checkers.Invalid), MinOverlaps: 1},
		},
		{
			Name: "curator-session-expiry-race", AntiPattern: KnownBug, Needs: []Need{ClientIs("curator")},
			Title: "Curator InterProcessMutex: sessions of holders and waiters expire while they are frozen, and the woken holder writes (CURATOR-604)",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.UnfencedCounter, nemesis.PauseName, 1, 4
				nemesis.SpecOf[*nemesis.PauseSpec](c.Faults).Targets = nemesis.Weights{nemesis.GroupHolder: 2, nemesis.GroupClient: 1}
				c.Work, c.NemesisInterval = 300*time.Millisecond, 2*time.Second
			},
			Expect: Expect{Valid: verdict(checkers.Invalid), MinLostUpdates: 1},
		},
		// Kubernetes leader election (client-go tools/leaderelection on a
		// Lease; docs/kubernetes.md): the library says it does not
		// guarantee a single leader. A leader cut from the API servers
		// stops renewing; the others take the Lease a LeaseDuration
		// after the last renewal they saw, while the cut leader, which
		// still reaches the store, finishes its work and writes.
		{
			Name: "leader-election-cut-leader", AntiPattern: KnownBug, Needs: []Need{ClientIs(kubernetesKind)},
			Title: "client-go leader election: a leader cut from the API servers (still reaching the store) finishes its work and writes after another candidate took the Lease",
			Apply: func(c *harness.Config, _ targets.Backend) {
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.UnfencedCounter, nemesis.PartitionName, 1, 3
				nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults).Topologies = nemesis.List{nemesis.TopoClientsFromLocks}
				c.Work, c.NemesisInterval = 3*time.Second, 2*time.Second
			},
			// Fenced, the same cut is late-writer-drill (its late write
			// refused).
			Expect: Expect{Valid: verdict(checkers.Invalid), MinLostUpdates: 1},
		},
		// A candidate whose clock runs fast: client-go judges a holder's
		// Lease expired when this candidate has seen it unchanged for a
		// LeaseDuration on its own monotonic clock ("tolerant to arbitrary
		// clock skew, but is not tolerant to arbitrary clock skew rate").
		// A change of the record restarts the candidates' wait, compared
		// as JSON with renewTime in whole seconds: a renewing leader's
		// record changes for them about once a second, so a candidate
		// that counts a LeaseDuration within one such second (rate above
		// about LeaseDuration / 1 s) takes a live lease
		// (docs/kubernetes.md has the rates measured).
		{
			Name: "leader-election-fast-candidate", AntiPattern: KnownBug, Needs: []Need{CandidateClockExpiry},
			Title: "client-go leader election: a candidate whose monotonic clock runs 10 times fast judges a renewing leader's Lease expired and takes it while the leader still works and writes",
			Apply: func(c *harness.Config, _ targets.Backend) {
				// One of three clients drifts for the whole run (one
				// fault longer than it, healed at its end: the heal's
				// jump back of CLOCK_MONOTONIC would stall the Go
				// client's timers for what the drift gained), so that
				// it is a candidate most of the time; holds of half a
				// TTL see about four renewals each.
				c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.UnfencedCounter, faultClock, 1, 3
				c.Work = c.LeaseTTL / 2
				setFault(c, faultClock, map[string]string{"clock-targets": nemesis.GroupClient, "clock-modes": "drift", "clock-direction": "forward",
					"clock-monotonic": "true", "clock-rate-min": fastCandidateRate, "clock-rate-max": fastCandidateRate})
				c.TimeLimit = max(c.TimeLimit, 20*time.Second)
				c.FaultMin, c.FaultMax, c.NemesisInterval = 2*c.TimeLimit, 2*c.TimeLimit, 200*time.Millisecond
			},
			// The mutex checker leaves the holds of a client whose
			// monotonic clock a fault moved unjudged, so the finding is
			// the data's: the leader's late write loses the candidate's
			// increment.
			Expect: Expect{Valid: verdict(checkers.Invalid), MinLostUpdates: 1},
		},
		// A session lock's known problem (docs/postgres.md has the
		// figures): the half-open holder.
		{
			Name: "half-open-session", AntiPattern: KnownBug, Needs: []Need{SessionLock, ClientOption("timeout", "none"), Fencing},
			Title: "known problem: a holder cut from the database keeps its session lock (a PostgreSQL advisory lock, a MariaDB named lock) until the server notices its session is gone (TCP keepalives: 2 h by default), and the others wait",
			Apply: func(c *harness.Config, _ targets.Backend) {
				halfOpen(c)
			},
			// Safe (fenced), but the key stalls for the whole cut and
			// beyond: nothing ends the session while the cut lasts.
			Expect: Expect{Valid: verdict(checkers.Valid), MinStall: 10 * time.Second},
		},
		{
			Name: "half-open-keepalive", AntiPattern: 0, Needs: []Need{SessionLock, ClientOption("timeout", "none"), Keepalive, Fencing},
			Title: "control of half-open-session: the same cut with the server's TCP keepalives at 1 s idle, 1 s interval, 2 probes: the lock comes back within seconds",
			Apply: func(c *harness.Config, b targets.Backend) {
				halfOpen(c)
				maps.Copy(c.RecipeOptions, b.KeepaliveWith)
			},
			Expect: Expect{Valid: verdict(checkers.Valid), Recovers: true, MaxStall: 9 * time.Second},
		},
		// Asynchronous replication and failover (docs/redis-sentinel.md
		// has the rates and docs/known-bugs.md Redis's own words).
		{
			Name: "failover-loses-lock", AntiPattern: KnownBug, Needs: []Need{LosesOnFailover},
			Title: "known behaviour: the primary is cut off with one client while the others promote a replica: two primaries grant the lock at once (split brain), and an unfenced counter loses updates",
			Apply: func(c *harness.Config, _ targets.Backend) {
				splitBrain(c)
				c.Workload = workloads.UnfencedCounter
			},
			Expect: Expect{Valid: verdict(checkers.Invalid), MinLostUpdates: 1},
		},
		{
			Name: "failover-token-back", EndAfterRounds: 1, AntiPattern: KnownBug, Needs: []Need{LosesOnFailover, Fencing},
			Title: "known behaviour: the same split brain, fenced: the promoted replica counts tokens from behind the old primary's, the lock's fence order breaks, and the store refuses the tokens that went back (each token unique to the primary that gave it)",
			Apply: func(c *harness.Config, _ targets.Backend) {
				splitBrain(c)
				c.Workload = workloads.FencedCounter
			},
			Expect: Expect{Lock: verdict(checkers.Invalid), Data: verdict(checkers.Valid), MinRejections: 1},
		},
		{
			Name: "failover-token-equal", AntiPattern: KnownBug, Needs: []Need{LosesOnFailover, Fencing, ClientOption("token", "counter")},
			Title: "known behaviour: the same split brain, fenced with the plain INCR counter: both primaries hand out the same token values, the store takes an equal token for the same holder's retry, and updates are lost despite fencing",
			Apply: func(c *harness.Config, _ targets.Backend) {
				splitBrain(c)
				c.Workload = workloads.FencedCounter
				c.RecipeOptions = map[string]string{"token": "counter"}
			},
			Expect: Expect{Lock: verdict(checkers.Invalid), Data: verdict(checkers.Invalid), MinLostUpdates: 1},
		},
		{
			Name: "failover-wait-replica", AntiPattern: 0, Needs: []Need{LosesOnFailover, ClientOption("wait", "1")},
			Title: "the same split brain with WAIT 1 after every grant: the cut-off primary gets no replica's acknowledgement and its grants are refused, so no second holder (WAIT narrows the window: it does not make failover safe)",
			Apply: func(c *harness.Config, _ targets.Backend) {
				splitBrain(c)
				c.Workload = workloads.UnfencedCounter
				c.RecipeOptions = map[string]string{"wait": "1"}
			},
			Expect: Expect{Valid: verdict(checkers.Valid), NoEarlyOverlaps: true},
		},
	}
}

// splitBrain cuts the lock service's leader off with one of four clients
// for 10 s, from a second into the run: long enough for the others to promote
// another leader and take locks from it while the cut-off client still
// takes them from the old one.
func splitBrain(c *harness.Config) {
	c.Nemesis, c.Keys, c.Concurrency = nemesis.PartitionName, 1, 4
	nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults).Topologies = nemesis.List{nemesis.TopoLeaderWithClient}
	c.Work, c.AcquireTimeout = 200*time.Millisecond, 2*time.Second
	c.FaultMin, c.FaultMax, c.NemesisInterval = 10*time.Second, 10*time.Second, time.Second
}

// halfOpen is the half-open holder: three clients on one key, each holding
// it 2 s; a holder is cut from the lock service for 12 s; its lock lasts
// as long as its session (timeout=none: no idle timeout on the session).
func halfOpen(c *harness.Config) {
	c.Workload, c.Nemesis, c.Keys, c.Concurrency = workloads.FencedCounter, nemesis.PartitionName, 1, 3
	nemesis.SpecOf[*nemesis.PartitionSpec](c.Faults).Topologies = nemesis.List{nemesis.TopoClientsFromLocks}
	c.Work, c.AcquireTimeout = 2*time.Second, 2*time.Second
	c.FaultMin, c.FaultMax, c.NemesisInterval = 12*time.Second, 12*time.Second, time.Second
	c.RecipeOptions = map[string]string{"timeout": "none"}
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

// Config returns the run options of s on the registered backend called
// target.
func (s Scenario) Config(target string, base harness.Config) (harness.Config, error) {
	b, err := targets.Lookup(target)
	if err != nil {
		return base, err
	}
	return s.ConfigFor(b, base)
}

// ConfigFor returns the run options of s on backend b.
func (s Scenario) ConfigFor(b targets.Backend, base harness.Config) (harness.Config, error) {
	if !s.AppliesTo(b) {
		return base, fmt.Errorf("scenario %s does not apply to target %s: it needs %s (it applies to %s)",
			s.Name, b.Name, s.needs(), strings.Join(s.Targets(), ", "))
	}
	c := base
	c.Target = b.Name
	c.Faults = base.Faults.Clone() // Apply changes c's settings, not base's
	s.Apply(&c, b)
	return c, nil
}
