package images

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func write(t *testing.T, root, rel, body string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTreeHash(t *testing.T) {
	root := t.TempDir()
	write(t, root, "go.mod", "module "+ModulePath+"\n")
	write(t, root, "a/a.go", "package a")
	h0, err := TreeHash(root)
	if err != nil {
		t.Fatal(err)
	}
	ignored := []string{"a/a_test.go", "README.md", "docs/x.go", "results/r.go", "a/testdata/t.go", ".git/HEAD", "sub/go.mod", "sub/s.go"}
	for _, rel := range ignored {
		write(t, root, rel, "whatever")
		if h, _ := TreeHash(root); h != h0 {
			t.Fatalf("adding %s changed the hash", rel)
		}
	}
	for _, rel := range []string{"a/a.go", "a/shim.c", "go.sum", "a/page.html"} {
		write(t, root, rel, "changed "+rel)
		h, _ := TreeHash(root)
		if h == h0 {
			t.Fatalf("changing %s kept the hash", rel)
		}
		h0 = h
	}
	if got, ok := FindSource(filepath.Join(root, "a", "testdata")); !ok || got != root {
		t.Fatalf("FindSource = %q %v", got, ok)
	}
	if _, ok := FindSource(t.TempDir()); ok {
		t.Fatal("found a source tree where there is none")
	}
}

func TestBaseTagIsStable(t *testing.T) {
	a := BaseTag()
	if a != BaseTag() || len(a) != len("splitbrain-base:")+12 {
		t.Fatalf("base tag %q", a)
	}
	saved := Packages
	defer func() { Packages = saved }()
	Packages = append(append([]string(nil), saved...), "cowsay")
	if BaseTag() == a {
		t.Fatal("changing the package list kept the base tag")
	}
}

func TestIsStatic(t *testing.T) {
	if isStatic("/bin/sh") {
		t.Fatal("/bin/sh reported static")
	}
	if isStatic(filepath.Join(t.TempDir(), "missing")) {
		t.Fatal("missing file reported static")
	}
}

func TestPlan(t *testing.T) {
	p, err := PlanRole(RoleStore)
	if err != nil {
		t.Fatal(err)
	}
	// A role without packages of its own: the base and COPY lines, as
	// before roles could have packages (its tag's formula is unchanged).
	want := "FROM " + BaseTag() + "\nCOPY splitbrain /usr/local/bin/splitbrain\nLABEL splitbrain.role=store\n"
	if got := p.Dockerfile(); got != want {
		t.Fatalf("store Dockerfile:\n%s\nwant:\n%s", got, want)
	}
	mk := func(context.Context, *Builder) (string, error) { return "", nil }
	role := Role{Name: "plan-test", Packages: []string{"socat", "lsof"}, Files: []File{{Name: "x", Dest: "/opt/x", Make: mk}}}
	Register(role)
	Register(role) // the same role again: several backends may share one
	p, err = PlanRole("plan-test")
	if err != nil {
		t.Fatal(err)
	}
	df := p.Dockerfile()
	if !strings.Contains(df, "apt-get install -y --no-install-recommends socat lsof && apt-get clean && rm -rf /var/lib/apt/lists/*\nCOPY splitbrain /usr/local/bin/splitbrain\nCOPY x /opt/x\n") {
		t.Fatalf("Dockerfile:\n%s", df)
	}
	if slices.Contains(Packages, "socat") {
		t.Fatal("a role's package is in the base")
	}
	ctl, err := PlanRole(RoleControl)
	if err != nil || len(ctl.Packages) != 0 || !slices.ContainsFunc(ctl.Files, func(f File) bool { return f.Dest == "/opt/x" }) {
		t.Fatalf("control plan %+v, %v", ctl, err)
	}
	if r := Roles(); r[0] != RoleStore || r[1] != RoleClient || r[len(r)-1] != RoleControl || !slices.Contains(r, "plan-test") {
		t.Fatalf("Roles() = %v", r)
	}
	if _, err := PlanRoles([]string{RoleClient, "mainframe"}); err == nil || !strings.Contains(err.Error(), `unknown role "mainframe"`) {
		t.Fatalf("unknown role: %v", err)
	}
	func() {
		defer func() {
			if p := recover(); p == nil || !strings.Contains(p.(string), "differently") {
				t.Fatalf("a different role of the same name: panic %v", p)
			}
		}()
		Register(Role{Name: "plan-test", Packages: []string{"cowsay"}})
	}()
}

// TestPlanBuild: a role's build steps run after its own files are copied
// and before the splitbrain binary is, so a new binary reuses their
// layers; they are part of the Dockerfile (and so of the tag).
func TestPlanBuild(t *testing.T) {
	mk := func(context.Context, *Builder) (string, error) { return "", nil }
	role := Role{Name: "plan-build-test", Packages: []string{"default-jdk-headless"},
		Files: []File{{Name: "A.java", Dest: "/opt/a/A.java", Make: mk}}, Build: []string{"javac -d /opt/a /opt/a/A.java"}}
	Register(role)
	p, err := PlanRole(role.Name)
	if err != nil {
		t.Fatal(err)
	}
	df := p.Dockerfile()
	if !strings.Contains(df, "rm -rf /var/lib/apt/lists/*\nCOPY A.java /opt/a/A.java\nRUN javac -d /opt/a /opt/a/A.java\nCOPY splitbrain /usr/local/bin/splitbrain\nLABEL") {
		t.Fatalf("Dockerfile:\n%s", df)
	}
	func() {
		defer func() {
			if p := recover(); p == nil || !strings.Contains(p.(string), "differently") {
				t.Fatalf("the same role with other build steps: panic %v", p)
			}
		}()
		other := role
		other.Build = []string{"true"}
		Register(other)
	}()
}

func TestBuiltFile(t *testing.T) {
	b := &Builder{CacheDir: t.TempDir()}
	builds := 0
	input := "v1"
	f := BuiltFile("tool.so", "/opt/tool.so", 0o644, func() []string { return []string{input} }, func(_ context.Context, out string) error {
		builds++
		return os.WriteFile(out, []byte(input), 0o644)
	})
	p1, err := f.Make(context.Background(), b)
	if err != nil || !strings.HasSuffix(p1, ".so") {
		t.Fatal(p1, err)
	}
	if p, _ := f.Make(context.Background(), b); p != p1 || builds != 1 {
		t.Fatalf("second Make: %s, %d builds", p, builds)
	}
	input = "v2"
	p2, err := f.Make(context.Background(), b)
	if err != nil || p2 == p1 || builds != 2 {
		t.Fatalf("changed input: %s, %d builds, %v", p2, builds, err)
	}
	// Another source tree may still use the older build: it stays while
	// it was used within keepUnused, and goes at the next build after.
	if _, err := os.Stat(p1); err != nil {
		t.Fatal("a build used a moment ago was removed")
	}
	old := time.Now().Add(-2 * keepUnused)
	if err := os.Chtimes(p1, old, old); err != nil {
		t.Fatal(err)
	}
	input = "v3"
	if _, err := f.Make(context.Background(), b); err != nil || builds != 3 {
		t.Fatalf("third input: %d builds, %v", builds, err)
	}
	if _, err := os.Stat(p1); !os.IsNotExist(err) {
		t.Fatal("a build unused for longer than keepUnused was kept")
	}
	if _, err := os.Stat(p2); err != nil {
		t.Fatal("the build used a moment ago was removed")
	}
}

// Builder.Make makes the files it is given under the builder's lock
// file: a second caller waits until the first is done, then finds the
// file in the cache.
func TestBuilderMake(t *testing.T) {
	b := &Builder{CacheDir: t.TempDir()}
	builds := 0
	f := BuiltFile("tool.so", "/opt/tool.so", 0o644, func() []string { return []string{"v1"} }, func(_ context.Context, out string) error {
		builds++
		return os.WriteFile(out, []byte("v1"), 0o644)
	})
	unlock, err := lockFile(context.Background(), filepath.Join(b.CacheDir, "images.lock"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := b.Make(ctx, f); err == nil || builds != 0 {
		t.Fatalf("Make while another held the lock: %v, %d builds", err, builds)
	}
	unlock()
	arts, err := b.Make(context.Background(), f)
	if err != nil || len(arts) != 1 || arts[0].Name != "tool.so" || arts[0].Dest != "/opt/tool.so" || arts[0].Mode != 0o644 {
		t.Fatalf("Make: %+v, %v", arts, err)
	}
	if again, err := b.Make(context.Background(), f); err != nil || again[0].Path != arts[0].Path || builds != 1 {
		t.Fatalf("Make again: %+v, %v, %d builds", again, err, builds)
	}
}
