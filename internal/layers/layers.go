// Package layers states splitbrain's layering rule — which package may
// import which — and checks a module's import graph against it. The test
// of this package runs it on the module itself, so that `make test` names a
// forbidden import the moment one appears.
//
// The rule: every package of the module sits in one layer of [Table]. A
// package may import a package of a lower layer. Inside its own layer it may
// import only
//   - an ancestor that is a [Groups] package, the interface or registry its
//     plug-ins implement (the image/png → image shape: targets/redis →
//     targets, nemesis/clock → nemesis, runtime/docker → runtime), and
//   - a package of its own component that is not its ancestor: a backend's
//     subpackages among themselves (targets/lockd → targets/lockd/server,
//     targets/lockd/client → targets/lockd/wire), a package and its own
//     children (workloads → workloads/agent).
//
// A component is the subtree of one child of the deepest [Groups] entry
// above a package (targets/lockd/..., nemesis/clock/..., internal/clockskew/...),
// or, for a package below no group, the subtree of its top folder
// (workloads/..., checkers/...). A group package is a component of its own,
// so a registry never imports its plug-ins.
//
// Plug-ins — the packages of a [Layer] marked Plugins: backends and their
// clients, store kinds, faults — are imported only by [Catalog] and inside
// their own component; the harness, scenarios, the CLI and bench reach them
// through their registries by name.
//
// [TestOnly] packages serve tests only: no other package may import them,
// and their own imports are not judged.
package layers

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Module is the module path the rule is about; imports outside it are not
// judged.
const Module = "github.com/splitbrain/splitbrain"

// Layer is one layer of [Table].
type Layer struct {
	// Name says what the layer is for.
	Name string
	// Packages are package paths relative to [Module]; "x/..." matches
	// every package below x (not x itself). A package is in the first
	// layer that names it.
	Packages []string
	// Plugins says that the layer's packages are plug-ins (backends,
	// clients, store kinds, faults): they register themselves, and only
	// [Catalog] imports them from outside their own component.
	Plugins bool
}

// Catalog is the one package that imports plug-ins: one blank import per
// backend, client, store kind and fault the binary ships.
const Catalog = "catalog"

// Table is the layering rule, lowest layer first (docs/architecture.md;
// issue 14). A package the table does not name fails the check: add it to
// the layer it belongs to here.
var Table = []Layer{
	{"records and the runtime's interface", []string{"history", "runtime"}, false},
	{"runtimes and images", []string{"runtime/docker", "runtime/memrt", "runtime/ssh", "runtime/images"}, false},
	{"mechanisms", []string{"internal/..."}, false},
	{"components' interfaces and registries", []string{"targets", "targets/store", "targets/external", "nemesis"}, false},
	{"components", []string{"targets/...", "nemesis/..."}, true},
	{"catalogue", []string{"catalog"}, false},
	{"drive & judge", []string{"workloads", "workloads/...", "checkers", "checkers/..."}, false},
	{"wiring", []string{"harness"}, false},
	{"scenarios", []string{"scenario"}, false},
	{"presentation", []string{"report"}, false},
	{"top", []string{"cmd/...", "bench"}, false},
}

// Groups are the folders whose children are separate components; those
// that are packages are the interface or registry of their layer, which
// the packages below them may import.
var Groups = []string{"runtime", "targets", "targets/store", "nemesis", "internal", "cmd"}

// TestOnly are packages made for tests: only _test.go files may import
// them, and the rule does not judge their own imports. harness/harnesstest
// wires the in-memory runtime, lock service and store into the harness for
// the tests of the harness and of what sits above it; runtime/runtimetest
// is the contract every runtime's tests run.
var TestOnly = []string{"internal/testenv", "harness/harnesstest", "runtime/runtimetest"}

// Edge is one import: From imports To (paths relative to [Module]).
type Edge struct{ From, To string }

// String says "from imports to".
func (e Edge) String() string { return e.From + " imports " + e.To }

// Violation is a package or an import the rule forbids, with the reason in
// words that say where to look.
type Violation struct {
	// Edge is the forbidden import; its To is empty for a package that is
	// in no layer.
	Edge   Edge
	Reason string
}

// String is the violation as the test reports it: the import, then why.
func (v Violation) String() string {
	if v.Edge.To == "" {
		return v.Reason
	}
	return v.Edge.String() + ": " + v.Reason
}

// LayerOf returns the index in [Table] of pkg's layer, or -1 when the table
// does not name it.
func LayerOf(pkg string) int {
	for i, l := range Table {
		for _, p := range l.Packages {
			if p == pkg || strings.HasSuffix(p, "/...") && strings.HasPrefix(pkg, strings.TrimSuffix(p, "...")) {
				return i
			}
		}
	}
	return -1
}

func layerName(i int) string { return fmt.Sprintf("layer %d, %s", i, Table[i].Name) }

// under reports whether pkg is strictly below dir.
func under(pkg, dir string) bool { return strings.HasPrefix(pkg, dir+"/") }

// component returns the component pkg belongs to (see the package doc).
func component(pkg string) string {
	if slices.Contains(Groups, pkg) {
		return pkg
	}
	group := ""
	for _, g := range Groups {
		if under(pkg, g) && len(g) > len(group) {
			group = g
		}
	}
	rest := pkg
	if group != "" {
		rest = strings.TrimPrefix(pkg, group+"/")
	}
	top, _, _ := strings.Cut(rest, "/")
	if group == "" {
		return top
	}
	return group + "/" + top
}

// Check judges a module's import graph: imports maps each package of the
// module (relative path) to the module packages it imports, test files
// excluded. It returns every violation, sorted.
func Check(imports map[string][]string) []Violation {
	var out []Violation
	for from, tos := range imports {
		if slices.Contains(TestOnly, from) {
			continue
		}
		lf := LayerOf(from)
		if lf < 0 {
			out = append(out, Violation{Edge: Edge{From: from}, Reason: fmt.Sprintf(
				"package %s is in no layer: add it to layers.Table in internal/layers/layers.go (or to TestOnly), in the lowest layer above everything it imports", from)})
			continue
		}
		for _, to := range tos {
			if reason := judge(from, lf, to); reason != "" {
				out = append(out, Violation{Edge: Edge{From: from, To: to}, Reason: reason})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// judge returns why from (in layer lf) may not import to, or "".
func judge(from string, lf int, to string) string {
	if slices.Contains(TestOnly, to) {
		return fmt.Sprintf("%s is test-only; only _test.go files may import it", to)
	}
	lt := LayerOf(to)
	switch {
	case lt < 0:
		return "" // reported as a package in no layer
	case lt < lf && Table[lt].Plugins && from != Catalog && component(from) != component(to):
		return fmt.Sprintf("%s imports the plug-in %s: only %s imports plug-ins (a plug-in registers itself; reach it through its registry by name, or declare what is needed in its registration)",
			from, to, Catalog)
	case lt < lf:
		return ""
	case lt > lf:
		return fmt.Sprintf("%s (%s) may not import %s (%s), a higher layer: move what it needs down, or split it off",
			from, layerName(lf), to, layerName(lt))
	case slices.Contains(Groups, to) && under(from, to):
		return "" // a plug-in imports its interface or registry
	case under(from, to):
		return fmt.Sprintf("%s may not import its ancestor %s in its own layer (%s): only an interface or registry package (layers.Groups) may be imported from below",
			from, to, layerName(lf))
	case component(from) == component(to):
		return ""
	default:
		return fmt.Sprintf("%s and %s are both in %s, in different components (%s, %s): a package may import inside its layer only its own component and its interface or registry ancestor",
			from, to, layerName(lf), component(from), component(to))
	}
}
