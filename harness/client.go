package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/splitbrain/splitbrain/internal/option"
	"github.com/splitbrain/splitbrain/runtime"
	"github.com/splitbrain/splitbrain/runtime/images"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/external"
	"github.com/splitbrain/splitbrain/workloads"
)

// Client is the lock client a run's agents use: a registered recipe (the
// target's own, or a library chosen with --client), or an adapter the user
// brings, run through the client protocol.
type Client struct {
	// Recipe is the registered recipe; its Kind is external.Kind for a
	// client the user brings.
	Recipe targets.Recipe
	// Command is the adapter's command line of a client the user brings.
	Command string
	// Role is the image role of the client nodes.
	Role string
	// Files and Packages are what a user's client adds to the client
	// image.
	Files    []images.File
	Packages []string
	// unregistered: the backend's own recipe is not in the registry
	// (a backend only the caller's Deps.Backends knows).
	unregistered bool
}

// External says the client is one the user brings.
func (c Client) External() bool { return c.Command != "" }

// Info is what is known of the client before the agents start: the
// registration of a recipe; for a client the user brings, its command (the
// rest comes from its handshake).
func (c Client) Info() targets.ClientInfo {
	if c.External() {
		return targets.ClientInfo{Recipe: external.Kind, Command: c.Command}
	}
	return c.Recipe.Info()
}

// NoTokenRefusal is the one line that refuses a fenced workload for a
// client that gives no fencing token.
func NoTokenRefusal(client string) error {
	return BadInput("--workload %s needs a fencing token, and client %s gives none: fence at the store instead with a version check on the write (--workload %s --store postgres --store-opt check=version), or choose a client that gives tokens", workloads.FencedCounter, client, workloads.UnfencedCounter)
}

// looksLikeCommand says whether --client's value, when it names no
// registered client, is a command line rather than a misspelt name.
func looksLikeCommand(s string) bool { return strings.ContainsAny(s, " /.") }

// clientLabel is --client's value in a results directory's name: the
// client's name, or "external" for a command line.
func clientLabel(s string) string {
	if _, err := targets.LookupRecipe(s); err == nil || !looksLikeCommand(s) {
		return s
	}
	return external.Kind
}

// ResolveClient says which client a run of c on backend b uses. Its errors
// are bad input naming the fix.
func (c Config) ResolveClient(b targets.Backend) (Client, error) {
	if c.Client == "" || c.Client == b.Recipe {
		if c.ClientFiles != "" || len(c.ClientPackages) > 0 {
			return Client{}, BadInput("--client-files and --client-packages go with --client CMD, the command line of your own adapter")
		}
		r, err := b.RunRecipe()
		if err != nil {
			// A backend resolved by the caller (Deps.Backends) whose
			// recipe only its agents know: what it offers is unknown here.
			return Client{Recipe: targets.Recipe{Kind: b.Recipe, Backends: []string{b.Name}}, Role: runtime.RoleClient, unregistered: true}, nil
		}
		return Client{Recipe: r, Role: r.ClientRole()}, nil
	}
	if r, err := targets.LookupRecipe(c.Client); err == nil {
		if !r.Serves(b.Name) {
			return Client{}, BadInput("--client %s does not serve target %s (it serves %s; clients of %s: %s)",
				r.Kind, b.Name, strings.Join(r.Backends, ", "), b.Name, strings.Join(ClientNames(b), ", "))
		}
		if c.ClientFiles != "" || len(c.ClientPackages) > 0 {
			return Client{}, BadInput("--client-files and --client-packages go with --client CMD, the command line of your own adapter, not with the library %s", r.Kind)
		}
		return Client{Recipe: r, Role: r.ClientRole()}, nil
	}
	if !looksLikeCommand(c.Client) {
		return Client{}, BadInput("--client %q: no such client for target %s (known: %s); to bring your own adapter, give its command line, e.g. --client 'python3 my_lock.py' --client-files ./my-client/",
			c.Client, b.Name, strings.Join(ClientNames(b), ", "))
	}
	cl := Client{Recipe: targets.Recipe{Kind: external.Kind, Backends: []string{b.Name}}, Command: c.Client, Role: runtime.RoleClient,
		Packages: slices.Clone(c.ClientPackages)}
	for _, p := range cl.Packages {
		if p == "" || strings.ContainsAny(p, " \t'\"$;&|<>`\\") {
			return Client{}, BadInput("--client-packages: %q is not a Debian package name", p)
		}
	}
	if err := checkInterpreter(c.Client, cl.Packages); err != nil {
		return Client{}, err
	}
	if c.ClientFiles != "" {
		files, err := clientFiles(c.ClientFiles)
		if err != nil {
			return Client{}, err
		}
		cl.Files = files
	}
	if len(cl.Files)+len(cl.Packages) > 0 {
		cl.Role = userClientRole(cl)
	}
	return cl, nil
}

