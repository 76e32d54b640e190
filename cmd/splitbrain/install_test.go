package main

import (
	"os"
	"regexp"
	"testing"
)

// TestGoModInstallable: `go install …/cmd/splitbrain@VERSION` (the README's
// install) refuses a module whose go.mod has replace or exclude
// directives, since they would make it build differently from how it
// builds as a dependency. A library whose requirements pull the build
// elsewhere goes in a module of its own (targets/etcd/client37), not behind
// a replace.
func TestGoModInstallable(t *testing.T) {
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, mod string
		bad       bool
	}{
		{"splitbrain's go.mod", string(gomod), false},
		{"a replace block", "module m\n\nreplace (\n\ta => a v1.0.0\n)\n", true},
		{"a replace line", "module m\nreplace a => ../a\n", true},
		{"an exclude", "module m\nexclude a v1.2.0\n", true},
		{"a comment naming replace", "module m\n// replace nothing\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := directive.FindAllString(tc.mod, -1)
			if bad := len(got) > 0; bad != tc.bad {
				t.Errorf("replace/exclude directives %q, want some: %v", got, tc.bad)
			}
		})
	}
}

// directive matches a go.mod replace or exclude directive, a line or a
// block.
var directive = regexp.MustCompile(`(?m)^\s*(replace|exclude)\b`)
