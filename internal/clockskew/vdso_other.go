//go:build linux && !amd64

package clockskew

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
)

func archSupported() error {
	return fmt.Errorf("%s/%s: %w", runtime.GOOS, runtime.GOARCH, errUnsupportedArch)
}

func archJump(uint64) []byte { return nil }

func archInject(context.Context, int, *options) (*vdsoSkew, error) { return nil, archSupported() }

func archRestore(context.Context, *vdsoSkew) error { return archSupported() }

func archNow(context.Context, *vdsoSkew) (skewReading, error) { return skewReading{}, archSupported() }

func archWithTracer(context.Context, int, *slog.Logger, func(*procMem) error) error {
	return archSupported()
}
