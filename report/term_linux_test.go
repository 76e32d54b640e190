package report

import (
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestProgressTerminalPTY: a pseudo-terminal is a terminal, with a width.
func TestProgressTerminalPTY(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer ptmx.Close()
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
	defer pts.Close()
	if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 77}); err != nil {
		t.Fatal(err)
	}
	if !IsTerminal(pts) {
		t.Error("a pty is not taken for a terminal")
	}
	if w := TerminalWidth(pts); w != 77 {
		t.Errorf("width %d, want 77", w)
	}
}
