package catalog

import (
	"slices"
	"strings"
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

// TestDurabilityDeclarations: a backend with a durability switch says both
// its durable and its unsynced configuration, each different from the
// other; a backend durable by default is durable in its defaults; and a
// backend without a switch refuses every other backend's (one line, before
// Docker: the run's options are checked when it is planned).
func TestDurabilityDeclarations(t *testing.T) {
	switches := map[string]bool{}
	for _, b := range targets.Backends() {
		for k := range b.UnsyncedWith {
			switches[k] = true
		}
	}
	for _, b := range targets.Backends() {
		switch {
		case len(b.UnsyncedWith) > 0 && len(b.DurableWith) == 0:
			t.Errorf("%s: an unsynced configuration but no durable one", b.Name)
		case len(b.UnsyncedWith) > 0 && b.Runs(b.UnsyncedWith, b.DurableWith):
			t.Errorf("%s: its unsynced configuration %v is its durable one %v", b.Name, b.UnsyncedWith, b.DurableWith)
		case b.Durable && len(b.DurableWith) > 0 && !b.Runs(nil, b.DurableWith):
			t.Errorf("%s: durable by default, but its defaults are not %v", b.Name, b.DurableWith)
		}
		for k := range switches {
			if _, mine := b.UnsyncedWith[k]; mine {
				continue
			}
			if err := b.CheckOptions(map[string]string{k: "off"}); err == nil || strings.Contains(err.Error(), "\n") {
				t.Errorf("%s accepts %s=off, or refuses it on more than one line: %v", b.Name, k, err)
			}
		}
	}
	for _, name := range []string{"redis", "postgres", "etcd", "zookeeper", "lockd", "mariadb"} {
		if b, err := targets.Lookup(name); err != nil || len(b.UnsyncedWith) == 0 {
			t.Errorf("%s declares no durability switch (%v)", name, err)
		}
	}
}
