//go:build linux && !amd64

package clock

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
)

func archSupported() error {
	return fmt.Errorf("%s/%s: %w", runtime.GOOS, runtime.GOARCH, ErrUnsupportedArch)
}

func archJump(uint64) []byte { return nil }

func archInject(context.Context, int, *options) (*Skew, error) { return nil, archSupported() }

func archRestore(context.Context, *Skew) error { return archSupported() }

func archNow(context.Context, *Skew) (Reading, error) { return Reading{}, archSupported() }

func archWithTracer(context.Context, int, *slog.Logger, func(*procMem) error) error {
	return archSupported()
}
