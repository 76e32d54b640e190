package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/internal/registry"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
)

// Counter is the counter store as a client uses it: [Client], [Mem] and
// the clients of the other kinds of store. A Counter is safe for
// concurrent use.
type Counter interface {
	// Read returns key's entry; when fenced, token is checked and
	// registered first.
	Read(ctx context.Context, key string, fenced bool, token uint64) (Entry, error)
	// Write writes value, with its tag, to key; when fenced, token is
	// checked, and a refused write changes nothing.
	Write(ctx context.Context, key string, value, tag int64, fenced bool, token uint64) (Entry, error)
}

// Kind declares a kind of counter store, chosen with --store NAME.
// Register it with [Register] from its package's init function.
type Kind struct {
	// Name is its name on the command line.
	Name string
	// Title says in a few words what it is.
	Title string
	// Role is the image role its node runs from; Packages, when set, are
	// that role's Debian packages (the role is registered with them).
	Role     string
	Packages []string
	// Options are the --store-opt settings it accepts (option.Decls of
	// its typed declarations, which Deploy and Dial read them through).
	Options []option.Decl
	// Programs are programs of the splitbrain binary its node runs as its
	// main process.
	Programs []targets.Program
	// Deploy starts the store as node "store" from image and waits until
	// it serves, with the run's --store-opt settings (checked by
	// [Kind.ParseOptions]); it returns the node and the address clients
	// dial.
	Deploy func(ctx context.Context, rt runtime.Runtime, image string, opts option.Set) (runtime.Node, string, error)
	// Dial returns a client of the store at addr, with the run's settings;
	// each request is bounded by timeout.
	Dial func(addr string, timeout time.Duration, opts option.Set) (Counter, error)
	// Versions, when set, reports the store's software versions.
	Versions func(ctx context.Context, n runtime.Node) map[string]string
}

// Builtin is the name of splitbrain's own store (the default): [Store]
// served over HTTP by `splitbrain store`, in memory.
const Builtin = "builtin"

var kinds registry.Of[Kind]

// Register makes a kind of store known by its name. It panics when the
// declaration is incomplete or the name is taken (a programming error: it
// runs from init functions).
func Register(k Kind) {
	if k.Name == "" || strings.ContainsAny(k.Name, " ,=/") || k.Role == "" || k.Deploy == nil || k.Dial == nil {
		panic(fmt.Sprintf("store: register %q: want a name, a role, Deploy and Dial", k.Name))
	}
	if !kinds.Add(k.Name, k) {
		panic(fmt.Sprintf("store: %q registered twice", k.Name))
	}
	if len(k.Packages) > 0 {
		images.Register(images.Role{Name: k.Role, Packages: k.Packages})
	}
}

// Lookup returns the kind called name ("" is [Builtin]); the error names
// the known ones.
func Lookup(name string) (Kind, error) {
	if name == "" {
		name = Builtin
	}
	return kinds.Lookup("store", name)
}

// Names lists the registered kinds, sorted.
func Names() []string { return kinds.Names() }

// Kinds returns every registered kind, sorted by name.
func Kinds() []Kind { return kinds.All() }

// ParseOptions checks raw, a run's --store-opt settings, against the
// kind's declarations, once; the error names the first the kind does not
// accept (an unknown name, or a value its declaration refuses).
func (k Kind) ParseOptions(raw map[string]string) (option.Set, error) {
	return option.Parse(k.Options, raw, "--store-opt", "store "+k.Name)
}

// Dial returns a client of the store of kind name at addr, with opts (the
// settings the harness checked, checked again as they arrive).
func Dial(name, addr string, timeout time.Duration, opts option.Set) (Counter, error) {
	k, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if opts, err = k.ParseOptions(opts); err != nil {
		return nil, err
	}
	return k.Dial(addr, timeout, opts)
}

func init() {
	Register(Kind{
		Name:  Builtin,
		Title: "splitbrain's own counter store (HTTP, in memory): token checked and recorded by the store",
		Role:  Role,
		Deploy: func(ctx context.Context, rt runtime.Runtime, image string, _ option.Set) (runtime.Node, string, error) {
			return Deploy(ctx, rt, image)
		},
		Dial: func(addr string, timeout time.Duration, _ option.Set) (Counter, error) {
			return NewClient(addr, timeout), nil
		},
	})
}

var (
	_ Counter = (*Client)(nil)
	_ Counter = (*Mem)(nil)
)