// interpreters are the programs an adapter's command line commonly starts
// with that the client image lacks (its base has a shell and Perl), each
// with the prefixes of the Debian packages that bring it (python3-redis
// brings python3).
var interpreters = map[string][]string{
	"python3": {"python3"}, "python": {"python3", "python-is-python3"},
	"node": {"nodejs", "node-"}, "nodejs": {"nodejs", "node-"},
	"ruby": {"ruby"}, "java": {"default-jre", "default-jdk", "openjdk-"}, "php": {"php"},
}

// checkInterpreter refuses an adapter's command line whose interpreter
// no --client-packages brings: it would fail only after the images were
// built and the containers started.
func checkInterpreter(command string, packages []string) error {
	fields := strings.Fields(command)
	if len(fields) == 0 {
		return nil
	}
	prog := fields[0]
	if prog == "env" && len(fields) > 1 {
		prog = fields[1]
	}
	prefixes, ok := interpreters[prog]
	if !ok {
		return nil
	}
	for _, p := range packages {
		for _, pre := range prefixes {
			if strings.HasPrefix(p, pre) {
				return nil
			}
		}
	}
	return BadInput("--client %q: the client image has no %s; its interpreter comes from --client-packages (e.g. --client-packages %s, plus the Debian packages of the adapter's libraries)",
		command, prog, strings.TrimSuffix(prefixes[0], "-"))
}

// ClientNames lists the clients that serve backend b: its own recipe first.
func ClientNames(b targets.Backend) []string {
	out := []string{b.Recipe}
	for _, r := range targets.RecipesFor(b.Name) {
		if r.Kind != b.Recipe {
			out = append(out, r.Kind)
		}
	}
	return out
}

// clientFiles lists the regular files under dir (links to files followed)
// as files of the client image, each at its relative path under
// external.ClientDir, keeping its mode.
func clientFiles(dir string) ([]images.File, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, BadInput("--client-files %s: %v", dir, err)
	}
	var out []images.File
	err = filepath.WalkDir(abs, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && path != abs || d.Name() == "__pycache__" {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			// A link is followed to what it names: a shared file linked
			// into the adapter's directory goes in as that file.
			if info, err = os.Stat(path); err != nil {
				return fmt.Errorf("%s is a link to nothing: %w", path, err)
			}
			if info.IsDir() {
				return fmt.Errorf("%s is a link to a directory; copy the directory in instead", path)
			}
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(abs, path)
		out = append(out, images.File{
			Name: fmt.Sprintf("client-files/%d-%s", len(out), filepath.Base(rel)),
			Dest: external.ClientDir + "/" + filepath.ToSlash(rel),
			Mode: int64(info.Mode().Perm()),
			Make: func(context.Context, *images.Builder) (string, error) { return path, nil },
		})
		return nil
	})
	if err != nil {
		return nil, BadInput("--client-files %s: %v", dir, err)
	}
	if len(out) == 0 {
		return nil, BadInput("--client-files %s holds no files", dir)
	}
	return out, nil
}

