package scenario

import (
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/targets"
)

// validationScenarios back the checklist.
// A client with no fencing token gets the unfenced variants (their
// NoToken need) and the drill fenced at the store.
var validationScenarios = []string{"correct-pattern", "token-across-restarts", "holder-lost-recovery", "holder-lost-recovery-unfenced",
	"late-writer-drill", "late-writer-drill-store-fence", "unfenced-late-write", "busy-vs-unavailable", "busy-vs-unavailable-unfenced",
	"single-node-away", "single-node-away-unfenced", "failover-token-back"}

// The checklist's questions.
const (
	qExpiry    = "Lease with auto-expiry, decided by the service?"
	qToken     = "Monotonic fencing token, strictly checked on all write paths?"
	qOwner     = "Owner-checked release?"
	qShort     = "Short critical sections?"
	qWatchdog  = "Watchdog renewal only while healthy?"
	qConsensus = "Consensus-backed service (and fencing anyway)?"
	qBusy      = "Busy vs unavailable told apart?"
	qMetrics   = "Metrics for lock wait, hold time, renew failures and fencing rejections?"
	qDrill     = "Partition-then-heal drill with a late writer run?"
)

// ValidationSet is the set `splitbrain validate` runs against one target:
// the scenarios whose results back the lock-safety checklist, in the
// target's default configuration.
func ValidationSet(target string, timeLimit time.Duration) *Set {
	s, _ := ValidationSetWith(target, "", nil, timeLimit)
	return s
}

// ValidationSetWith is ValidationSet with the lock client called client
// (a registered library; "" is the target's own) and the configuration
// under test opts (validate --recipe-opt; nil: the defaults): the
// scenarios that apply with it, each run in that configuration, never in
// one a scenario prefers. Options the target and client do not take are
// refused (an InputError naming the known ones).
func ValidationSetWith(target, client string, opts map[string]string, timeLimit time.Duration) (*Set, error) {
	return Candidate{Target: target, Client: client, RecipeOptions: opts}.Set(timeLimit)
}

// validates reports whether validate runs scenario sc (one of
// validationScenarios) for backend b with client r: those that apply with
// it, less the runs whose every question another run answers.
// unfenced-late-write shows what a client with no token loses (the token
// item's answer for it); a client that gives tokens has its owner check
// from correct-pattern's paused holders, and its token item from its
// fenced runs.
func validates(sc Scenario, b targets.Backend, r targets.Recipe) bool {
	if sc.Name == "unfenced-late-write" && r.Fencing {
		return false
	}
	return sc.AppliesWith(b, r)
}

// Answer is a checklist item's answer.
type Answer string

// Answers. An item none of whose runs put its fault on the system answers
// NotTested, never Pass: a property a run did not challenge was not shown.
// An item that cannot apply to the client (a fencing token's order, for a
// client that gives none) answers NotApplicable, with why in one word
// (Item.Why) and what happens instead, from runs, in its evidence.
const (
	Pass          Answer = "PASS"
	Fail          Answer = "FAIL"
	NotTested     Answer = "NOT TESTED"
	NotApplicable Answer = "N/A"
)

// WhyNoToken is why an item about the fencing token does not apply: the
// client gives none.
const WhyNoToken = "no token"

// RunRef is a run behind an answer.
type RunRef struct {
	Scenario string `json:"scenario"`
	Seed     uint64 `json:"seed"`
	// Dir is the run's results directory (report.html, results.json).
	Dir string `json:"dir"`
	// Exercised says the run put the item's fault on the system.
	Exercised bool `json:"exercised"`
	// Drill says the run is a drill (or an anti-pattern) whose result is
	// reported as its own, not the recipe's ordinary behaviour.
	Drill bool `json:"drill,omitempty"`
}

// Item is one line of the checklist: the property it judges, the fault
// that would break it, the answer and the runs behind it.
type Item struct {
	Question string `json:"question"`
	// Property is what the item judges; Fault is what would break it.
	Property string `json:"property"`
	Fault    string `json:"fault"`
	Answer   Answer `json:"answer"`
	// Why says in one word why the item does not apply (NotApplicable).
	Why      string   `json:"why,omitempty"`
	Evidence string   `json:"evidence"`
	Runs     []RunRef `json:"runs,omitempty"`
}

