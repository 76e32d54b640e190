package report

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether w is a terminal (a TTY, not a pipe, a file
// or /dev/null).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// TerminalWidth is w's width in columns, 0 when unknown (not a terminal).
func TerminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}
