package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRunLogOnTerminal: while `run` shows its progress line on a terminal,
// INFO lines stay off it (harness.log has them) unless --log-level asks for
// them; anywhere else the level is --log-level's.
func TestRunLogOnTerminal(t *testing.T) {
	pts := openPTY(t)
	for _, tt := range []struct {
		name string
		w    io.Writer
		args []string
		info bool
	}{
		{"terminal", pts, nil, false},
		{"terminal, asked for", pts, []string{"--log-level", "info"}, true},
		{"pipe", &bytes.Buffer{}, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := newRootCmd(io.Discard, io.Discard)
			cmd, _, err := root.Find([]string{"run"})
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.ParseFlags(tt.args); err != nil {
				t.Fatal(err)
			}
			g := &globalFlags{logLevel: "info"}
			log, err := g.runLogger(cmd, tt.w)
			if err != nil {
				t.Fatal(err)
			}
			if got := log.Enabled(context.Background(), slog.LevelInfo); got != tt.info {
				t.Errorf("INFO enabled %v, want %v", got, tt.info)
			}
			if !log.Enabled(context.Background(), slog.LevelWarn) {
				t.Error("warnings are off")
			}
		})
	}
}

// openPTY opens a pseudo-terminal's slave side (skipping where there are
// none).
func openPTY(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Skipf("ptsname: %v", err)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open pts: %v", err)
	}
	t.Cleanup(func() { pts.Close() })
	return pts
}
