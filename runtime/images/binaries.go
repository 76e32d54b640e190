package images

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

// ModulePath is splitbrain's Go module path.
const ModulePath = "github.com/splitbrain/splitbrain"

// FindSource returns the repository root: the nearest directory at or
// above dir whose go.mod declares ModulePath.
func FindSource(dir string) (string, bool) {
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			first, _, _ := bytes.Cut(bytes.TrimSpace(b), []byte("\n"))
			if string(bytes.TrimSpace(first)) == "module "+ModulePath {
				return dir, true
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

func (b *Builder) source() (string, bool) {
	if b.Source != "" {
		return b.Source, true
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", false
	}
	return FindSource(wd)
}

// TreeHash hashes the files under root that a Go build of it may read
// (sources and embedded files; not tests, Markdown, docs, test data,
// results, hidden or nested-module directories). skip lists extra
// directories (relative to root) to leave out.
func TreeHash(root string, skip ...string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			name := d.Name()
			if strings.HasPrefix(name, ".") || name == "testdata" || name == "results" || name == "docs" || slices.Contains(skip, rel) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
			return nil
		}
		name := d.Name()
		if strings.HasSuffix(name, "_test.go") || strings.HasSuffix(name, ".md") || !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		fmt.Fprintf(h, "%s\x00", filepath.ToSlash(rel))
		_, err = io.Copy(h, f)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("hash source %s: %w", root, err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// GoBuild builds pkg of the module at dir as a static linux binary for this
// machine's architecture into out; xvars are string variables set at link
// time (-ldflags -X "import/path.name=value").
func GoBuild(ctx context.Context, dir, pkg, out string, progress func(string, ...any), xvars ...string) error {
	start := time.Now()
	progress("go build %s (static, in %s)", pkg, dir)
	tmp := out + ".tmp"
	ldflags := "-s -w"
	for _, x := range xvars {
		if strings.ContainsAny(x, " \t'\"") {
			return fmt.Errorf("go build %s: -X %q: want no spaces or quotes", pkg, x)
		}
		ldflags += " -X " + x
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags="+ldflags, "-o", tmp, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		if _, lerr := exec.LookPath("go"); lerr != nil {
			return fmt.Errorf("go build %s: the Go toolchain is not on PATH (install Go 1.26): %w", pkg, lerr)
		}
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, tail(buf.Bytes(), 4000))
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	progress("go build %s: done in %.1fs", pkg, time.Since(start).Seconds())
	return nil
}

// splitbrainBinary is Self's Make: the static splitbrain binary built from
// the source tree (cached by its hash), or this executable when it is
// already static and there is no tree.
func (b *Builder) splitbrainBinary(ctx context.Context) (string, error) {
	root, ok := b.source()
	if !ok {
		if self, err := os.Executable(); err == nil && isStatic(self) {
			return self, nil
		}
		// Installed with `go install …@version` (with cgo, so not
		// static): the same version, built static.
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Path != "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return b.installVersion(ctx, "splitbrain", bi.Path, bi.Main.Version)
		}
		return "", ErrNoSource
	}
	return b.cachedBuild(ctx, "splitbrain", root, "./cmd/splitbrain")
}

// installVersion builds pkg at module version static with `go install`
// into the binary cache as name-<arch>-<version>, unless it is there.
func (b *Builder) installVersion(ctx context.Context, name, pkg, version string) (string, error) {
	cache := filepath.Join(b.CacheDir, "bin")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("binary cache: %w", err)
	}
	path := filepath.Join(cache, name+"-"+runtime.GOARCH+"-"+strings.ReplaceAll(version, "/", "_"))
	if _, err := os.Stat(path); err == nil {
		touch(path)
		return path, nil
	}
	gobin, err := os.MkdirTemp(cache, name+"-install-")
	if err != nil {
		return "", fmt.Errorf("binary cache: %w", err)
	}
	defer os.RemoveAll(gobin)
	b.progress("go install %s@%s (static)", pkg, version)
	cmd := exec.CommandContext(ctx, "go", "install", "-trimpath", "-ldflags=-s -w", pkg+"@"+version)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOBIN="+gobin)
	if out, err := cmd.CombinedOutput(); err != nil {
		if _, lerr := exec.LookPath("go"); lerr != nil {
			return "", fmt.Errorf("this splitbrain binary is not static, and the static one its containers run is built with the Go toolchain, which is not on PATH (install Go 1.26, or install splitbrain with CGO_ENABLED=0): %w", lerr)
		}
		return "", fmt.Errorf("go install %s@%s: %w\n%s", pkg, version, err, tail(out, 4000))
	}
	if err := os.Rename(filepath.Join(gobin, filepath.Base(pkg)), path); err != nil {
		return "", fmt.Errorf("go install %s@%s: %w", pkg, version, err)
	}
	return path, nil
}

