package targets

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/internal/registry"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
)

// Backend declares a lock backend: everything the rest of splitbrain needs
// to know about it, so that nothing else names it. A backend package
// registers its Backend with [Register] from its init function (the shape
// of database/sql drivers); package catalog imports every backend we ship.
type Backend struct {
	// Name is the backend's name on the command line ("--target NAME").
	Name string
	// Title says in a few words what it is, for help texts.
	Title string
	// Target brings it up on a runtime.
	Target Target
	// Roles are its nodes' roles: how each one's image is made, where its
	// nodes keep state, how its processes are clock-skewed.
	Roles []Role
	// Size is the number of lock-service nodes it runs, and Leads says
	// whether one of them leads: impossible faults (a majority partition
	// of one node, isolating the leader of a leaderless service) are
	// refused up front, and scenarios choose by them.
	Size  int
	Leads bool
	// Durable says that a killed and restarted node keeps its locks and
	// tokens (its state is on disk) in its default configuration; a
	// backend that forgets them is not killed by the scenarios that test
	// the correct pattern.
	Durable bool
	// DurableWith are the --recipe-opt settings under which it makes what
	// it acknowledges durable before it answers (fsync on every write:
	// Redis with appendfsync always, PostgreSQL with fsync and
	// synchronous_commit on), so that it keeps its tokens across a kill
	// and across a power loss. For a Durable backend they spell out its
	// defaults; for one that is not, the scenarios that test the correct
	// pattern under kills run it so.
	DurableWith map[string]string
	// UnsyncedWith, for a backend with a durability switch, are the
	// --recipe-opt settings of its known-bad configuration: it keeps its
	// tokens across a kill (what it acknowledged reached the kernel) but
	// acknowledges writes before they are on disk (fsync off or once a
	// second), so a power loss may take back grants and tokens it gave.
	// Scenarios about power loss run it as its own cell.
	UnsyncedWith map[string]string
	// KeepaliveWith, for a backend whose lock lives as long as the
	// client's session, are the --recipe-opt settings under which the
	// server notices a client gone silent within seconds (its TCP
	// keepalives lowered); the half-open holder's control runs it so.
	KeepaliveWith map[string]string
	// LosesOnFailover says that a failover may lose what the old leader
	// acknowledged — locks it granted, tokens it gave — because it
	// replicates asynchronously (Redis with Sentinel): a replica promoted
	// before it had them grants the lock again and counts tokens from
	// behind. Scenarios that expect the lock's promises to survive the
	// loss of its leader do not run it; those about failover do.
	LosesOnFailover bool
	// StartUp is how long a killed node of its takes, at most, from its
	// restart to serving again, when that is more than the second or two
	// most servers take (measured; zero: no more). While it starts, a
	// node that is the only one of its kind (a single API server) leaves
	// the service down: the stall bounds of scenarios that kill lock nodes
	// allow it on top of the fault.
	StartUp time.Duration
	// WallClockLeases says the service expires its leases by its nodes'
	// wall clock (CLOCK_REALTIME), as Redis expires keys: a forward jump
	// of a node's clock expires the locks that node holds at once, while
	// their holders work. A service that times leases by a monotonic
	// clock (etcd, lockd, ZooKeeper) ignores wall-clock jumps. Scenarios
	// about clock faults choose by it.
	WallClockLeases bool
	// Recipe is the kind of the lock recipe its clusters hand to clients
	// (RecipeConfig.Kind), registered with [RegisterRecipe].
	Recipe string
	// Options are the backend's own settings a run may set with
	// --recipe-opt (server settings, say), beside its recipe's options.
	Options []Option
	// Probe, when set, is its health probe, the hidden `splitbrain probe
	// NAME` command its Target runs inside its nodes.
	Probe *Probe
	// Programs are programs of the splitbrain binary its nodes run as
	// their main process (`splitbrain NAME [flags]`, hidden commands).
	Programs []Program
	// Local, when set, starts an in-process stand-in of its service on
	// loopback, which `splitbrain client-check` checks an adapter against
	// without Docker (Redis and Redlock: miniredis).
	Local func(ctx context.Context) (*LocalService, error)
}

