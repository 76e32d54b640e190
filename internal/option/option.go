// Package option declares the settings a backend, a lock recipe or a store
// kind takes on the command line (--recipe-opt, --store-opt NAME=VALUE):
// each one is declared once, beside the code that uses it, with its type,
// the values it accepts, its default and a line of doc ([Enum], [Duration],
// [Int], [Text]). The harness checks what a run gives against the
// declarations once, at the edge ([Parse]), into a [Set]; the code that
// uses an option reads its typed value from the set through the same
// declaration ([Of.Get]), so nothing switches on its strings again.
//
// A Set stays strings underneath because it crosses processes: it is sent
// to client agents as JSON, and adapters in other languages get it as the
// client protocol's options.
package option

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Decl is an option's declaration, whatever its type.
type Decl struct {
	// Name is how it is given (NAME=VALUE).
	Name string
	// Values are the values it accepts, the default first; empty means
	// any value Check accepts (a duration, say).
	Values []string
	// Default is the value it has when not given, for help texts ("" when
	// Values say it, or when its default is the service's own).
	Default string
	// Doc says in one line what it does.
	Doc string
	// Check, when set, refuses a value Values do not list.
	Check func(string) error
}

// Decl returns d itself, so that a Decl and a typed declaration mix in
// [Decls].
func (d Decl) Decl() Decl { return d }

// DefaultValue is the value it has when not given: Values' first, else
// Default ("" when the service's own).
func (d Decl) DefaultValue() string {
	if len(d.Values) > 0 {
		return d.Values[0]
	}
	return d.Default
}

// Usage is how help texts show it: NAME=A|B for a choice, else NAME
// (with its default, when it has one: NAME (default 2s)).
func (d Decl) Usage() string {
	switch {
	case len(d.Values) > 0:
		return d.Name + "=" + strings.Join(d.Values, "|")
	case d.Default != "":
		return d.Name + " (default " + d.Default + ")"
	}
	return d.Name
}

// check returns an error saying why v is not a value of d.
func (d Decl) check(v string) error {
	if len(d.Values) > 0 && !slices.Contains(d.Values, v) {
		return fmt.Errorf("want one of %s", strings.Join(d.Values, ", "))
	}
	if d.Check != nil {
		return d.Check(v)
	}
	return nil
}

// Declarer is a declaration, typed ([Of]) or not ([Decl]).
type Declarer interface{ Decl() Decl }

// Decls lists declarations, as a backend, recipe or store kind declares
// the options it takes.
func Decls(ds ...Declarer) []Decl {
	out := make([]Decl, len(ds))
	for i, d := range ds {
		out[i] = d.Decl()
	}
	return out
}

// Of is a typed declaration: the value a [Set] holds for it reads as a T.
type Of[T any] struct {
	decl  Decl
	def   T
	parse func(string) (T, error)
}

// Decl returns its untyped declaration.
func (o Of[T]) Decl() Decl { return o.decl }

// Name is the option's name.
func (o Of[T]) Name() string { return o.decl.Name }

// Lookup returns the option's value in s and whether s gives it (the
// default when not).
func (o Of[T]) Lookup(s Set) (T, bool) {
	v, ok := s[o.decl.Name]
	if !ok {
		return o.def, false
	}
	t, err := o.parse(v)
	if err != nil {
		// A Set made by Parse, or received from the harness that made it,
		// holds only values its declarations accept.
		panic(fmt.Sprintf("option %s=%q was not checked against its declaration: %v", o.decl.Name, v, err))
	}
	return t, true
}

// Get returns the option's value in s, or its default.
func (o Of[T]) Get(s Set) T {
	t, _ := o.Lookup(s)
	return t
}

// Described returns o with def as its default in help texts (a default
// that is not a value: "the lease TTL").
func (o Of[T]) Described(def string) Of[T] {
	o.decl.Default = def
	return o
}

