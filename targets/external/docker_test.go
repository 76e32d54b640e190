//go:build linux

package external_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/splitbrain/splitbrain/internal/testenv"
	"github.com/splitbrain/splitbrain/targets"
)

// TestDockerShippedRecipesConform: every shipped recipe written in Go
// passes the protocol's conformance steps (client-check's), served over
// the protocol, against the real service of each backend it serves: each
// backend brought up once on Docker and shared by its recipes, which run
// one after the other (they take the same key). Two backends at a time
// (go test's -parallel, GOMAXPROCS by default).
func TestDockerShippedRecipesConform(t *testing.T) {
	served := map[string][]string{} // backend → the Go recipes serving it
	for _, r := range targets.Recipes() {
		if r.New == nil {
			continue
		}
		for _, b := range r.Backends {
			served[b] = append(served[b], r.Kind)
		}
	}
	if len(served) < 8 {
		t.Fatalf("only %d backends are served by a Go recipe: %v", len(served), served)
	}
	for _, name := range slices.Sorted(maps.Keys(served)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := targets.Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			roles := make([]string, len(b.Roles))
			for i, r := range b.Roles {
				roles[i] = r.Name
			}
			rt, imgs := testenv.Runtime(t, "cf", roles...)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			start := time.Now()
			cl, err := b.Target.Start(ctx, rt, targets.Options{Images: imgs, TTL: 2 * time.Second})
			if err != nil {
				t.Fatalf("start %s: %v", name, err)
			}
			eps := cl.Endpoints()
			testenv.Reach(t, eps[0])
			t.Logf("%s up in %v at %v", name, time.Since(start).Round(time.Millisecond), eps)
			for _, kind := range served[name] {
				t.Run(kind, func(t *testing.T) {
					began := time.Now()
					rep := conformWith(t, kind, name, eps, nil)
					t.Logf("checked in %v", time.Since(began).Round(time.Millisecond))
					for _, f := range rep.Findings {
						if !f.Pass {
							t.Errorf("%s: %s", f.Step, f.Says)
						}
					}
				})
			}
		})
	}
}
