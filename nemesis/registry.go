package nemesis

import (
	"fmt"
	"slices"
	"strings"

	"github.com/splitbrain/splitbrain/internal/registry"
)

// Kind is a fault as the rest of splitbrain knows it: its name, a line of
// documentation, its settings (a [Spec], which builds the [Nemesis]) and
// how the report shows it. A fault registers its Kind with [Register] from
// an init function of its own file or package; the command line, the
// harness and the report find it there and name no fault themselves.
type Kind struct {
	// Name is the fault's name in --nemesis, in the history and in
	// results.json ("pause").
	Name string
	// Doc says in one line what the fault does (the help of --nemesis).
	Doc string
	// NewSpec returns the fault's settings at their defaults.
	NewSpec func() Spec
	// Report is how reports show the fault.
	Report Report
}

// Report is how reports show one kind of fault.
type Report struct {
	// Color is the fault's colour in the plots' bands (a CSS colour).
	Color string
	// Phrase words the fault in an anomaly's explanation: who is "it" or
	// the fault's targets ("n1 and n2"), be is "was" or "were"; e.g.
	// who+" "+be+" cut off by a network partition".
	Phrase func(who, be string) string
	// QuoteDetail adds the fault's detail (its history event's) to the
	// phrase.
	QuoteDetail bool
	// Freezes says the fault stops its targets until it heals: a client's
	// own fault is shaded on its row of the timeline, and its heal dates
	// the moment the client ran again.
	Freezes bool
}

var kinds registry.Of[Kind]

// NoFaults is the --nemesis list of a run without faults.
const NoFaults = "none"

// Register makes a fault known. It panics on an empty or taken name (or
// "none", which --nemesis reserves), or a Kind without NewSpec: a
// programming error, found when the program starts.
func Register(k Kind) {
	switch {
	case k.Name == "" || k.Name == NoFaults || strings.ContainsAny(k.Name, ", "):
		panic(fmt.Sprintf("nemesis: Register of a fault named %q", k.Name))
	case k.NewSpec == nil:
		panic("nemesis: Register of " + k.Name + " without NewSpec")
	}
	if !kinds.Add(k.Name, k) {
		panic("nemesis: Register of " + k.Name + " twice")
	}
}

// Lookup returns the fault called name.
func Lookup(name string) (Kind, bool) { return kinds.Get(name) }

// Kinds returns every registered fault, by name.
func Kinds() []Kind { return kinds.All() }

// Names returns the registered faults' names, sorted.
func Names() []string { return kinds.Names() }

// Select parses a --nemesis list ("pause,clock", or "none" alone) into
// the names of registered faults, in order. An empty list, an empty item,
// "none" beside a fault and a fault named twice are refused: each is a
// typo more often than a wish.
func Select(list string) ([]string, error) {
	known := "none, or a comma-separated list of " + strings.Join(Names(), ", ")
	if strings.TrimSpace(list) == NoFaults {
		return nil, nil
	}
	if strings.TrimSpace(list) == "" {
		return nil, fmt.Errorf("empty (want %s)", known)
	}
	var out []string
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
			return nil, fmt.Errorf("%q has an empty item (want %s)", list, known)
		case name == "none":
			return nil, fmt.Errorf("%q: none stands alone, it cannot go with a fault (want %s)", list, known)
		case slices.Contains(out, name):
			return nil, fmt.Errorf("%q names %s twice (want %s)", list, name, known)
		}
		if _, ok := Lookup(name); !ok {
			return nil, fmt.Errorf("unknown nemesis %q (known: none, %s)", name, strings.Join(Names(), ", "))
		}
		out = append(out, name)
	}
	return out, nil
}
