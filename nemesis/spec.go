package nemesis

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/splitbrain/splitbrain/runtime"
)

// Spec is one fault's settings, typed: a pointer to a struct whose fields
// carry json tags (results.json records them under options.faults.<name>).
// Values from the command line are parsed once, by the flags Flags
// registers; Validate checks them once per run; New builds the nemesis.
// Nothing falls back to a default when a value is wrong: the error says
// which flag to fix.
type Spec interface {
	// Flags registers the settings' command-line flags on fs, bound to the
	// spec's fields; their current values are the defaults shown.
	Flags(fs *pflag.FlagSet)
	// Validate checks the settings against the target they would fault.
	// The error names the flag to fix.
	Validate(t Target) error
	// New builds the nemesis for a run on t, after Validate.
	New(t Target) (Nemesis, error)
}

// Availability is a [Spec] of a fault that cannot fault every target:
// Available says why it cannot fault t (nil: it can). It is asked only of
// the faults a run names.
type Availability interface {
	Available(t Target) error
}

// Resolver is a [Spec] some of whose zero settings stand for values that
// follow the target (a clock offset of the lease's TTL, every partition
// topology that fits): Resolved returns a copy with those filled in as the
// nemesis that New builds for t uses them, leaving a setting zero when t
// does not say enough (a Target without Size). A run's report shows its
// fault settings through it. Resolved does not change the spec.
type Resolver interface {
	Resolved(t Target) Spec
}

// Target is what a fault's settings are checked against and its nemesis
// built for: the shape of the run's target and the run's lease.
type Target struct {
	// Name is the target's name ("etcd"), for messages.
	Name string
	// Size is the number of lock-service nodes; Leads says that one of
	// them leads and can be found.
	Size  int
	Leads bool
	// LeaseTTL is the lock's lease; some defaults follow it.
	LeaseTTL time.Duration
	// ShimClocks maps each role whose main processes run under the
	// LD_PRELOAD clock shim to the way to read such a process's own wall
	// clock (Redis: its TIME command); the processes of other roles are
	// skewed by vDSO injection.
	ShimClocks map[string]func(ctx context.Context, n runtime.Node) (time.Time, error)
}

// Specs are the settings of faults, by name: the typed form of a run's
// fault options. A missing name stands for the fault's defaults.
type Specs map[string]Spec

// DefaultSpecs returns every registered fault's settings at their
// defaults.
func DefaultSpecs() Specs {
	out := Specs{}
	for _, k := range Kinds() {
		out[k.Name] = k.NewSpec()
	}
	return out
}

// Get returns the settings of the fault called name: s's, or the fault's
// defaults when s has none (nil for an unknown fault).
func (s Specs) Get(name string) Spec {
	if sp, ok := s[name]; ok {
		return sp
	}
	if k, ok := Lookup(name); ok {
		return k.NewSpec()
	}
	return nil
}

// Flags registers the flags of every registered fault on fs, bound to s's
// settings (added with their defaults where s lacks them).
func (s Specs) Flags(fs *pflag.FlagSet) {
	for _, k := range Kinds() {
		if _, ok := s[k.Name]; !ok {
			s[k.Name] = k.NewSpec()
		}
		s[k.Name].Flags(fs)
	}
}

// Clone returns a deep copy of s (through each spec's JSON form), so that
// a preset can change its copy's settings without touching s's.
func (s Specs) Clone() Specs {
	if s == nil {
		return nil
	}
	out := make(Specs, len(s))
	for name, sp := range s {
		k, ok := Lookup(name)
		if !ok {
			out[name] = sp
			continue
		}
		b, err := json.Marshal(sp)
		c := k.NewSpec()
		if err == nil {
			err = json.Unmarshal(b, c)
		}
		if err != nil {
			panic(fmt.Sprintf("nemesis: clone settings of %s: %v", name, err))
		}
		out[name] = c
	}
	return out
}

// UnmarshalJSON reads settings written by json.Marshal (results.json's
// options.faults): each registered fault's into a spec at its defaults.
// Settings of faults this program does not know are skipped.
func (s *Specs) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := Specs{}
	for name, r := range raw {
		k, ok := Lookup(name)
		if !ok {
			continue
		}
		sp := k.NewSpec()
		if err := json.Unmarshal(r, sp); err != nil {
			return fmt.Errorf("settings of fault %s: %w", name, err)
		}
		out[name] = sp
	}
	*s = out
	return nil
}

// Set changes the settings of the fault called name as its command-line
// flags would: each key a flag the fault's spec registers (without "--"),
// each value parsed once by that flag, in the order of the keys. A preset
// that does not import the fault's package (a scenario) sets its settings
// this way. The error names the fault and the flag; s keeps what was set
// before it.
func (s Specs) Set(name string, flags map[string]string) error {
	sp := s.Get(name)
	if sp == nil {
		return fmt.Errorf("fault %q is not registered (known: %s)", name, strings.Join(Names(), ", "))
	}
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	sp.Flags(fs)
	keys := make([]string, 0, len(flags))
	for k := range flags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if fs.Lookup(k) == nil {
			return fmt.Errorf("fault %s has no setting --%s", name, k)
		}
		if err := fs.Set(k, flags[k]); err != nil {
			return fmt.Errorf("fault %s: --%s=%s: %w", name, k, flags[k], err)
		}
	}
	s[name] = sp
	return nil
}

// SpecOf returns the settings of type S in s (adding them at their
// defaults when s lacks them), for presets that change a fault's settings:
//
//	nemesis.SpecOf[*nemesis.PauseSpec](cfg.Faults).Targets = nemesis.Weights{"holder": 1}
//
// It panics when no registered fault has settings of type S, or s is nil.
func SpecOf[S Spec](s Specs) S {
	for _, sp := range s {
		if v, ok := sp.(S); ok {
			return v
		}
	}
	for _, k := range Kinds() {
		if v, ok := k.NewSpec().(S); ok {
			if s == nil {
				panic("nemesis: SpecOf in nil Specs (start from DefaultSpecs)")
			}
			s[k.Name] = v
			return v
		}
	}
	var zero S
	panic(fmt.Sprintf("nemesis: no registered fault has settings of type %v", reflect.TypeOf(zero)))
}

// List is a comma-separated list of names on the command line and in
// results.json ("bump,strobe"). As a flag, each use replaces the list.
type List []string

// String joins l with commas.
func (l List) String() string { return strings.Join(l, ",") }

// Set implements pflag.Value: it splits s at commas, dropping blanks.
func (l *List) Set(s string) error {
	var out List
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	*l = out
	return nil
}

// Type implements pflag.Value.
func (*List) Type() string { return "list" }

// MarshalText implements encoding.TextMarshaler: l's String form.
func (l List) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler (as Set).
func (l *List) UnmarshalText(b []byte) error { return l.Set(string(b)) }

// Set implements pflag.Value: w becomes [ParseWeights] of s (the names
// are checked by the fault's Validate).
func (w *Weights) Set(s string) error { return w.UnmarshalText([]byte(s)) }

// Type implements pflag.Value.
func (*Weights) Type() string { return "weights" }
