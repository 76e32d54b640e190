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
	"slices"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/internal/clockskew"
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
// machine's architecture into out.
func GoBuild(ctx context.Context, dir, pkg, out string, progress func(string, ...any)) error {
	start := time.Now()
	progress("go build %s (static, in %s)", pkg, dir)
	tmp := out + ".tmp"
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", tmp, pkg)
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

// splitbrainBinary returns the static splitbrain binary for images: built
// from the source tree (cached by its hash), or this executable when it is
// already static.
func (b *Builder) splitbrainBinary(ctx context.Context) (Artifact, error) {
	art := Artifact{Name: "splitbrain", Dest: "/usr/local/bin/splitbrain"}
	root, ok := b.source()
	if !ok {
		self, err := os.Executable()
		if err != nil || !isStatic(self) {
			return art, ErrNoSource
		}
		art.Path = self
		return art, nil
	}
	var err error
	art.Path, err = b.cachedBuild(ctx, "splitbrain", root, "./cmd/splitbrain")
	return art, err
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
		return path, nil
	}
	if err := GoBuild(ctx, dir, pkg, path, b.progress); err != nil {
		return "", err
	}
	pruneOld(cache, prefix, filepath.Base(path))
	return path, nil
}

// pruneOld removes earlier builds named prefix* other than keep.
func pruneOld(dir, prefix, keep string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if n := e.Name(); strings.HasPrefix(n, prefix) && n != keep && !strings.HasSuffix(n, ".tmp") {
			os.Remove(filepath.Join(dir, n))
		}
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

// EtcdBuildDir is the module that builds etcd, relative to the repository.
const EtcdBuildDir = "targets/etcd/build"

// EtcdBinary is the ArtifactFunc of the etcd image: etcd built from the
// pinned server module in EtcdBuildDir (cached by that module's hash).
func EtcdBinary(ctx context.Context, b *Builder) (Artifact, error) {
	art := Artifact{Name: "etcd", Dest: "/usr/local/bin/etcd"}
	root, ok := b.source()
	if !ok {
		return installed(art)
	}
	var err error
	art.Path, err = b.cachedBuild(ctx, "etcd", filepath.Join(root, EtcdBuildDir), ".")
	return art, err
}

// ClockShim is the ArtifactFunc of the redis image: the LD_PRELOAD clock
// shim (internal/clockskew's C source) compiled on this machine with gcc ($CC)
// into clockskew.ShimPath, cached by the hash of its source, flags, compiler
// and architecture. The image's Debian release is the host's own
// (bookworm), so the library links against the same libc.
func ClockShim(ctx context.Context, b *Builder) (Artifact, error) {
	art := Artifact{Name: "clockshim.so", Dest: clockskew.ShimPath, Mode: 0o644}
	sum := hashStrings(string(clockskew.ShimSource()), strings.Join(clockskew.ShimCFlags, " "), os.Getenv("CC"), runtime.GOARCH)
	cache := filepath.Join(b.CacheDir, "bin")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return art, fmt.Errorf("binary cache: %w", err)
	}
	prefix := "clockshim-" + runtime.GOARCH + "-"
	art.Path = filepath.Join(cache, prefix+sum+".so")
	if _, err := os.Stat(art.Path); err == nil {
		return art, nil
	}
	start := time.Now()
	b.progress("gcc clock shim (%s)", clockskew.ShimPath)
	if err := clockskew.BuildShim(ctx, art.Path); err != nil {
		if inst, ierr := installed(art); ierr == nil {
			return inst, nil // no compiler here, but the control image has it
		}
		return art, err
	}
	b.progress("gcc clock shim: done in %.1fs", time.Since(start).Seconds())
	pruneOld(cache, prefix, filepath.Base(art.Path))
	return art, nil
}

// installed is art as already installed on this machine at its
// destination, as in the control image, which has no source tree.
func installed(art Artifact) (Artifact, error) {
	if _, err := os.Stat(art.Dest); err != nil {
		return art, ErrNoSource
	}
	art.Path = art.Dest
	return art, nil
}