// cachedBuild builds pkg of the module at dir into the binary cache as
// name-<arch>-<hash of dir>, unless that file exists, and removes older
// builds of name.
func (b *Builder) cachedBuild(ctx context.Context, name, dir, pkg string) (string, error) {
	sum, err := TreeHash(dir)
	if err != nil {
		return "", err
	}
	cache := filepath.Join(b.CacheDir, "bin")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("binary cache: %w", err)
	}
	prefix := name + "-" + runtime.GOARCH + "-"
	path := filepath.Join(cache, prefix+sum)
	if _, err := os.Stat(path); err == nil {
		touch(path)
		return path, nil
	}
	if err := GoBuild(ctx, dir, pkg, path, b.progress); err != nil {
		return "", err
	}
	pruneOld(cache, prefix, filepath.Base(path))
	return path, nil
}

// keepUnused is how long a cached build nobody asked for stays: several
// source trees on one machine (git worktrees, a copy being measured) each
// have their own build, and each tree's runs find theirs again.
const keepUnused = time.Hour

// touch marks a cached build as used now.
func touch(path string) {
	now := time.Now()
	_ = os.Chtimes(path, now, now)
}

// pruneOld removes earlier builds named prefix* other than keep that no
// one has used for keepUnused.
func pruneOld(dir, prefix, keep string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		n := e.Name()
		if !strings.HasPrefix(n, prefix) || n == keep || strings.HasSuffix(n, ".tmp") {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) < keepUnused {
			continue
		}
		os.Remove(filepath.Join(dir, n))
	}
}

// isStatic reports whether the ELF file at path has no program interpreter.
func isStatic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// ModuleDir is directory dir of fsys, the files of a module of our own
// that a package embeds for [GoModule]:
//
//	//go:embed build/go.mod.in build/go.sum.in build/main.go
//	var module embed.FS
//	var File = images.GoModule("etcd", images.ModuleDir(module, "build"), ".", Binary)
//
// It panics when dir is not a directory of fsys: the embed pattern names
// it, so its absence is a programming error, seen on the binary's start.
func ModuleDir(fsys fs.FS, dir string) fs.FS {
	if info, err := fs.Stat(fsys, dir); err != nil || !info.IsDir() {
		panic(fmt.Sprintf("images: embedded module %q: not a directory of the embedded files (%v)", dir, err))
	}
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(fmt.Sprintf("images: embedded module %q: %v", dir, err))
	}
	return sub
}

// GoModule is a file built with `go build` (static, for this machine's
// architecture) of package pkg of the Go module whose files src holds,
// embedded in the binary: a module of its own, such as a pinned server
// release, so that it is built from its pinned versions wherever splitbrain
// runs, with no source tree. Its go.mod and go.sum are stored as go.mod.in
// and go.sum.in (a directory with a go.mod cannot be embedded) and its Go
// files carry `//go:build ignore` (so that splitbrain's own module neither
// builds them nor requires their dependencies); both are undone in the
// build directory. It is cached by the hash of src. Without the Go
// toolchain, the copy installed at dest (as in the control image) is used,
// else the error says what is missing.
func GoModule(name string, src fs.FS, pkg, dest string) File {
	return GoModuleStamped(name, src, pkg, dest)
}