// LocalService is an in-process stand-in of a backend's service
// (Backend.Local).
type LocalService struct {
	// Endpoints are its client addresses on loopback.
	Endpoints []string
	// Describe says what it is, in a few words.
	Describe string
	// Advance lets d pass for its leases by moving its clock.
	Advance func(d time.Duration)
	// Close stops it.
	Close func()
}

// Role is one node role of a backend.
type Role struct {
	// Name is the role (runtime.NodeSpec.Role) and its images' name
	// (splitbrain-<Name>).
	Name string
	// Packages are the Debian packages its image adds to the shared base.
	Packages []string
	// Files are the files its image holds beyond the splitbrain binary,
	// made on this machine (images.GoModule, images.BuiltFile); SSH hosts
	// get them too.
	Files []images.File
	// StateDirs are absolute directories its nodes keep state in; on SSH
	// hosts each node gets its own copy of each (co-located nodes and runs
	// never share one).
	StateDirs []string
	// HostSetup says what an SSH host must have for the role's nodes,
	// shown when a node's program is missing there ("apt-get install
	// ...").
	HostSetup string
	// Clock says how the clock nemesis skews its nodes' main process.
	Clock Clock
}

// Clock says how the clock nemesis skews a role's main process, one
// process at a time, never the host's clock.
type Clock struct {
	// Shim says the process runs under splitbrain's LD_PRELOAD clock shim
	// (its command preloads it and its image holds it: C programs whose
	// allocator or libc defeats other ways). False means vDSO injection,
	// for programs that read the clock through the vDSO (Go programs),
	// which needs SYS_PTRACE in the node.
	Shim bool
	// Now asks the process itself for its time, as the nemesis verifies a
	// shim's skew (required with Shim).
	Now func(ctx context.Context, n runtime.Node) (time.Time, error)
}

// Option declares a setting a run may give with --recipe-opt NAME=VALUE
// (package option: typed declarations, option.Enum and the like, list
// themselves with option.Decls).
type Option = option.Decl

// Probe is a backend's health probe: `splitbrain probe <backend>
// [--endpoint host:port]`, run inside one of its nodes against the node's
// own service, prints Run's answer as one JSON object.
type Probe struct {
	// Endpoint is the default --endpoint.
	Endpoint string
	// Run asks the service at endpoint for its status.
	Run func(ctx context.Context, endpoint string) (any, error)
}

// Program is a program of the splitbrain binary that runs as a node's
// main process (PID 1 in a container): `splitbrain <Name> [flags]`. It
// gets a context cancelled on SIGTERM or SIGINT, and a logger at the
// command line's --log-level.
type Program struct {
	Name  string
	Short string
	// Flags registers the program's flags on fs and returns a check of
	// their values, run after parsing (an error is bad input), and the
	// program itself.
	Flags func(fs *flag.FlagSet) (check func() error, run func(ctx context.Context, log *slog.Logger) error)
}

