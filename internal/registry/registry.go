// Package registry keeps the named declarations that packages register
// from their init functions (backends, lock recipes, store kinds, faults),
// as database/sql keeps its drivers: each name once, found by name, listed
// in name order. What a declaration must hold is its own package's rule.
package registry

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// Of holds declarations of type T by name. Its zero value is empty and
// ready; it is safe for concurrent use.
type Of[T any] struct {
	mu sync.RWMutex
	m  map[string]T
}

// Add registers v as name. It reports false, and changes nothing, when the
// name is taken.
func (r *Of[T]) Add(name string, v T) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, taken := r.m[name]; taken {
		return false
	}
	if r.m == nil {
		r.m = map[string]T{}
	}
	r.m[name] = v
	return true
}

// Get returns the declaration registered as name.
func (r *Of[T]) Get(name string) (T, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	v, ok := r.m[name]
	return v, ok
}

// Lookup is [Of.Get] with an error for a name nobody registered, which
// names the known ones: `unknown <what> "name" (known: a, b)`.
func (r *Of[T]) Lookup(what, name string) (T, error) {
	v, ok := r.Get(name)
	if !ok {
		return v, fmt.Errorf("unknown %s %q (known: %s)", what, name, strings.Join(r.Names(), ", "))
	}
	return v, nil
}

// Names returns the registered names, sorted.
func (r *Of[T]) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.m))
}

// All returns the declarations in the order of their names.
func (r *Of[T]) All() []T {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]T, 0, len(r.m))
	for _, n := range slices.Sorted(maps.Keys(r.m)) {
		out = append(out, r.m[n])
	}
	return out
}
