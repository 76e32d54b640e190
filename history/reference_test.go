package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// referenceRead is the plain line-by-line reader with encoding/json that
// Parse must agree with.
func referenceRead(r io.Reader) ([]Event, ReadReport, error) {
	var (
		events []Event
		lines  []int
		rep    ReadReport
	)
	br := bufio.NewReader(r)
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return events, rep, err
		}
		complete := len(line) > 0 && line[len(line)-1] == '\n'
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			var e Event
			dec := json.NewDecoder(bytes.NewReader(trimmed))
			dec.DisallowUnknownFields()
			if jerr := dec.Decode(&e); jerr != nil || dec.More() {
				if !complete && !json.Valid(trimmed) {
					rep.TornTail, rep.TornBytes = true, len(line)
					break
				}
				return events, rep, fmt.Errorf("%w: line %d: %v", ErrCorrupt, lineNo, jerr)
			}
			if verr := validate(e); verr != nil {
				return events, rep, fmt.Errorf("%w: line %d: %v", ErrCorrupt, lineNo, verr)
			}
			events = append(events, e)
			lines = append(lines, lineNo)
		}
		if errors.Is(err, io.EOF) {
			break
		}
	}
	if err := checkSequence(events, lines); err != nil {
		return nil, rep, err
	}
	rep.Events = len(events)
	return events, rep, nil
}
