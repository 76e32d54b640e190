package external_test

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/splitbrain/splitbrain/catalog"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/external"
)

// serveRecipe is the test binary as the adapter of a shipped Go recipe.
func serveRecipe(kind string) int {
	r, err := targets.LookupRecipe(kind)
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := external.Serve(context.Background(), r, os.Stdin, os.Stdout, log); err != nil {
		log.Error("serve", "err", err)
		return 1
	}
	return 0
}

// conform runs the conformance check on recipe kind served over the
// protocol, against backend's in-process stand-in.
func conform(t *testing.T, kind, backend string, options map[string]string) *external.Report {
	t.Helper()
	return conformWith(t, kind, backend, nil, options)
}

// conformWith runs the conformance check on recipe kind served over the
// protocol (this test binary as its adapter, external.Serve), against
// backend's service at endpoints (leases expire by waiting their TTL out),
// or its in-process stand-in when endpoints is empty, with the recipe
// options in hello.
func conformWith(t *testing.T, kind, backend string, endpoints []string, options map[string]string) *external.Report {
	t.Helper()
	b, err := targets.Lookup(backend)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	svc, stop, err := external.ServiceFor(ctx, b, endpoints)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	command := "SERVE_RECIPE=" + kind + " " + runtime.ShellLine([]string{os.Args[0]})
	rep := external.Check(ctx, svc, external.CheckOptions{Command: command, TTL: 2 * time.Second, Options: options})
	var w strings.Builder
	rep.Write(&w)
	t.Log("\n" + w.String())
	return rep
}

// Every shipped recipe written in Go passes the protocol's conformance
// steps, served over the protocol, against each backend it serves that
// has an in-process stand-in: the built-in recipes meet the contract a
// user's adapter is held to.
func TestShippedRecipesConform(t *testing.T) {
	n := 0
	for _, r := range targets.Recipes() {
		if r.New == nil {
			continue
		}
		for _, name := range r.Backends {
			b, err := targets.Lookup(name)
			if err != nil || b.Local == nil {
				continue
			}
			n++
			t.Run(r.Kind+"/"+name, func(t *testing.T) {
				t.Parallel()
				rep := conform(t, r.Kind, name, nil)
				for _, f := range rep.Findings {
					if !f.Pass {
						t.Errorf("%s: %s", f.Step, f.Says)
					}
				}
			})
		}
	}
	if n < 4 {
		t.Fatalf("only %d recipe/backend pairs have an in-process service to check against", n)
	}
}

// The same steps catch a recipe configured to break its promise: Redis
// with release=unchecked deletes a lock that another client took after
// the first one's expired, where the protocol wants not_owner.
func TestServedRecipeBreakingReleaseFails(t *testing.T) {
	rep := conform(t, "redis", "redis", map[string]string{"release": "unchecked"})
	var steps []string
	for _, f := range rep.Findings {
		if !f.Pass {
			steps = append(steps, f.Step)
		}
	}
	if !slices.Contains(steps, "not-owner") {
		t.Fatalf("failed steps %v: want not-owner among them", steps)
	}
}