// Recipe declares a lock recipe: the client side of one or more backends,
// which agents run. Register it with [RegisterRecipe] from the package's
// init function.
type Recipe struct {
	// Kind is its name (RecipeConfig.Kind).
	Kind string
	// Backends are the backends it serves.
	Backends []string
	// Library and Version name the third-party library it is built on,
	// when it is one (its import path or package name, and the version
	// built in); empty for our own recipes.
	Library, Version string
	// Fencing says that Lease.Token is a fencing token (strictly greater
	// for every later grant of a key).
	Fencing bool
	// CheckedRelease says that a release only deletes the caller's own
	// lock.
	CheckedRelease bool
	// Renews says that a held lease is renewed in the background (a
	// watchdog or keep-alive) rather than lasting one fixed TTL.
	Renews bool
	// Session says that the lock lives as long as the client's
	// connection to the service, not for a TTL: a killed client's lock
	// goes at once (its kernel closes the connection), and a client cut
	// off or frozen keeps it until the service ends its session
	// (PostgreSQL's advisory locks).
	Session bool
	// Options are the recipe options it accepts (RecipeConfig.Options).
	Options []Option
	// Check, when set, checks the recipe's settings taken together and
	// with the run's lease TTL (what each option's own declaration cannot
	// see), before any container starts: an error is bad input.
	Check func(ttl time.Duration, opts option.Set) error
	// New makes a Locker for one client (a library in Go, in process).
	New LockerFactory
	// Adapter, set instead of New, is the command line of an adapter
	// process that wraps a library in another language and speaks the
	// client protocol (docs/client-protocol.md), run with sh -c in the
	// client files directory of its image (Files put it there). The
	// adapter is run by package targets/external (external.FactoryOf).
	Adapter string
	// Language is the client's language ("go" when empty): a library in
	// another language runs as an adapter process (package external).
	Language string
	// Packages and Files, when set, give the recipe a client image of its
	// own, role ClientRole(): the client image plus these Debian packages
	// and files (an adapter in another language, what it runs on, a
	// second build of a library), so that no other client carries them.
	Packages []string
	Files    []images.File
	// Build are shell commands run in the build of the recipe's client
	// image once its packages and files are in place (images.Role.Build):
	// compiling a Java adapter with javac, say.
	Build []string
	// Title says in a few words what the client is, for listings.
	Title string
}

// ClientRole is the image role the recipe's agents run in:
// "client-<Kind>" when it has packages or files of its own, else the
// plain client role.
func (r Recipe) ClientRole() string {
	if len(r.Packages)+len(r.Files)+len(r.Build) > 0 {
		return runtime.RoleClient + "-" + r.Kind
	}
	return runtime.RoleClient
}

// Info is what results.json records about a run's client when it uses r.
func (r Recipe) Info() ClientInfo {
	lang := r.Language
	if lang == "" {
		lang = "go"
	}
	return ClientInfo{Recipe: r.Kind, Library: r.Library, Version: r.Version, Language: lang,
		Fencing: r.Fencing, CheckedRelease: r.CheckedRelease, Renews: r.Renews, Session: r.Session}
}

// Serves reports whether the recipe serves the backend called name.
func (r Recipe) Serves(name string) bool { return slices.Contains(r.Backends, name) }

var (
	backends registry.Of[Backend]
	recipes  registry.Of[Recipe]
	// regMu guards the default backend and the adapter runner.
	regMu       sync.RWMutex
	defaultName string
)

