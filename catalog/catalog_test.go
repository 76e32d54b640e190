package catalog

import (
	"slices"
	"testing"

	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
)

// TestDeclarationsHoldTogether: every shipped backend's recipe is
// registered and serves it, every recipe serves registered backends, every
// role has an image plan, and the default target is shipped.
func TestDeclarationsHoldTogether(t *testing.T) {
	if len(targets.Names()) == 0 {
		t.Fatal("no backend registered")
	}
	if _, err := targets.Lookup(targets.Default()); err != nil || targets.Default() != DefaultTarget {
		t.Fatalf("default target %q: %v", targets.Default(), err)
	}
	for _, b := range targets.Backends() {
		r, err := b.RunRecipe()
		if err != nil {
			t.Errorf("%s: %v", b.Name, err)
		} else if !slices.Contains(r.Backends, b.Name) {
			t.Errorf("%s runs recipe %s, which does not say it serves it (%v)", b.Name, r.Kind, r.Backends)
		}
		if _, err := b.AllOptions(); err != nil {
			t.Errorf("%s: %v", b.Name, err)
		}
		for _, role := range b.RoleNames() {
			if _, err := images.PlanRole(role); err != nil {
				t.Errorf("%s: role %s: %v", b.Name, role, err)
			}
		}
	}
	for _, r := range targets.Recipes() {
		for _, name := range r.Backends {
			if _, err := targets.Lookup(name); err != nil {
				t.Errorf("recipe %s serves %s: %v", r.Kind, name, err)
			}
		}
	}
}