// Passed reports whether the item answered PASS.
func (it Item) Passed() bool { return it.Answer == Pass }

// Exercised counts the item's runs that put its fault on the system.
func (it Item) Exercised() int {
	n := 0
	for _, r := range it.Runs {
		if r.Exercised {
			n++
		}
	}
	return n
}

// question is one checklist item: what it judges, the fault that breaks
// it, which runs may show it, which of them put the fault on the system,
// and how it is answered from those.
type question struct {
	q, property, fault string
	// runs are the scenarios the item looks at.
	runs func(r Row) bool
	// exercised says a run put the item's fault on the system.
	exercised func(b targets.Backend, r Row) bool
	// judge answers from the runs (all) and those that exercised the
	// fault (ex, non-empty unless the item may fail without them).
	judge func(b targets.Backend, all, ex []Row) (Answer, string)
	// notTested says why no run exercised the fault.
	notTested string
	// failsUnexercised says the item may FAIL on runs that did not put
	// its fault on the system (what they showed is a failure anyway, or
	// the backend's declaration fails it); otherwise it is NOT TESTED.
	failsUnexercised bool
	// noToken, when set, answers the item for a client that gives no
	// fencing token: it does not apply (WhyNoToken), and noToken says
	// from all of the candidate's runs what happens instead, with the
	// runs it looked at.
	noToken func(rows []Row) (string, []Row)
}

func scenarioIs(names ...string) func(Row) bool {
	return func(r Row) bool { return slices.Contains(names, r.Scenario) }
}