// Register makes a backend known by its name. It panics when the
// declaration is incomplete or the name, a role or a program is taken:
// registrations run from init functions, and either is a programming
// error. Its roles' images become buildable (images.Register).
func Register(b Backend) {
	fail := func(format string, args ...any) {
		panic(fmt.Sprintf("targets: register %q: ", b.Name) + fmt.Sprintf(format, args...))
	}
	switch {
	case b.Name == "" || strings.ContainsAny(b.Name, " ,=/"):
		fail("want a name without spaces, commas, '=' or '/'")
	case b.Target == nil:
		fail("no Target")
	case len(b.Roles) == 0:
		fail("no roles")
	case b.Size < 1:
		fail("Size %d: want at least 1", b.Size)
	case b.Recipe == "":
		fail("no Recipe")
	}
	// Checked before the rest, which must not register a backend that
	// fails it (Add below refuses the name too, should another Register
	// take it meanwhile).
	if _, dup := backends.Get(b.Name); dup {
		fail("registered twice")
	}
	for _, o := range backends.All() {
		for _, p := range b.Programs {
			if slices.ContainsFunc(o.Programs, func(q Program) bool { return q.Name == p.Name }) {
				fail("program %q is also %s's", p.Name, o.Name)
			}
		}
	}
	for _, p := range b.Programs {
		if p.Name == "" || p.Flags == nil {
			fail("program %q needs a name and flags", p.Name)
		}
	}
	if b.Probe != nil && b.Probe.Run == nil {
		fail("probe without Run")
	}
	for what, set := range map[string]map[string]string{"DurableWith": b.DurableWith, "UnsyncedWith": b.UnsyncedWith, "KeepaliveWith": b.KeepaliveWith} {
		if _, err := option.Parse(b.Options, set, what, "target "+b.Name); err != nil {
			fail("%v", err)
		}
	}
	for _, r := range b.Roles {
		if r.Clock.Shim && r.Clock.Now == nil {
			fail("role %s runs under the clock shim but has no Clock.Now", r.Name)
		}
		for _, d := range r.StateDirs {
			if !strings.HasPrefix(d, "/") {
				fail("role %s: state directory %q is not absolute", r.Name, d)
			}
		}
	}
	for _, r := range b.Roles {
		images.Register(images.Role{Name: r.Name, Packages: r.Packages, Files: r.Files})
	}
	if !backends.Add(b.Name, b) {
		fail("registered twice")
	}
}

// Lookup returns the backend called name; the error names the known ones.
func Lookup(name string) (Backend, error) { return backends.Lookup("target", name) }

// Names lists the registered backends' names, sorted.
func Names() []string { return backends.Names() }

// Backends returns every registered backend, sorted by name.
func Backends() []Backend { return backends.All() }

// SetDefault names the backend a run brings up when none is named (the
// catalogue chooses it).
func SetDefault(name string) {
	regMu.Lock()
	defer regMu.Unlock()
	defaultName = name
}

// Default is the backend SetDefault named, else the first registered one
// by name, else "".
func Default() string {
	regMu.RLock()
	d := defaultName
	regMu.RUnlock()
	if d != "" {
		return d
	}
	if ns := Names(); len(ns) > 0 {
		return ns[0]
	}
	return ""
}

// RegisterRecipe makes a lock recipe known by its kind. It panics when the
// kind is empty or taken, or the recipe cannot make lockers.
func RegisterRecipe(r Recipe) {
	if r.Kind == "" || (r.New == nil) == (r.Adapter == "") || len(r.Backends) == 0 {
		panic(fmt.Sprintf("targets: register recipe %q: want a kind, a factory or an adapter command (one of them), and the backends it serves", r.Kind))
	}
	if !recipes.Add(r.Kind, r) {
		panic(fmt.Sprintf("targets: recipe %q registered twice", r.Kind))
	}
	if role := r.ClientRole(); role != runtime.RoleClient {
		images.Register(images.Role{Name: role, Packages: r.Packages, Files: r.Files, Build: r.Build})
	}
}

// LookupRecipe returns the recipe of kind; the error names the known ones.
func LookupRecipe(kind string) (Recipe, error) { return recipes.Lookup("lock recipe", kind) }

// Recipes returns every registered recipe, sorted by kind.
func Recipes() []Recipe { return recipes.All() }

// ExternalKind is the recipe kind of a client the user brings: an adapter
// whose command line travels in RecipeConfig.Command.
const ExternalKind = "external"

// Factory is the recipe's LockerFactory: New, after a check of the
// options it is given against the recipe's declarations (they were
// checked by the harness that sent them; New reads them through those
// declarations). A recipe with an Adapter runs through the client
// protocol: external.FactoryOf is the factory of every recipe.
func (r Recipe) Factory() LockerFactory {
	if r.New != nil {
		return func(ctx context.Context, cfg RecipeConfig, client string, log *slog.Logger) (Locker, error) {
			if _, err := option.Parse(r.Options, cfg.Options, "option", "recipe "+r.Kind); err != nil {
				return nil, err
			}
			return r.New(ctx, cfg, client, log)
		}
	}
	return func(context.Context, RecipeConfig, string, *slog.Logger) (Locker, error) {
		return nil, fmt.Errorf("recipe %s runs an adapter process: its factory is the client protocol's (external.FactoryOf)", r.Kind)
	}
}

