//go:build !linux

package clockskew

import (
	"context"
	"fmt"
	"io"
	"runtime"
)

// Exit codes of HelperMain.
const (
	ExitOK    = 0 // success
	exitOther = 1 // any other failure
	exitUsage = 2 // bad command line
	exitEnv   = 3 // environment or permission
)

// HelperMain reports that clock skew needs Linux: both mechanisms (the
// LD_PRELOAD shim's control file and vDSO injection) are Linux-only.
func HelperMain(_ context.Context, _ []string, _, stderr io.Writer) int {
	fmt.Fprintf(stderr, "clock: %s/%s: clock skew needs Linux (run the helper inside a Linux node)\n", runtime.GOOS, runtime.GOARCH)
	return exitEnv
}