// questions are the checklist, in the lock-safety brief's order.
var questions = []question{
	{
		q:         qExpiry,
		property:  "a lock whose holder dies is freed by the service when its lease runs out, and granted again",
		fault:     "a holder killed in its critical section",
		runs:      scenarioIs("holder-lost-recovery", "holder-lost-recovery-unfenced"),
		exercised: func(_ targets.Backend, r Row) bool { return r.ClientKills > 0 },
		notTested: "no run killed a holder",
		judge: func(_ targets.Backend, _, ex []Row) (Answer, string) {
			a, stall, ttl, stuck := Pass, time.Duration(0), time.Duration(0), 0
			for _, r := range ex {
				stall, ttl = max(stall, r.Stall), r.LeaseTTL
				if r.StalledToEnd {
					stuck++
				}
				if r.StalledToEnd || !r.Pass() {
					a = Fail
				}
			}
			return a, fmt.Sprintf("%d holder kills; longest stall %v with TTL %v; %d keys never recovered%s",
				sum(ex, func(r Row) int { return r.ClientKills }), stall.Round(100*time.Millisecond), ttl, stuck, mismatches(ex))
		},
	},
	{
		q:        qToken,
		property: "every grant's fencing token is above every earlier grant's, and the store refuses an older token on every write",
		fault:    "the lock service killed and restarted, or cut from power (its leader, or a quorum, when it has several members): a service that forgets its counter, that had not fsynced it, or a new leader behind the old one, gives low tokens again",
		runs:     func(r Row) bool { return r.Fenced },
		exercised: func(b targets.Backend, r Row) bool {
			switch {
			case r.Scenario == "failover-token-back":
				// Its leader cut off with a client while the others
				// fail over.
				return r.Partitions > 0
			case b.Size > 1 && b.Leads:
				// A member that lost power catches up from the others;
				// committed entries are lost only when a quorum loses
				// them at once.
				return r.LeaderKills > 0 || r.PowerLossMost > b.Size/2
			}
			return r.NodeKills > 0 || r.PowerLosses > 0
		},
		notTested:        "no fenced run killed the lock service or cut its power (or, with several members, killed its leader, cut a quorum's power or cut its leader off)",
		failsUnexercised: true,
		noToken:          unfencedInstead,
		judge: func(b targets.Backend, all, ex []Row) (Answer, string) {
			out, lockBad, rej := 0, 0, 0
			for _, r := range all {
				out += r.NonMonotonic
				rej += r.Rejections
				if r.Lock == checkers.Invalid {
					lockBad++
				}
			}
			kills := fmt.Sprintf("%d fenced runs, %d of them killed the lock service or cut its power (%d kills, %d of its leader; %d power losses)",
				len(all), len(ex), sum(ex, func(r Row) int { return r.NodeKills }), sum(ex, func(r Row) int { return r.LeaderKills }),
				sum(ex, func(r Row) int { return r.PowerLosses }))
			ev := fmt.Sprintf("%s: %d grants out of token order, %d runs whose lock broke its fence order, %d stale writes refused by the store",
				kills, out, lockBad, rej)
			if sum(ex, func(r Row) int { return r.PowerLosses }) == 0 {
				// A kill keeps what the kernel holds: whether the
				// service fsyncs what it acknowledged was not tested.
				ev += "; no run cut its power, so whether it fsyncs its tokens before giving them was not tested"
			}
			switch {
			case out > 0 || lockBad > 0:
				return Fail, ev + durableHint(b, all)
			case len(ex) == 0:
				return NotTested, ev
			case rej == 0:
				return NotTested, ev + " (no stale write reached the store: its check was not exercised)"
			}
			return Pass, ev
		},
	},
	{
		q:        qOwner,
		property: "a release deletes only the releaser's own lock: no live lock is given away",
		fault:    "a holder paused past its lease, releasing after another client took the lock",
		// unfenced-late-write pauses holders past their lease too: its
		// anti-pattern is the write, not the release (a client with no
		// token has no fenced run that pauses holders).
		runs:             func(r Row) bool { return r.UnderTest || r.Scenario == "unfenced-late-write" },
		exercised:        func(_ targets.Backend, r Row) bool { return r.ClientPauses > 0 },
		notTested:        "no run of the recipe under test paused a holder",
		failsUnexercised: true,
		judge: func(_ targets.Backend, all, ex []Row) (Answer, string) {
			early := sum(all, func(r Row) int { return r.Early })
			ev := fmt.Sprintf("%d holder pauses in %d runs: %d overlapping holds, %d of them a live lock given away",
				sum(ex, func(r Row) int { return r.ClientPauses }), len(ex), sum(all, func(r Row) int { return r.Overlaps }), early)
			if early > 0 {
				return Fail, ev
			}
			if len(ex) == 0 {
				return NotTested, ev
			}
			return Pass, ev
		},
	},
	{
		q:        qShort,
		property: "the recipe under test holds its locks briefly against the lease (hold p99 under half the TTL), also while the lock service is faulted; holds a fault froze on purpose (a paused holder, a drill's slow holder) are not judged",
		fault:    "faults on the lock service and on other clients (kills, leader loss, partitions) that slow grants, renewals and releases while sections run",
		runs:     func(r Row) bool { return r.UnderTest || r.Scenario == "late-writer-drill" },
		exercised: func(_ targets.Backend, r Row) bool {
			return r.UnderTest && r.Faults > 0 && r.Ops > 0 && r.ClientPauses == 0
		},
		notTested: "no run of the recipe under test completed critical sections under faults that left its holders running",
		judge: func(_ targets.Backend, all, ex []Row) (Answer, string) {
			var p99, ttl time.Duration
			for _, r := range ex {
				p99, ttl = max(p99, r.HoldP99), r.LeaseTTL
			}
			ev := fmt.Sprintf("hold p99 %v against a %v lease in %d runs of the recipe under test", p99.Round(time.Millisecond), ttl, len(ex))
			for _, r := range all {
				switch {
				case !r.UnderTest:
					ev += fmt.Sprintf("; %s (drill, slow holders on purpose): hold p99 %v, not judged", r.Scenario, r.HoldP99.Round(time.Millisecond))
				case r.ClientPauses > 0:
					ev += fmt.Sprintf("; %s (%d holders paused on purpose): hold p99 %v, not judged", r.Scenario, r.ClientPauses, r.HoldP99.Round(time.Millisecond))
				}
			}
			switch {
			case len(ex) == 0:
				return NotTested, ev
			case p99 >= ttl/2:
				return Fail, ev
			}
			return Pass, ev
		},
	},
	{
		q:        qWatchdog,
		property: "a holder renews its lease only while it reaches the lock service: cut off, its renewals fail and the lease runs out",
		fault:    "a holder cut off from the lock service during a hold longer than the lease (late-writer-drill)",
		runs:     scenarioIs("late-writer-drill", "late-writer-drill-store-fence"),
		// A partition that fell between holds cut nobody off: the run
		// answers only when a holder was cut off during a hold, seen as a
		// renewal that failed, or as a hold that outlived its lease (a
		// grant to another while it still held, a late write refused).
		exercised: func(_ targets.Backend, r Row) bool {
			return r.Partitions > 0 && (r.RenewFailures > 0 || r.Overlaps > 0 || r.LateRejected > 0)
		},
		notTested: "no run cut a holder off during a hold (partitions fell between holds: no renewal failed, no hold outlived its lease)",
		judge: func(_ targets.Backend, all, ex []Row) (Answer, string) {
			n := sum(ex, func(r Row) int { return r.RenewFailures })
			ev := fmt.Sprintf("drill: %d partitions, %d renewals failed while holders were cut off", sum(all, func(r Row) int { return r.Partitions }), n)
			if len(ex) == 0 {
				// Nobody was cut off: nothing says the recipe renews or not.
				return NotTested, ev
			}
			if n == 0 {
				return Fail, ev + fmt.Sprintf(" (none, though %d holds outlived their lease: the recipe does not renew, a fixed TTL)",
					sum(ex, func(r Row) int { return max(r.Overlaps, r.LateRejected) }))
			}
			return Pass, ev
		},
	},
	{
		q:        qConsensus,
		property: "the lock service is replicated with a leader (3 or more members), and the fenced correct pattern stays correct when members are cut off or killed",
		fault:    "partitions and kills of lock-service members (and of its leader)",
		// A client with no token has the unfenced runs that cut the
		// service off instead.
		runs: scenarioIs("correct-pattern", "token-across-restarts", "failover-token-back", "single-node-away-unfenced", "busy-vs-unavailable-unfenced"),
		exercised: func(_ targets.Backend, r Row) bool {
			return r.NodeKills > 0 || (r.Scenario != "token-across-restarts" && r.Partitions > 0)
		},
		notTested:        "no fenced run of the recipe under test partitioned or killed lock-service members",
		failsUnexercised: true,
		judge: func(b targets.Backend, _, ex []Row) (Answer, string) {
			ev := fmt.Sprintf("%d lock nodes, leader: %v", b.Size, b.Leads)
			if b.Size < 3 || !b.Leads {
				return Fail, ev + ": not a consensus-backed service (by its declaration)"
			}
			if b.LosesOnFailover {
				lockBad := 0
				for _, r := range ex {
					if r.Lock == checkers.Invalid {
						lockBad++
					}
				}
				return Fail, ev + fmt.Sprintf(", replicated asynchronously: a failover loses what the old leader acknowledged (by its declaration); %d of %d fenced runs under member faults broke the lock's fence order%s",
					lockBad, len(ex), mismatches(ex))
			}
			ev += fmt.Sprintf("; %d fenced runs under member faults (%d partitions, %d kills)", len(ex),
				sum(ex, func(r Row) int { return r.Partitions }), sum(ex, func(r Row) int { return r.NodeKills }))
			if len(ex) == 0 {
				return NotTested, ev
			}
			if slices.ContainsFunc(ex, func(r Row) bool { return r.NoToken }) {
				// Consensus prevents double grants, not late writes.
				return Fail, ev + "; the client gives no fencing token: nothing stops a late write (fence at the store: --store postgres --store-opt check=version)"
			}
			if anyMissed(ex) {
				return Fail, ev + mismatches(ex)
			}
			return Pass, ev + ", all as expected"
		},
	},
	{
		q:         qBusy,
		property:  "a failed acquisition says whether the lock was held (busy) or the service could not answer (unavailable)",
		fault:     "clients cut off from the lock service while others contend for the lock",
		runs:      scenarioIs("busy-vs-unavailable", "single-node-away", "busy-vs-unavailable-unfenced", "single-node-away-unfenced"),
		exercised: func(_ targets.Backend, r Row) bool { return r.Partitions > 0 },
		notTested: "no run cut clients off from the lock service",
		judge: func(_ targets.Backend, _, ex []Row) (Answer, string) {
			busy, un := sum(ex, func(r Row) int { return r.Busy }), sum(ex, func(r Row) int { return r.Unavailable })
			ev := fmt.Sprintf("drills: %d acquisitions failed because the lock was held, %d because the service could not answer", busy, un)
			if anyMissed(ex) {
				return Fail, ev + mismatches(ex)
			}
			if busy == 0 || un == 0 {
				return Fail, ev
			}
			return Pass, ev
		},
	},
	{
		q:         qMetrics,
		property:  "every run records lock wait, hold time, renew failures and fencing rejections (results.json, metrics)",
		fault:     "faults that make acquisitions wait and fail, renewals fail and stale writes be refused",
		runs:      func(Row) bool { return true },
		exercised: func(_ targets.Backend, r Row) bool { return r.Faults > 0 && r.Ops > 0 },
		notTested: "no run completed critical sections under faults",
		judge: func(_ targets.Backend, _, ex []Row) (Answer, string) {
			var p99 time.Duration
			for _, r := range ex {
				p99 = max(p99, r.HoldP99)
			}
			rf, rej := sum(ex, func(r Row) int { return r.RenewFailures }), sum(ex, func(r Row) int { return r.Rejections })
			fails := sum(ex, func(r Row) int { return r.Busy + r.Unavailable })
			ev := fmt.Sprintf("%d runs under faults recorded hold p99 up to %v, %d failed acquisitions, %d renew failures, %d fencing rejections",
				len(ex), p99.Round(time.Millisecond), fails, rf, rej)
			if p99 == 0 || fails+rf+rej == 0 {
				return Fail, ev + " (nothing recorded)"
			}
			return Pass, ev
		},
	},
	{
		q:         qDrill,
		property:  "a slow holder partitioned from the lock service, then healed, writes late and fencing refuses its write (for a client with no token: the store's version check refuses one of the two writes whose reads saw the same row)",
		fault:     "a holder partitioned from the lock service mid-section and healed (late-writer-drill)",
		runs:      scenarioIs("late-writer-drill", "late-writer-drill-store-fence"),
		exercised: func(_ targets.Backend, r Row) bool { return r.Partitions > 0 },
		notTested: "the drill cut no holder off",
		judge: func(_ targets.Backend, _, ex []Row) (Answer, string) {
			// Fenced at the store by the row's version (no token): of two
			// writes whose reads saw the same version the later is
			// refused, the late writer's or the next holder's; its
			// refusals count here, not as a token's.
			late := sum(ex, func(r Row) int {
				if r.Fenced {
					return r.LateRejected
				}
				return 0
			})
			ev := fmt.Sprintf("drill: %d partitions, %d late writes refused by fencing", sum(ex, func(r Row) int { return r.Partitions }), late)
			if stale := sum(ex, func(r Row) int {
				if r.Fenced {
					return 0
				}
				return r.Rejections
			}); stale > 0 {
				late += stale
				ev += fmt.Sprintf(", %d stale writes refused by the store's version check (--store postgres --store-opt check=version)", stale)
			}
			for _, r := range ex {
				if r.Verdict == checkers.Invalid {
					return Fail, ev + "; verdict invalid" + mismatches(ex)
				}
			}
			if late == 0 {
				return NotTested, ev + " (no late write happened: no cut landed on a holder mid-section)"
			}
			return Pass, ev
		},
	},
}