// RecipesFor returns the recipes that serve the backend called name.
func RecipesFor(name string) []Recipe {
	var out []Recipe
	for _, r := range Recipes() {
		if slices.Contains(r.Backends, name) {
			out = append(out, r)
		}
	}
	return out
}

// RoleNames lists the backend's roles.
func (b Backend) RoleNames() []string {
	out := make([]string, len(b.Roles))
	for i, r := range b.Roles {
		out[i] = r.Name
	}
	return out
}

// StateDirs lists the state directories of all the backend's roles.
func (b Backend) StateDirs() []string {
	var out []string
	for _, r := range b.Roles {
		for _, d := range r.StateDirs {
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out
}

// Runs reports whether a run given the --recipe-opt settings opts runs the
// backend with every one of want (a setting opts does not give has its
// declared default): whether it ran in its DurableWith configuration, say.
func (b Backend) Runs(opts, want map[string]string) bool {
	for k, v := range want {
		got, ok := opts[k]
		if !ok {
			if i := slices.IndexFunc(b.Options, func(o Option) bool { return o.Name == k }); i >= 0 {
				got = b.Options[i].DefaultValue()
			}
		}
		if got != v {
			return false
		}
	}
	return true
}

// RunRecipe is the registered recipe the backend's runs use (b.Recipe).
func (b Backend) RunRecipe() (Recipe, error) {
	r, err := LookupRecipe(b.Recipe)
	if err != nil {
		return Recipe{}, fmt.Errorf("target %s: %w", b.Name, err)
	}
	return r, nil
}

// AllOptions are the --recipe-opt settings a run of the backend accepts:
// the backend's own and its recipe's.
func (b Backend) AllOptions() ([]Option, error) {
	r, err := b.RunRecipe()
	if err != nil {
		return nil, err
	}
	return b.OptionsWith(r), nil
}

// OptionsWith are the --recipe-opt settings a run of the backend with the
// client recipe r accepts: the backend's own and r's.
func (b Backend) OptionsWith(r Recipe) []Option {
	return append(slices.Clone(b.Options), r.Options...)
}

// Accepts reports whether a run of the backend takes the option
// name=value.
func (b Backend) Accepts(name, value string) bool {
	return b.CheckOptions(map[string]string{name: value}) == nil
}

// CheckOptions returns an error naming the first of opts that a run of the
// backend with its own recipe does not accept — an unknown name (a misspelt
// anti-pattern switch would otherwise silently test the safe recipe) or a
// value its declaration refuses — and what it does accept.
func (b Backend) CheckOptions(opts map[string]string) error {
	if len(opts) == 0 {
		return nil
	}
	r, err := b.RunRecipe()
	if err != nil {
		return err
	}
	_, _, err = b.ParseOptions(r, opts)
	return err
}

// CheckOptionsWith is CheckOptions for a run of the backend with the
// client recipe r instead of its own.
func (b Backend) CheckOptionsWith(r Recipe, opts map[string]string) error {
	_, _, err := b.ParseOptions(r, opts)
	return err
}

// ParseOptions checks raw, a run's --recipe-opt settings, against the
// options of the backend and of the client recipe r, once, and returns
// them parted: the backend's own (Target.Start's [Options.Settings]) and
// the rest, the recipe's (RecipeConfig.Options).
func (b Backend) ParseOptions(r Recipe, raw map[string]string) (own, recipe option.Set, err error) {
	all, err := option.Parse(b.OptionsWith(r), raw, "option", "target "+b.Name)
	if err != nil {
		return nil, nil, err
	}
	return all.Only(b.Options), all.Without(b.Options), nil
}
