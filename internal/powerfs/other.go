//go:build !linux

package powerfs

import (
	"context"
	"fmt"
	"io"
)

// ExitOK is Main's exit code on success.
const ExitOK = 0

// Main reports that powerfs runs on Linux only.
func Main(_ context.Context, _ []string, _, stderr io.Writer) int {
	fmt.Fprintln(stderr, "powerfs: Linux only (FUSE)")
	return 3
}
