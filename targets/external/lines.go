package external

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// maxLine bounds one line of an adapter's output; a reply is a short JSON
// object.
const maxLine = 1 << 20

// errLongLine is what an adapter wrote when a line outgrew maxLine.
var errLongLine = fmt.Errorf("a line longer than %d MiB on stdout, which is not a reply (a reply is one short JSON object; print logs to stderr)", maxLine>>20)

// lineReader reads lines of at most maxLine bytes. Unlike bufio.Scanner it
// goes on after a longer one: that line is skipped to its end and reported
// once, and the lines after it are read as usual.
type lineReader struct {
	br   *bufio.Reader
	line []byte
	err  error
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10)}
}

// next reads the next line (without its newline) into l.line, or a too
// long line's error into l.err; false at the end of the input.
func (l *lineReader) next() bool {
	l.line, l.err = l.line[:0], nil
	for {
		chunk, err := l.br.ReadSlice('\n')
		if l.err == nil {
			if len(l.line)+len(chunk) > maxLine+1 {
				l.err, l.line = errLongLine, l.line[:0]
			} else {
				l.line = append(l.line, chunk...)
			}
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil && len(l.line) == 0 && l.err == nil:
			return false // the end, nothing pending
		}
		l.line = bytes.TrimRight(l.line, "\r\n")
		return true
	}
}