// GoModuleStamped is [GoModule] with string variables set at link time,
// each "import/path.name=value" (`-ldflags -X`): the version a release's
// own build scripts stamp into it (k8s.io/component-base/version's, say).
// They are part of the cache key.
func GoModuleStamped(name string, src fs.FS, pkg, dest string, xvars ...string) File {
	return File{Name: name, Dest: dest, Make: func(ctx context.Context, b *Builder) (string, error) {
		files, sum, err := moduleFiles(src)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		if len(xvars) > 0 {
			sum = hashStrings(append([]string{sum}, xvars...)...)
		}
		cache := filepath.Join(b.CacheDir, "bin")
		if err := os.MkdirAll(cache, 0o755); err != nil {
			return "", fmt.Errorf("binary cache: %w", err)
		}
		prefix := name + "-" + runtime.GOARCH + "-"
		path := filepath.Join(cache, prefix+sum)
		if _, err := os.Stat(path); err == nil {
			touch(path)
			return path, nil
		}
		dir, err := os.MkdirTemp(cache, name+"-module-")
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		defer os.RemoveAll(dir)
		for rel, body := range files {
			p := filepath.Join(dir, filepath.FromSlash(rel))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return "", fmt.Errorf("%s: %w", name, err)
			}
			if err := os.WriteFile(p, body, 0o644); err != nil {
				return "", fmt.Errorf("%s: %w", name, err)
			}
		}
		if err := GoBuild(ctx, dir, pkg, path, b.progress, xvars...); err != nil {
			if inst, ierr := installed(dest); ierr == nil {
				return inst, nil
			}
			return "", fmt.Errorf("%s is built from its pinned module (%s) with the Go toolchain: %w", name, modulePath(files["go.mod"]), err)
		}
		pruneOld(cache, prefix, filepath.Base(path))
		return path, nil
	}}
}

// moduleFiles reads the module in src as it is written out for a build
// (go.mod.in as go.mod, Go files without their leading `//go:build
// ignore`), with a hash of it all.
func moduleFiles(src fs.FS) (map[string][]byte, string, error) {
	files := map[string][]byte{}
	h := sha256.New()
	err := fs.WalkDir(src, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(src, path)
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(path, ".in")
		if strings.HasSuffix(name, ".go") {
			body = bytes.TrimPrefix(body, []byte("//go:build ignore\n"))
		}
		files[name] = body
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(body))
		h.Write(body)
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	if _, ok := files["go.mod"]; !ok {
		return nil, "", fmt.Errorf("embedded module has no go.mod.in")
	}
	return files, hex.EncodeToString(h.Sum(nil))[:16], nil
}

// modulePath is the first requirement of a go.mod: the pinned release a
// module of ours is built from.
func modulePath(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) == 2 && strings.Contains(f[0], ".") && strings.HasPrefix(f[1], "v") && strings.HasPrefix(strings.TrimSpace(line), "require ") {
			return f[0] + " " + f[1]
		}
	}
	return "its go.mod"
}

// BuiltFile is a file made on this machine by build (which writes the file
// named out), cached under a hash of inputs() and the architecture: it is
// rebuilt only when an input changes. When build fails and a copy is
// installed at dest (the control image, which has no compiler), that copy
// is used.
func BuiltFile(name, dest string, mode int64, inputs func() []string, build func(ctx context.Context, out string) error) File {
	return File{Name: name, Dest: dest, Mode: mode, Make: func(ctx context.Context, b *Builder) (string, error) {
		sum := hashStrings(append(inputs(), runtime.GOARCH)...)
		cache := filepath.Join(b.CacheDir, "bin")
		if err := os.MkdirAll(cache, 0o755); err != nil {
			return "", fmt.Errorf("binary cache: %w", err)
		}
		ext := filepath.Ext(name)
		prefix := strings.TrimSuffix(name, ext) + "-" + runtime.GOARCH + "-"
		path := filepath.Join(cache, prefix+sum+ext)
		if _, err := os.Stat(path); err == nil {
			touch(path)
			return path, nil
		}
		start := time.Now()
		b.progress("build %s (%s)", name, dest)
		tmp := path + ".tmp"
		err := build(ctx, tmp)
		if err == nil {
			err = os.Rename(tmp, path)
		}
		if err != nil {
			os.Remove(tmp)
			if inst, ierr := installed(dest); ierr == nil {
				return inst, nil
			}
			return "", fmt.Errorf("build %s: %w", name, err)
		}
		b.progress("build %s: done in %.1fs", name, time.Since(start).Seconds())
		pruneOld(cache, prefix, filepath.Base(path))
		return path, nil
	}}
}

// installed is the path of a file already installed on this machine at
// its destination, as in the control image, which has no source tree.
func installed(dest string) (string, error) {
	if _, err := os.Stat(dest); err != nil {
		return "", ErrNoSource
	}
	return dest, nil
}