// unfencedInstead says, for a client with no fencing token, what its runs
// show instead of a token's order: the updates a holder paused past its
// lease lost (unfenced-late-write) and what the store's version check
// made of the same kind of late write (late-writer-drill-store-fence).
func unfencedInstead(rows []Row) (string, []Row) {
	var out []string
	var used []Row
	for _, r := range rows {
		switch r.Scenario {
		case "unfenced-late-write":
			out = append(out, fmt.Sprintf("unfenced, a holder paused past its lease lost %d updates (%d pauses, verdict %s)", r.LostUpdates, r.ClientPauses, r.Verdict))
		case "late-writer-drill-store-fence":
			out = append(out, fmt.Sprintf("fenced at the store instead (--store postgres --store-opt check=version), %d stale writes were refused and %d updates lost (verdict %s)", r.Rejections, r.LostUpdates, r.Verdict))
		default:
			continue
		}
		used = append(used, r)
	}
	ev := "the client gives no fencing token"
	if len(out) > 0 {
		ev += ": " + strings.Join(out, "; ")
	}
	return ev, used
}

func sum(rows []Row, f func(Row) int) int {
	n := 0
	for _, r := range rows {
		n += f(r)
	}
	return n
}

// anyMissed reports whether a run missed its expectation.
func anyMissed(rows []Row) bool {
	return slices.ContainsFunc(rows, func(r Row) bool { return !r.Pass() })
}

