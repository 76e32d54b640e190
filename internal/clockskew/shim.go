package clockskew

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

//go:embed shim/clockshim.c
var shimSource []byte

// errNoCompiler reports that no C compiler was found to build the shim.
var errNoCompiler = errors.New("no C compiler found (install gcc or set CC)")

// ShimSource returns the C source of the LD_PRELOAD clock shim.
func ShimSource() []byte { return bytes.Clone(shimSource) }

// ShimCFlags are the compiler flags BuildShim uses (before "-o out src").
var ShimCFlags = []string{"-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror"}

// BuildShim compiles the shim into the shared library outPath with $CC
// (default gcc). Load it into a dynamically linked program with
// LD_PRELOAD=outPath and point $SPLITBRAIN_CLOCK_FILE at a [controlFile].
// The library is written atomically (built beside outPath, then renamed).
func BuildShim(ctx context.Context, outPath string) error {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return fmt.Errorf("build clock shim: %w: %w", errNoCompiler, err)
	}
	dir, err := os.MkdirTemp("", "clockshim-")
	if err != nil {
		return fmt.Errorf("build clock shim: %w", err)
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "clockshim.c")
	if err := os.WriteFile(src, shimSource, 0o644); err != nil {
		return fmt.Errorf("build clock shim: %w", err)
	}
	tmpOut := outPath + ".tmp"
	args := append(append([]string(nil), ShimCFlags...), "-o", tmpOut, src)
	out, err := exec.CommandContext(ctx, cc, args...).CombinedOutput()
	if err != nil {
		os.Remove(tmpOut)
		return fmt.Errorf("build clock shim: %s %v: %w\n%s", cc, args, err, out)
	}
	if err := os.Rename(tmpOut, outPath); err != nil {
		os.Remove(tmpOut)
		return fmt.Errorf("build clock shim: %w", err)
	}
	return nil
}
