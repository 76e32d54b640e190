package images

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"testing"
	"testing/fstest"
)

// TestGoModule: an embedded module of our own (go.mod.in, a Go file
// behind `//go:build ignore`) is written out and built static with the Go
// toolchain, from any working directory, cached by its contents; without
// the toolchain the error names the module and what is missing.
func TestGoModule(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no Go toolchain")
	}
	t.Chdir(t.TempDir()) // no source tree around
	src := fstest.MapFS{
		"go.mod.in": {Data: []byte("module example.com/hello\n\ngo 1.26.0\n")},
		"main.go":   {Data: []byte("//go:build ignore\n\npackage main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from the module\") }\n")},
	}
	b := &Builder{CacheDir: t.TempDir()}
	f := GoModule("hello", src, ".", "/usr/local/bin/hello-not-installed")
	bin, err := f.Make(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin).Output()
	if err != nil || string(out) != "hello from the module\n" {
		t.Fatalf("built binary: %q %v", out, err)
	}
	if !isStatic(bin) {
		t.Errorf("%s is not static", bin)
	}
	if again, err := f.Make(context.Background(), b); err != nil || again != bin {
		t.Fatalf("second Make: %s %v, want the cached %s", again, err, bin)
	}
	entries, _ := os.ReadDir(b.CacheDir + "/bin")
	if len(entries) != 1 {
		t.Errorf("cache holds %d entries, want the binary alone (the build directory removed)", len(entries))
	}

	// Changed contents: another build.
	src["main.go"] = &fstest.MapFile{Data: []byte("//go:build ignore\n\npackage main\n\nfunc main() {}\n")}
	if other, err := f.Make(context.Background(), b); err != nil || other == bin {
		t.Fatalf("changed module: %s %v", other, err)
	}

	// No toolchain, nothing installed: one line naming what is missing.
	t.Setenv("PATH", t.TempDir())
	src["main.go"] = &fstest.MapFile{Data: []byte("//go:build ignore\n\npackage main\n\nfunc main() { println() }\n")}
	src["go.mod.in"] = &fstest.MapFile{Data: []byte("module example.com/hello\n\ngo 1.26.0\n\nrequire example.com/pinned v1.2.3\n")}
	_, err = f.Make(context.Background(), b)
	if err == nil || !strings.Contains(err.Error(), "hello is built from its pinned module (example.com/pinned v1.2.3) with the Go toolchain") ||
		!strings.Contains(err.Error(), "not on PATH") {
		t.Fatalf("without go: %v", err)
	}
}

// TestModuleDir: the directory an embed pattern names is the module's
// root; a directory that is not there, or a file, panics naming it.
func TestModuleDir(t *testing.T) {
	files := fstest.MapFS{
		"build/go.mod.in": {Data: []byte("module example.com/m\n")},
		"build/main.go":   {Data: []byte("//go:build ignore\n\npackage main\n")},
	}
	for _, tc := range []struct {
		dir       string
		wantPanic bool
	}{
		{"build", false},
		{"missing", true},
		{"build/main.go", true},
		{"../build", true},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			defer func() {
				r := recover()
				if (r != nil) != tc.wantPanic {
					t.Fatalf("ModuleDir(%q): panic %v, want a panic: %v", tc.dir, r, tc.wantPanic)
				}
				if r != nil && !strings.Contains(fmt.Sprint(r), tc.dir) {
					t.Errorf("panic %q does not name %q", r, tc.dir)
				}
			}()
			sub := ModuleDir(files, tc.dir)
			if _, err := fs.Stat(sub, "go.mod.in"); err != nil {
				t.Errorf("go.mod.in in %s: %v", tc.dir, err)
			}
		})
	}
}