// mismatches says how runs missed their expectations ("" when none did).
func mismatches(rows []Row) string {
	var out []string
	for _, r := range rows {
		if len(r.Mismatches) > 0 {
			out = append(out, r.Scenario+": "+strings.Join(r.Mismatches, ", "))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; " + strings.Join(out, "; ")
}

// durableHint names the configuration in which b keeps its tokens across
// a restart, when the runs had another.
func durableHint(b targets.Backend, rows []Row) string {
	if len(b.DurableWith) == 0 {
		return ""
	}
	for _, r := range rows {
		if !b.Runs(r.Options, b.DurableWith) {
			return fmt.Sprintf("; it keeps its tokens across restarts with --recipe-opt %s", kvs(b.DurableWith))
		}
	}
	return ""
}

func kvs(m map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return strings.Join(out, ",")
}

// Checklist answers the lock-safety brief's checklist for one backend from
// the rows of its validation set; b tells its shape. Each item looks at
// the runs that can show it and answers NOT TESTED when none of them put
// its fault on the system; runs that ended in a harness error count for
// nothing.
func Checklist(b targets.Backend, m *Matrix) []Item {
	var items []Item
	// A client that gives no token: what its runs say it is.
	noToken := slices.ContainsFunc(m.Rows, func(r Row) bool { return r.NoToken })
	var ran []Row
	for _, r := range m.Rows {
		if r.Error == "" {
			ran = append(ran, r)
		}
	}
	for _, q := range questions {
		it := Item{Question: q.q, Property: q.property, Fault: q.fault}
		if noToken && q.noToken != nil {
			var rows []Row
			it.Answer, it.Why = NotApplicable, WhyNoToken
			it.Evidence, rows = q.noToken(ran)
			for _, r := range rows {
				it.Runs = append(it.Runs, RunRef{Scenario: r.Scenario, Seed: r.Seed, Dir: r.Dir, Exercised: r.ClientPauses+r.Partitions > 0, Drill: !r.UnderTest})
			}
			items = append(items, it)
			continue
		}
		var all, ex []Row
		for _, r := range m.Rows {
			if r.Error != "" || !q.runs(r) {
				continue
			}
			e := q.exercised(b, r)
			all = append(all, r)
			if e {
				ex = append(ex, r)
			}
			it.Runs = append(it.Runs, RunRef{Scenario: r.Scenario, Seed: r.Seed, Dir: r.Dir, Exercised: e, Drill: !r.UnderTest})
		}
		it.Answer, it.Evidence = q.judge(b, all, ex)
		if len(ex) == 0 && (it.Answer == Pass || (it.Answer == Fail && !q.failsUnexercised)) {
			// Never an answer from runs that did not challenge the
			// property.
			it.Answer = NotTested
		}
		// The item's reason when no run put its fault on the system; a
		// judge that answers NOT TESTED from runs that did says why itself
		// (the token item: killed, but no stale write reached the store).
		if it.Answer == NotTested && len(ex) == 0 {
			why := q.notTested
			if len(all) == 0 {
				why = "none of its runs ran"
			}
			it.Evidence = why + "; " + it.Evidence
		}
		items = append(items, it)
	}
	return items
}

// WriteChecklist prints the checklist: per item its answer and question,
// the property it judges, the fault that would break it, the evidence and
// the runs behind it (their directories; * marks those that put the fault
// on the system).
func WriteChecklist(w io.Writer, target string, items []Item) {
	fmt.Fprintf(w, "Lock-safety checklist for %s\n", target)
	count := map[Answer]int{}
	for _, it := range items {
		count[it.Answer]++
		answer := string(it.Answer)
		if it.Why != "" {
			answer += " (" + it.Why + ")"
		}
		fmt.Fprintf(w, "  %-10s  %s\n", answer, it.Question)
		fmt.Fprintf(w, "  %-10s  judges: %s\n", "", it.Property)
		fmt.Fprintf(w, "  %-10s  fault:  %s\n", "", it.Fault)
		fmt.Fprintf(w, "  %-10s  shown:  %s\n", "", it.Evidence)
		for _, r := range it.Runs {
			mark, note := " ", ""
			if r.Exercised {
				mark = "*"
			}
			if r.Drill {
				note = " (drill)"
			}
			fmt.Fprintf(w, "  %-10s  %s run:  %s%s %s\n", "", mark, r.Scenario, note, r.Dir)
		}
	}
	na := ""
	if n := count[NotApplicable]; n > 0 {
		na = fmt.Sprintf(", %d do not apply", n)
	}
	fmt.Fprintf(w, "%d of %d items pass, %d fail, %d not tested%s (* marks the runs that put an item's fault on the system).\n",
		count[Pass], len(items), count[Fail], count[NotTested], na)
}

// WriteChecklistJUnit writes the checklists of cols as JUnit XML: a suite
// per backend and client, a test case per item (a failure for FAIL, a
// skip for NOT TESTED with why), each listing the runs behind it.
func WriteChecklistJUnit(path string, cols []Column) error {
	var doc junitSuites
	for _, c := range cols {
		suite := junitSuite{Name: "splitbrain.validate." + strings.ReplaceAll(c.Title(), " / ", ".")}
		for _, it := range c.Items {
			jc := junitCase{Name: it.Question, Classname: "splitbrain.validate." + c.Target}
			var out []string
			out = append(out, "judges: "+it.Property, "fault: "+it.Fault, "shown: "+it.Evidence)
			for _, r := range it.Runs {
				out = append(out, fmt.Sprintf("run: %s exercised=%v results=%s", r.Scenario, r.Exercised, r.Dir))
			}
			jc.SystemOut = strings.Join(out, "\n")
			switch it.Answer {
			case Fail:
				jc.Failure = &junitProblem{Message: it.Evidence, Type: "checklist", Text: jc.SystemOut}
				suite.Failures++
			case NotTested:
				jc.Skipped = &junitSkip{Message: "NOT TESTED: " + it.Evidence}
				suite.Skipped++
			case NotApplicable:
				jc.Skipped = &junitSkip{Message: "N/A (" + it.Why + "): " + it.Evidence}
				suite.Skipped++
			}
			suite.Cases = append(suite.Cases, jc)
			suite.Tests++
		}
		doc.Suites = append(doc.Suites, suite)
	}
	b, err := xml.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("encode junit: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write junit: %w", err)
	}
	return os.WriteFile(path, append([]byte(xml.Header), append(b, '\n')...), 0o644)
}

// Column is one backend and client of a comparison: its checklist and the
// runs behind it.
type Column struct {
	Target, Client   string
	Library, Version string
	Items            []Item
	Rows             []Row
	// Name is the candidate's name (validate --candidates) and Candidate
	// the candidate; Name empty: the column is named by its target and
	// client.
	Name      string
	Candidate Candidate
}

// ColumnOf is candidate c's column of the comparison: its checklist answered
// from m, the matrix of its runs, its client when it is not the backend's
// own, and the library its runs used.
func ColumnOf(c Candidate, m *Matrix) (Column, error) {
	b, err := targets.Lookup(c.Target)
	if err != nil {
		return Column{}, err
	}
	col := Column{Target: b.Name, Items: Checklist(b, m), Rows: m.Rows, Name: c.Label(), Candidate: c}
	if c.Client != b.Recipe {
		col.Client = c.Client
	}
	for _, r := range m.Rows {
		if r.Library != "" {
			col.Library, col.Version = r.Library, r.Version
		}
	}
	return col, nil
}

// Fails reports whether an item of the column's checklist fails.
func (c Column) Fails() bool {
	return slices.ContainsFunc(c.Items, func(it Item) bool { return it.Answer == Fail })
}

// Title names the column: its candidate's name, else its target and
// client ("redis / redis-py 4.3.4").
func (c Column) Title() string {
	if c.Name != "" {
		return c.Name
	}
	if c.Client == "" {
		return c.Target
	}
	t := c.Target + " / " + c.Client
	if c.Version != "" {
		t += " " + c.Version
	}
	return t
}
