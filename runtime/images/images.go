// Package images builds splitbrain's container images without a registry.
//
// The base is Debian bookworm, made by debootstrap and imported with the
// Engine API (or, when the engine already has debian:bookworm-slim, built
// from it with the same packages); it holds only what every node needs.
// Each role image is the base plus the role's own Debian packages
// (installed with apt-get in the role's build), our static splitbrain
// binary and the role's files. Roles are declared elsewhere and registered
// here ([Register]; package targets does it for each backend's roles), so
// this package knows no backend: [PlanRole] says how a role's image is
// made before anything is built, [Builder.Ensure] builds what is missing.
// Every tag is a hash of the image's inputs — the package lists, the
// files' bytes, the Dockerfile — so an image is rebuilt only when
// something it is made of changed, and an unchanged `images build` is a few
// image look-ups.
//
// debootstrap needs root and the debootstrap package; building the base
// takes about 35 s on a 2-core machine, a role image a few seconds (plus
// about 10 s for a role with packages of its own).
package images

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/splitbrain/splitbrain/runtime"
)

// Roles every run has, and the control image; backends register their
// own roles (Register).
const (
	RoleStore  = runtime.RoleStore
	RoleClient = runtime.RoleClient
	// RoleControl is the image docker-compose.yml runs the matrix from:
	// the base with every registered role's files, so that `images build`
	// inside it finds them installed (there is no source tree there) and
	// `run` works.
	RoleControl = "control"
)

// Packages are installed into the base image, which every role shares:
// what fault injection needs in every node (iptables, iproute2, procps),
// the SSH server of the SSH runtime's tests, and a few tools. A role's own
// packages go into its image only (Role.Packages).
var Packages = []string{
	"iptables", "iproute2", "openssh-server", "procps",
	"ca-certificates", "iputils-ping", "netcat-openbsd",
}

// Suite is the Debian release of the base image.
const Suite = "bookworm"

// SlimImage is the registry image used instead of debootstrap when present.
const SlimImage = "debian:bookworm-slim"

// recipeVersion changes when the way images are made changes.
const recipeVersion = "1"

// Errors a build may fail with; each message names the fix.
var (
	// ErrNeedRoot: debootstrap must run as root.
	ErrNeedRoot = errors.New("building the base image with debootstrap needs root (run as root, or load debian:bookworm-slim into the engine)")
	// ErrNoDebootstrap: the debootstrap program is missing.
	ErrNoDebootstrap = errors.New("debootstrap not found (install it: apt-get install -y debootstrap)")
	// ErrNoSource: our binaries cannot be built or found.
	ErrNoSource = errors.New("this splitbrain binary is not static and carries no module version to rebuild it from (build it with CGO_ENABLED=0, install it with go install …/cmd/splitbrain@VERSION, or run it inside the repository)")
)

// Artifact is a file of a role's image, made on this machine: where it
// is, and where it goes.
type Artifact struct {
	// Name is the file's name in the build context.
	Name string
	// Dest is its path in the image.
	Dest string
	// Path is where it is on this machine.
	Path string
	// Mode is its file mode in the image.
	Mode int64
}

// Builder builds images. It serializes concurrent builds on one machine
// with a lock file, so parallel test binaries can all call Ensure.
type Builder struct {
	Client *client.Client
	// CacheDir holds built binaries and the lock file.
	CacheDir string
	// Source is the repository root; empty means: search from the working
	// directory upwards.
	Source string
	// Mirror is the Debian mirror for debootstrap.
	Mirror string
	// Progress gets one line per step.
	Progress io.Writer
	Log      *slog.Logger
}

