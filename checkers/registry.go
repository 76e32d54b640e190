package checkers

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/splitbrain/splitbrain/internal/registry"
)

// Kind declares a checker, as a backend or a fault declares itself: what
// the harness runs, the section it writes in results.json, and the words
// the report, `splitbrain check` and `splitbrain run` say of it. A checker
// is its file and one [Register] from that file's init; nothing else names
// it.
type Kind struct {
	// Name is the key of its section in results.json (the Checker's
	// Name).
	Name string
	// Doc says in a line what it checks.
	Doc string
	// Order places it among the checkers, lowest first: the order of
	// their sections, their reasons within an aspect and their rows in
	// report.html.
	Order int
	// New makes the checker for a run.
	New func(Run) Checker
	// Details makes an empty value of its details' type, so that a
	// results.json read back has them typed again (a pointer, as Check
	// puts in Result.Details); nil leaves them generic JSON.
	Details func() any
	// Words are how reports speak of its section.
	Words Words
}

// Words say a checker's findings in plain words. Each is given the
// checker's own section and the report's way of writing times and counts;
// any may be nil.
type Words struct {
	// Row says in one line what the section found: its row in
	// report.html's table of checkers. Nil: its reason, or nothing.
	Row func(r Result, f Format) string
	// Line, for a checker that judges, says its verdict in a sentence:
	// the verdict lines of report.html, `check` and `run` join the
	// sentences of an aspect's checkers. Nil: its reason when not valid,
	// nothing when valid.
	Line func(r Result, f Format) string
	// Headline, for a checker that judges, says a verdict other than
	// valid in a few words for the run's headline ("3 lost updates").
	// Nil: its reason.
	Headline func(r Result, f Format) string
}

// Format writes the facts a checker's words quote as the report writes
// them everywhere else (package report implements it).
type Format interface {
	// At is a time of the history, counted as the report counts it
	// ("12.30 s").
	At(t int64) string
	// Dur is a duration ("1.5 s", "105 ms").
	Dur(d time.Duration) string
	// Plural is "1 grant" or "3 grants".
	Plural(n int, word string) string
	// List joins words as "a", "a and b", "a, b and c".
	List(words []string) string
}

// Run is what a run tells its checkers besides its history.
type Run struct {
	// TTL is the lease time to live the clients asked for; zero when
	// unknown (a history checked without its results.json).
	TTL time.Duration
	// Renews says the client renews its lease in the background, and
	// Session that its lock lives with its session (the recipe's
	// declarations, in results.json's client).
	Renews, Session bool
	// ClockUncertainty is the largest uncertainty of the mapping of a
	// client's clock to the run's (zero when exact or unknown).
	ClockUncertainty time.Duration
	// Linearizable configures the linearizability check.
	Linearizable LinearizableOptions
}

var kinds registry.Of[Kind]

// Register declares a checker; it panics on a declaration without a name
// or a constructor, or on a name taken.
func Register(k Kind) {
	switch {
	case k.Name == "":
		panic("checkers: Register without a name")
	case k.New == nil:
		panic(fmt.Sprintf("checkers: Register %s without New", k.Name))
	}
	if !kinds.Add(k.Name, k) {
		panic(fmt.Sprintf("checkers: Register %s twice", k.Name))
	}
}

// Kinds returns the registered checkers in their order (then by name).
func Kinds() []Kind {
	out := kinds.All()
	slices.SortStableFunc(out, func(a, b Kind) int { return cmp.Compare(a.Order, b.Order) })
	return out
}

// Lookup returns the checker registered as name.
func Lookup(name string) (Kind, bool) { return kinds.Get(name) }

// ForRun returns every registered checker, made for run, in their order.
func ForRun(run Run) []Checker {
	ks := Kinds()
	out := make([]Checker, len(ks))
	for i, k := range ks {
		out[i] = k.New(run)
	}
	return out
}
