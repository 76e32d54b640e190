package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
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
			jerr := dec.Decode(&e)
			if !json.Valid(trimmed) {
				jerr = errors.New("not a JSON object")
			}
			if jerr != nil {
				if !complete && !json.Valid(trimmed) {
					rep.TornTail, rep.TornBytes = true, len(line)
					break
				}
				return events, rep, fmt.Errorf("%w: line %d: %v", ErrCorrupt, lineNo, jerr)
			}
			if k := exactKeys(trimmed); k != "" {
				return events, rep, fmt.Errorf("%w: line %d: unknown field %q", ErrCorrupt, lineNo, k)
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

// exactKeys names a key of the object line that is not exactly one of
// Event's (or, in read and write, Value's) JSON names: encoding/json
// matches names without regard to case.
func exactKeys(line []byte) string {
	names := func(v any) map[string]bool {
		out := map[string]bool{}
		t := reflect.TypeOf(v)
		for i := range t.NumField() {
			out[strings.Split(t.Field(i).Tag.Get("json"), ",")[0]] = true
		}
		return out
	}
	ev, val := names(Event{}), names(Value{})
	var obj map[string]json.RawMessage
	_ = json.Unmarshal(line, &obj)
	for k, raw := range obj {
		if !ev[k] {
			return k
		}
		if k == "read" || k == "write" {
			var in map[string]json.RawMessage
			_ = json.Unmarshal(raw, &in)
			for vk := range in {
				if !val[vk] {
					return k + "." + vk
				}
			}
		}
	}
	return ""
}