// userClientRole names the image role of a client the user brings, by a
// hash of what goes into it besides the files' bytes (which the image's tag
// hashes): its packages and the files' places.
func userClientRole(cl Client) string {
	h := sha256.New()
	for _, p := range cl.Packages {
		fmt.Fprintf(h, "pkg %s\n", p)
	}
	for _, f := range cl.Files {
		fmt.Fprintf(h, "file %s %s %o\n", f.Name, f.Dest, f.Mode)
	}
	return runtime.RoleClient + "-user-" + hex.EncodeToString(h.Sum(nil))[:10]
}

// registerImage makes a user's client image buildable.
func (cl Client) registerImage() {
	if cl.Role != runtime.RoleClient && cl.External() {
		images.Register(images.Role{Name: cl.Role, Packages: cl.Packages, Files: cl.Files})
	}
}

// Options are a run's --recipe-opt and --store-opt settings, checked once
// against their declarations (package option) and parted by who reads
// them: the backend's Target.Start, the agents' lock recipe, the store.
type Options struct {
	// Backend are the backend's own settings (targets.Options.Settings).
	Backend option.Set
	// Recipe are the client's (targets.RecipeConfig.Options): for a
	// client the user brings, every setting that is not the backend's own,
	// unchecked here (its adapter checks them at its handshake).
	Recipe option.Set
	// Store are the store's (--store-opt).
	Store option.Set
}

// parseOptions checks the run's --recipe-opt settings against the
// backend's and its client's declarations, once, and parts them; and
// refuses a fenced workload with a client that gives no token.
func (c Config) parseOptions(b targets.Backend, cl Client) (own, recipe option.Set, err error) {
	switch {
	case cl.External():
		own, err = option.Parse(b.Options, option.Set(c.RecipeOptions).Only(b.Options), "option", "target "+b.Name)
		recipe = option.Set(c.RecipeOptions).Without(b.Options)
	case cl.unregistered:
		if len(c.RecipeOptions) > 0 {
			err = b.CheckOptions(c.RecipeOptions)
		}
		own, recipe = option.Set(c.RecipeOptions).Only(b.Options), option.Set(c.RecipeOptions).Without(b.Options)
	default:
		own, recipe, err = b.ParseOptions(cl.Recipe, c.RecipeOptions)
		if err == nil && cl.Recipe.Check != nil {
			err = cl.Recipe.Check(c.LeaseTTL, recipe)
		}
	}
	if err != nil {
		return nil, nil, BadInput("--recipe-opt: %v", err)
	}
	if !cl.External() && !cl.unregistered && c.Workload == workloads.FencedCounter && !cl.Recipe.Fencing {
		return nil, nil, NoTokenRefusal(cl.Recipe.Kind)
	}
	return own, recipe, nil
}

// recipeConfig is what the agents get: the client's kind, the backend's
// name, the cluster's endpoints, the run's lease TTL and the client's
// options; for a client the user brings, its command.
func (r *run) recipeConfig(cluster targets.Cluster) targets.RecipeConfig {
	return targets.RecipeConfig{
		Kind: r.client.Recipe.Kind, Backend: r.backend.Name, Command: r.client.Command,
		Endpoints: cluster.Endpoints(), TTL: targets.Duration(r.cfg.LeaseTTL), Options: r.opts.Recipe,
	}
}

// learnClient completes results.json's client from what the agents'
// clients said of themselves in their handshake (an adapter's library,
// version and offers), and refuses a fenced workload when the client gives
// no token.
func (r *run) learnClient(cl Client) error {
	for _, c := range r.clients {
		said := c.ClientInfo()
		if said == nil {
			continue
		}
		info := *said
		info.Recipe = cl.Recipe.Kind
		info.Session = info.Session || cl.Recipe.Session
		r.res.Client = &info
		break
	}
	if r.cfg.Workload == workloads.FencedCounter && r.res.Client != nil && !r.res.Client.Fencing {
		name := r.res.Client.Library
		if name == "" {
			name = r.cfg.Client
		}
		return NoTokenRefusal(name)
	}
	return nil
}