// NewBuilder returns a Builder with defaults: the user cache directory,
// deb.debian.org (or $SPLITBRAIN_DEBIAN_MIRROR), progress to stderr.
func NewBuilder(cli *client.Client, log *slog.Logger) *Builder {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	mirror := os.Getenv("SPLITBRAIN_DEBIAN_MIRROR")
	if mirror == "" {
		mirror = "http://deb.debian.org/debian"
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Builder{
		Client: cli, CacheDir: filepath.Join(cache, "splitbrain"), Mirror: mirror, Progress: os.Stderr, Log: log,
	}
}

func (b *Builder) progress(format string, args ...any) {
	if b.Progress != nil {
		// Steps run side by side: one whole line at a time.
		progressMu.Lock()
		defer progressMu.Unlock()
		fmt.Fprintf(b.Progress, "images: "+format+"\n", args...)
	}
}

// progressMu keeps the progress lines of steps running side by side whole.
var progressMu sync.Mutex

// buildersAtOnce is how many role images Ensure builds side by side: a
// role image is mostly the engine unpacking the base and apt-get waiting on
// the mirror, so a few overlap well on 2 cores.
const buildersAtOnce = 3

// Ensure makes sure the images of roles exist, building what is missing,
// and returns each role's image tag. The base (debootstrap: the network)
// and the files the images hold (go build: the CPU) are made side by side,
// then the role images, several at a time.
func (b *Builder) Ensure(ctx context.Context, roles []string) (map[string]string, error) {
	plans, err := PlanRoles(roles)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(b.CacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("image cache dir: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(b.CacheDir, "images.lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()

	// Each file once (by destination), whichever roles hold it.
	var files []File
	for _, p := range plans {
		for _, f := range p.Files {
			if !slices.ContainsFunc(files, func(g File) bool { return g.Dest == f.Dest }) {
				files = append(files, f)
			}
		}
	}
	made := make([]Artifact, len(files))
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		// The base's tag is every plan's Base.
		_, err := b.base(gctx)
		return err
	})
	g.Go(func() error {
		for i, f := range files {
			a, err := f.make(gctx, b)
			if err != nil {
				return fmt.Errorf("image file %s: %w", f.Name, err)
			}
			made[i] = a
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	artifact := func(f File) Artifact {
		return made[slices.IndexFunc(files, func(g File) bool { return g.Dest == f.Dest })]
	}

	tags := make([]string, len(plans))
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(buildersAtOnce)
	for i, p := range plans {
		g.Go(func() error {
			var arts []Artifact
			for _, f := range p.Files {
				arts = append(arts, artifact(f))
			}
			tag, err := b.roleImage(gctx, p, arts)
			if err != nil {
				return err
			}
			tags[i] = tag
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i, p := range plans {
		if p.Role == RoleControl {
			// docker-compose.yml names it by a fixed tag.
			if err := b.Client.ImageTag(ctx, tags[i], "splitbrain-control:latest"); err != nil {
				return nil, fmt.Errorf("tag control image: %w", err)
			}
		}
		out[p.Role] = tags[i]
	}
	return out, nil
}

// lockFile takes an exclusive flock on path, waiting until ctx is done.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open image lock: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for image lock: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func hashStrings(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// BaseTag is the base image's tag: a hash of the suite and packages. Both
// ways of building it (debootstrap, bookworm-slim) give the same tag.
func BaseTag() string {
	return "splitbrain-base:" + hashStrings(recipeVersion, Suite, strings.Join(Packages, ","))
}

func (b *Builder) exists(ctx context.Context, ref string) (bool, error) {
	_, err := b.Client.ImageInspect(ctx, ref)
	switch {
	case err == nil:
		return true, nil
	case cerrdefs.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("inspect image %s: %w", ref, err)
	}
}

func (b *Builder) base(ctx context.Context) (string, error) {
	tag := BaseTag()
	ok, err := b.exists(ctx, tag)
	if err != nil || ok {
		if ok {
			b.progress("base %s: up to date", tag)
		}
		return tag, err
	}
	start := time.Now()
	slim, err := b.exists(ctx, SlimImage)
	if err != nil {
		return "", err
	}
	if slim {
		b.progress("base %s: building from %s (apt-get install %s)", tag, SlimImage, strings.Join(Packages, " "))
		df := fmt.Sprintf("FROM %s\nRUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends %s && rm -rf /var/lib/apt/lists/*\nLABEL splitbrain.base=%s\n",
			SlimImage, strings.Join(Packages, " "), SlimImage)
		if err := b.build(ctx, tag, df, nil); err != nil {
			return "", fmt.Errorf("build base from %s: %w", SlimImage, err)
		}
	} else if err := b.debootstrap(ctx, tag); err != nil {
		return "", err
	}
	b.progress("base %s: built in %.1fs", tag, time.Since(start).Seconds())
	return tag, nil
}

func (b *Builder) debootstrap(ctx context.Context, tag string) error {
	if os.Geteuid() != 0 {
		return ErrNeedRoot
	}
	prog, err := exec.LookPath("debootstrap")
	if err != nil {
		return ErrNoDebootstrap
	}
	dir, err := os.MkdirTemp(b.CacheDir, "rootfs-")
	if err != nil {
		return fmt.Errorf("debootstrap dir: %w", err)
	}
	defer os.RemoveAll(dir)
	b.progress("base %s: debootstrap %s from %s (about 35 s)", tag, Suite, b.Mirror)
	cmd := exec.CommandContext(ctx, prog, "--variant=minbase", "--include="+strings.Join(Packages, ","), Suite, dir, b.Mirror)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("debootstrap %s: %w\n%s", Suite, err, tail(out.Bytes(), 2000))
	}
	for _, junk := range []string{"var/cache/apt/archives", "var/lib/apt/lists"} {
		entries, _ := os.ReadDir(filepath.Join(dir, junk))
		for _, e := range entries {
			if e.Name() != "partial" && e.Name() != "lock" {
				os.RemoveAll(filepath.Join(dir, junk, e.Name()))
			}
		}
	}
	b.progress("base %s: importing root file system", tag)
	tarCmd := exec.CommandContext(ctx, "tar", "--numeric-owner", "-C", dir, "-c", ".")
	stdout, err := tarCmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("tar rootfs: %w", err)
	}
	var tarErr bytes.Buffer
	tarCmd.Stderr = &tarErr
	if err := tarCmd.Start(); err != nil {
		return fmt.Errorf("tar rootfs: %w", err)
	}
	rc, err := b.Client.ImageImport(ctx, image.ImportSource{Source: stdout, SourceName: "-"}, tag, image.ImportOptions{
		Changes: []string{
			"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			`CMD ["/bin/bash"]`,
			"LABEL splitbrain.base=debootstrap",
		},
	})
	if err != nil {
		_ = tarCmd.Wait()
		return fmt.Errorf("import base image: %w", err)
	}
	ierr := readStream(rc)
	rc.Close()
	if werr := tarCmd.Wait(); werr != nil {
		return fmt.Errorf("tar rootfs: %w: %s", werr, tarErr.String())
	}
	if ierr != nil {
		return fmt.Errorf("import base image: %w", ierr)
	}
	return nil
}

// roleImage builds p's image as splitbrain-<role>:<hash>, arts being p's
// files made on this machine. The tag hashes the base, the Dockerfile
// (and so the packages) and each file's name, destination and content.
func (b *Builder) roleImage(ctx context.Context, p Plan, arts []Artifact) (string, error) {
	df := p.Dockerfile()
	parts := []string{recipeVersion, p.Role, p.Base}
	for _, a := range arts {
		sum, err := fileHash(a.Path)
		if err != nil {
			return "", fmt.Errorf("image %s: %w", p.Role, err)
		}
		parts = append(parts, a.Name, a.Dest, sum)
	}
	parts = append(parts, df)
	tag := "splitbrain-" + p.Role + ":" + hashStrings(parts...)
	ok, err := b.exists(ctx, tag)
	if err != nil {
		return "", err
	}
	if ok {
		b.progress("%s %s: up to date", p.Role, tag)
		return tag, nil
	}
	start := time.Now()
	if len(p.Packages) > 0 {
		b.progress("%s %s: building (apt-get install %s)", p.Role, tag, strings.Join(p.Packages, " "))
	}
	if err := b.build(ctx, tag, df, arts); err != nil {
		return "", fmt.Errorf("build image %s: %w", p.Role, err)
	}
	b.progress("%s %s: built in %.1fs", p.Role, tag, time.Since(start).Seconds())
	return tag, nil
}

// build runs a classic-builder build of dockerfile with arts as context.
func (b *Builder) build(ctx context.Context, tag, dockerfile string, arts []Artifact) error {
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(writeContext(pw, dockerfile, arts))
	}()
	resp, err := b.Client.ImageBuild(ctx, pr, build.ImageBuildOptions{
		Tags: []string{tag}, Remove: true, ForceRemove: true, Dockerfile: "Dockerfile",
		Version: build.BuilderV1,
	})
	if err != nil {
		pr.CloseWithError(err)
		return fmt.Errorf("image build: %w", err)
	}
	defer resp.Body.Close()
	return readStream(resp.Body)
}

func writeContext(w io.Writer, dockerfile string, arts []Artifact) error {
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile)), ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	if _, err := io.WriteString(tw, dockerfile); err != nil {
		return err
	}
	for _, a := range arts {
		f, err := os.Open(a.Path)
		if err != nil {
			return fmt.Errorf("build context: %w", err)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		mode := a.Mode
		if mode == 0 {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: a.Name, Mode: mode, Size: st.Size(), ModTime: time.Unix(0, 0)}); err != nil {
			f.Close()
			return err
		}
		_, err = io.Copy(tw, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// readStream drains a JSON message stream and returns the first error it
// reports.
func readStream(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && (m.Error != "" || m.ErrorDetail.Message != "") {
			return errors.New(strings.TrimSpace(m.Error + " " + m.ErrorDetail.Message))
		}
	}
	return sc.Err()
}

func fileHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