// Enum declares an option that takes one of values, the first being the
// default.
func Enum(name, doc string, values ...string) Of[string] {
	if len(values) == 0 {
		panic("option: enum " + name + " without values")
	}
	d := Decl{Name: name, Values: values, Doc: doc}
	return Of[string]{decl: d, def: values[0], parse: func(v string) (string, error) {
		if !slices.Contains(values, v) {
			return "", d.check(v)
		}
		return v, nil
	}}
}

// Duration declares an option whose value is a Go duration ("300ms")
// from min to max (no bound above when max is 0), def when not given.
func Duration(name, doc string, def, min, max time.Duration) Of[time.Duration] {
	parse := func(v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			return 0, fmt.Errorf("want a duration such as %v", def)
		case max > 0 && (d < min || d > max):
			return 0, fmt.Errorf("want a duration from %v to %v", min, max)
		case d < min:
			return 0, fmt.Errorf("want a duration of at least %v", min)
		}
		return d, nil
	}
	return Of[time.Duration]{decl: Decl{Name: name, Doc: doc, Default: def.String(), Check: func(v string) error {
		_, err := parse(v)
		return err
	}}, def: def, parse: parse}
}

// Int declares an option whose value is a whole number from min to max,
// def when not given.
func Int(name, doc string, def, min, max int) Of[int] {
	parse := func(v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < min || n > max {
			if max == math.MaxInt {
				return 0, fmt.Errorf("want a whole number of at least %d", min)
			}
			return 0, fmt.Errorf("want a whole number from %d to %d", min, max)
		}
		return n, nil
	}
	return Of[int]{decl: Decl{Name: name, Doc: doc, Default: strconv.Itoa(def), Check: func(v string) error {
		_, err := parse(v)
		return err
	}}, def: def, parse: parse}
}

// Text declares an option whose value is free text that check (when not
// nil) accepts; def when not given.
func Text(name, doc, def string, check func(string) error) Of[string] {
	parse := func(v string) (string, error) {
		if check != nil {
			if err := check(v); err != nil {
				return "", err
			}
		}
		return v, nil
	}
	return Of[string]{decl: Decl{Name: name, Doc: doc, Default: def, Check: check}, def: def, parse: parse}
}

// Set holds options' values, by name: made by [Parse], so that every value
// is one its declaration accepts. It is a map so that it travels as a JSON
// object; code reads it through typed declarations ([Of.Get]).
type Set map[string]string

// Parse checks raw, the NAME=VALUE settings a run gives, against known and
// returns them as a Set; the error names the first setting (in name order)
// that known does not take — an unknown name (a misspelt anti-pattern switch
// would otherwise silently test the safe recipe) or a value it refuses — and
// what is accepted. flag is how the user gives options ("option",
// "--store-opt"), owner what takes them ("target redis").
func Parse(known []Decl, raw map[string]string, flag, owner string) (Set, error) {
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		i := slices.IndexFunc(known, func(o Decl) bool { return o.Name == k })
		if i < 0 {
			if len(known) == 0 {
				return nil, fmt.Errorf("%s %s: %s takes none", flag, k, owner)
			}
			accepted := make([]string, len(known))
			for j, o := range known {
				accepted[j] = o.Name
			}
			return nil, fmt.Errorf("unknown %s %s for %s (known: %s)", flag, k, owner, strings.Join(accepted, ", "))
		}
		if err := known[i].check(raw[k]); err != nil {
			return nil, fmt.Errorf("%s %s=%q for %s: %w", flag, k, raw[k], owner, err)
		}
	}
	if len(raw) == 0 {
		return nil, nil
	}
	return Set(maps.Clone(raw)), nil
}

// Only returns the part of s that decls declare (nil when none).
func (s Set) Only(decls []Decl) Set {
	var out Set
	for _, d := range decls {
		if v, ok := s[d.Name]; ok {
			if out == nil {
				out = Set{}
			}
			out[d.Name] = v
		}
	}
	return out
}

// Without returns the part of s that decls do not declare (nil when none).
func (s Set) Without(decls []Decl) Set {
	var out Set
	for k, v := range s {
		if !slices.ContainsFunc(decls, func(d Decl) bool { return d.Name == k }) {
			if out == nil {
				out = Set{}
			}
			out[k] = v
		}
	}
	return out
}
