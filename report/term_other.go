//go:build !linux

package report

import (
	"io"
	"os"
)

// IsTerminal reports whether w is a character device (on Linux a terminal
// is told apart from /dev/null by its termios).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// TerminalWidth is the width of terminal w in columns; 0 (unknown) here.
func TerminalWidth(io.Writer) int { return 0 }
