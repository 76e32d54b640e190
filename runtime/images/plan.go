package images

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// Role is how one role's images are made: the shared base, the Debian
// packages the role adds to it, the splitbrain binary and the role's own
// files. Backends declare their roles (package targets registers them
// here); the store, client and control roles are built in.
type Role struct {
	// Name names the images: splitbrain-<Name>:<hash>.
	Name string
	// Packages are Debian packages installed on top of the base, in the
	// role's image only (apt-get in its build, from the base's Debian
	// mirror): what one role needs stays out of the base every image
	// shares.
	Packages []string
	// Files are the role's files beyond the splitbrain binary.
	Files []File
	// Build are shell commands run as root in the role's image build,
	// after its packages are installed and its own files are in place and
	// before the splitbrain binary is copied (so that a new binary does not
	// redo them): compiling an adapter with javac, say. They are part of
	// the image's hash like the rest of its Dockerfile. SSH hosts do not
	// run them (a host's setup must).
	Build []string
}

// File is a file of role images (and of SSH hosts, which get the same
// files), made on this machine when first needed.
type File struct {
	// Name is the file's name in the build context.
	Name string
	// Dest is its path in the image; commands use it.
	Dest string
	// Mode is its mode in the image (0: 0755).
	Mode int64
	// Make returns the file's path on this machine, building it if
	// needed (see [GoModule] and [BuiltFile]).
	Make func(ctx context.Context, b *Builder) (string, error)
}

// make makes f and says where it is.
func (f File) make(ctx context.Context, b *Builder) (Artifact, error) {
	path, err := f.Make(ctx, b)
	if err != nil {
		return Artifact{}, err
	}
	return Artifact{Name: f.Name, Dest: f.Dest, Path: path, Mode: f.Mode}, nil
}

// Self is the splitbrain binary, which every image holds: built static
// from this source tree (cached by the tree's hash), or this executable
// when it is static and there is no tree (the control image).
var Self = File{Name: "splitbrain", Dest: "/usr/local/bin/splitbrain", Make: func(ctx context.Context, b *Builder) (string, error) {
	return b.splitbrainBinary(ctx)
}}

var (
	rolesMu sync.RWMutex
	roles   = map[string]Role{RoleStore: {Name: RoleStore}, RoleClient: {Name: RoleClient}}
)

// roleName is what a role may be called: it becomes part of an image name.
var roleName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

// Register makes a role's images buildable. Registering the same role
// again (the same packages and files) does nothing. It panics when the
// role is unnamed or its name is taken by a different role, as
// registrations run from init functions and a clash is a programming
// error.
func Register(r Role) {
	rolesMu.Lock()
	defer rolesMu.Unlock()
	old, dup := roles[r.Name]
	switch {
	case !roleName.MatchString(r.Name):
		panic(fmt.Sprintf("images: role name %q: want lower-case letters, digits, '.', '_' or '-'", r.Name))
	case r.Name == RoleControl || dup && !same(old, r):
		panic(fmt.Sprintf("images: role %q registered twice, differently", r.Name))
	case dup:
		return // several backends may share a role (each declares it)
	}
	for _, f := range r.Files {
		if f.Name == "" || f.Dest == "" || f.Make == nil {
			panic(fmt.Sprintf("images: role %q: file %q needs a name, a destination and a way to make it", r.Name, f.Name))
		}
	}
	r.Packages = slices.Clone(r.Packages)
	r.Files = slices.Clone(r.Files)
	r.Build = slices.Clone(r.Build)
	roles[r.Name] = r
}

// same reports whether two declarations of a role make the same image.
func same(a, b Role) bool {
	dest := func(f File) string { return f.Name + "\x00" + f.Dest }
	fa, fb := make([]string, len(a.Files)), make([]string, len(b.Files))
	for i, f := range a.Files {
		fa[i] = dest(f)
	}
	for i, f := range b.Files {
		fb[i] = dest(f)
	}
	return slices.Equal(a.Packages, b.Packages) && slices.Equal(fa, fb) && slices.Equal(a.Build, b.Build)
}

// Roles lists every role in build order: the store and the client, the
// registered roles by name, and the control image last.
func Roles() []string {
	rolesMu.RLock()
	defer rolesMu.RUnlock()
	out := []string{RoleStore, RoleClient}
	var rest []string
	for n := range roles {
		if n != RoleStore && n != RoleClient {
			rest = append(rest, n)
		}
	}
	slices.Sort(rest)
	return append(append(out, rest...), RoleControl)
}

// Plan is how one role's image is made, decided before anything is built
// or any engine is asked: the base, the packages the role adds and the
// files it holds (the splitbrain binary first).
type Plan struct {
	Role     string
	Base     string
	Packages []string
	Files    []File
	// Build are the role's build commands (Role.Build).
	Build []string
}

// PlanRole returns the plan of role's image. The control image holds every
// registered role's files, once each, and no role's packages (it runs the
// harness, not the backends).
func PlanRole(role string) (Plan, error) {
	rolesMu.RLock()
	defer rolesMu.RUnlock()
	p := Plan{Role: role, Base: BaseTag(), Files: []File{Self}}
	add := func(fs []File) {
		for _, f := range fs {
			if !slices.ContainsFunc(p.Files, func(g File) bool { return g.Dest == f.Dest }) {
				p.Files = append(p.Files, f)
			}
		}
	}
	if role == RoleControl {
		names := make([]string, 0, len(roles))
		for n := range roles {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			add(roles[n].Files)
		}
		return p, nil
	}
	r, ok := roles[role]
	if !ok {
		return Plan{}, fmt.Errorf("unknown role %q (known: %s)", role, strings.Join(knownRoles(), ", "))
	}
	p.Packages = slices.Clone(r.Packages)
	p.Build = slices.Clone(r.Build)
	add(r.Files)
	return p, nil
}

// PlanRoles plans each of roles, refusing an unknown one.
func PlanRoles(roles []string) ([]Plan, error) {
	out := make([]Plan, 0, len(roles))
	for _, r := range roles {
		p, err := PlanRole(r)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// knownRoles is Roles with rolesMu already held.
func knownRoles() []string {
	out := []string{RoleControl}
	for n := range roles {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Dockerfile is the plan's Dockerfile: the base, the role's packages
// installed with apt-get (the lists and archives removed again), and a
// COPY per file.
func (p Plan) Dockerfile() string {
	var df strings.Builder
	fmt.Fprintf(&df, "FROM %s\n", p.Base)
	if len(p.Packages) > 0 {
		fmt.Fprintf(&df, "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends %s && apt-get clean && rm -rf /var/lib/apt/lists/*\n",
			strings.Join(p.Packages, " "))
	}
	if len(p.Build) == 0 {
		for _, f := range p.Files {
			fmt.Fprintf(&df, "COPY %s %s\n", f.Name, f.Dest)
		}
	} else {
		// The role's own files, its build steps, then the splitbrain
		// binary: a rebuilt binary leaves the build's layers cached.
		for _, f := range p.Files {
			if f.Dest != Self.Dest {
				fmt.Fprintf(&df, "COPY %s %s\n", f.Name, f.Dest)
			}
		}
		for _, b := range p.Build {
			fmt.Fprintf(&df, "RUN %s\n", b)
		}
		for _, f := range p.Files {
			if f.Dest == Self.Dest {
				fmt.Fprintf(&df, "COPY %s %s\n", f.Name, f.Dest)
			}
		}
	}
	fmt.Fprintf(&df, "LABEL splitbrain.role=%s\n", p.Role)
	return df.String()
}
