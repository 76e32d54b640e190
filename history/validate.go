package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// LineError says what is wrong with a history and where: the line (1-based,
// counting blank lines) and, when one field is at fault, its name as the
// history spells it ("t", "read.value"). It wraps [ErrCorrupt].
type LineError struct {
	Line  int
	Field string
	Msg   string
}

func (e *LineError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%v: line %d: %s", ErrCorrupt, e.Line, e.Msg)
	}
	return fmt.Sprintf("%v: line %d, field %q: %s", ErrCorrupt, e.Line, e.Field, e.Msg)
}

// Unwrap makes errors.Is(err, ErrCorrupt) hold.
func (e *LineError) Unwrap() error { return ErrCorrupt }

// fieldError is a LineError before its line is known.
type fieldError struct {
	field, msg string
}

func bad(field, format string, args ...any) *fieldError {
	return &fieldError{field: field, msg: fmt.Sprintf(format, args...)}
}

func (e *fieldError) Error() string {
	if e.field == "" {
		return e.msg
	}
	return fmt.Sprintf("field %q: %s", e.field, e.msg)
}

func (e *fieldError) at(line int) *LineError {
	return &LineError{Line: line, Field: e.field, Msg: e.msg}
}

// FieldNames returns the names of an event's fields as a history spells
// them, in Event's order; docs/history.schema.json lists the same.
func FieldNames() []string { return slices.Clone(eventFields) }

// ValueFieldNames returns the names of a read or written value's fields.
func ValueFieldNames() []string { return slices.Clone(valueFields) }

var (
	eventFields = jsonNames(reflect.TypeFor[Event]())
	valueFields = jsonNames(reflect.TypeFor[Value]())
)

func jsonNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// unknownField names the first field of line (a JSON object) that an event
// does not have, also inside "read" and "write" (names match exactly: JSON
// is case-sensitive, whatever encoding/json forgives); false when there is
// none or line is not an object.
func unknownField(line []byte) (string, bool) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(line, &obj) != nil {
		return "", false
	}
	names := make([]string, 0, len(obj))
	for k := range obj {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if !slices.Contains(eventFields, k) {
			return k, true
		}
		if k != "read" && k != "write" {
			continue
		}
		var v map[string]json.RawMessage
		if json.Unmarshal(obj[k], &v) != nil {
			continue // null, or not an object: encoding/json says so
		}
		for vk := range v {
			if !slices.Contains(valueFields, vk) {
				return k + "." + vk, true
			}
		}
	}
	return "", false
}

// decodeStrict decodes one line with encoding/json, refusing fields an
// event does not have. syntax is true when the line is not JSON at all
// (only such a last line can be a torn tail).
func decodeStrict(line []byte, e *Event) (err error, syntax bool) {
	line = bytes.TrimSpace(line)
	if !json.Valid(line) {
		return fmt.Errorf("not a JSON object"), true
	}
	if f, ok := unknownField(line); ok {
		return bad(f, "unknown field (known: %s)", strings.Join(eventFields, ", ")), false
	}
	*e = Event{}
	if err := json.Unmarshal(line, e); err != nil {
		var te *json.UnmarshalTypeError
		if ok := asTypeError(err, &te); ok {
			return bad(te.Field, "want a JSON %s, got %s", te.Type.Kind(), te.Value), false
		}
		return err, false
	}
	return nil, false
}

func asTypeError(err error, target **json.UnmarshalTypeError) bool {
	te, ok := err.(*json.UnmarshalTypeError)
	if ok {
		*target = te
	}
	return ok
}

// validate checks one event on its own: its type, and that it carries only
// the fields its kind has and every field they need, consistent with each
// other (a critical section writes what it read plus one, tagged with its
// id).
func validate(e Event) *fieldError {
	if e.Time < 0 {
		return bad("t", "negative time %d", e.Time)
	}
	switch e.Type {
	case Invoke, OK, Fail, Info:
	case Nemesis:
		return validateNemesis(e)
	case "":
		return bad("type", "missing (want invoke, ok, fail, info or nemesis)")
	default:
		return bad("type", "unknown event type %q (want invoke, ok, fail, info or nemesis)", e.Type)
	}
	if e.ID <= 0 {
		return bad("id", "an operation needs a positive id, got %d", e.ID)
	}
	if e.Process < 0 {
		return bad("process", "an operation's process is 0 or more, got %d", e.Process)
	}
	if e.F != FCriticalSection && e.F != FRead {
		return bad("f", "unknown operation %q (want %q or %q)", e.F, FCriticalSection, FRead)
	}
	if e.Key == "" {
		return bad("key", "an operation needs the key it works on")
	}
	if f := nemesisOnly(e); f != "" {
		return bad(f, "only fault (nemesis) events have it")
	}
	if e.Type == Invoke {
		if f := completionOnly(e); f != "" {
			return bad(f, "an invocation says only what is asked (f, key, process, client, fenced, bypass); outcomes go on its completion")
		}
		return nil
	}
	for _, n := range []struct {
		name string
		v    int64
	}{{"acquired", e.Acquired}, {"released", e.Released}, {"write_at", e.WriteAt}, {"wait", e.Wait}, {"hold", e.Hold}, {"renew_failures", int64(e.RenewFailures)}} {
		if n.v < 0 {
			return bad(n.name, "negative (%d)", n.v)
		}
	}
	if e.Type == OK && e.Error != "" {
		return bad("error", "an ok operation has no error (%q)", e.Error)
	}
	if e.F == FRead {
		switch {
		case e.Write != nil:
			return bad("write", "a read writes nothing")
		case e.Type == OK && e.Read == nil:
			return bad("read", "an ok read must record the value it read")
		case e.Type != OK && e.Read != nil:
			return bad("read", "a %s read has no value", e.Type)
		}
		return nil
	}
	switch {
	case e.Type == OK && e.Read == nil:
		return bad("read", "an ok critical section must record the value it read")
	case e.Type == OK && e.Write == nil:
		return bad("write", "an ok critical section must record the value it wrote")
	case e.Write != nil && e.Read == nil:
		return bad("read", "a critical section that wrote must record the value it read")
	}
	if w := e.Write; w != nil {
		if w.Tag != e.ID {
			return bad("write.tag", "a write is tagged with its operation's id %d, got %d", e.ID, w.Tag)
		}
		if w.Value != e.Read.Value+1 {
			return bad("write.value", "a critical section writes what it read plus one (%d), got %d", e.Read.Value+1, w.Value)
		}
	}
	return nil
}

func validateNemesis(e Event) *fieldError {
	switch {
	case e.F == "":
		return bad("f", "a fault event names its fault (e.g. \"pause\")")
	case e.Phase != PhaseStart && e.Phase != PhaseEnd && e.Phase != PhaseError:
		return bad("phase", "want %q, %q or %q, got %q", PhaseStart, PhaseEnd, PhaseError, e.Phase)
	case e.ID != 0:
		return bad("id", "a fault event has no id")
	case e.Process != -1 && e.Process != 0:
		return bad("process", "a fault event's process is -1 (or absent), got %d", e.Process)
	}
	if f := completionOnly(e); f != "" {
		return bad(f, "a fault event has no operation fields")
	}
	if e.Key != "" || e.Fenced || e.Bypass || e.Client != "" {
		return bad(opFieldName(e), "a fault event has no operation fields")
	}
	return nil
}

func opFieldName(e Event) string {
	switch {
	case e.Key != "":
		return "key"
	case e.Fenced:
		return "fenced"
	case e.Bypass:
		return "bypass"
	}
	return "client"
}

// nemesisOnly names a fault-only field set on e, "" if none.
func nemesisOnly(e Event) string {
	switch {
	case e.Phase != "":
		return "phase"
	case e.Targets != nil:
		return "targets"
	case e.Detail != "":
		return "detail"
	}
	return ""
}

// completionOnly names a completion-only field set on e, "" if none.
func completionOnly(e Event) string {
	switch {
	case e.Token != 0:
		return "token"
	case e.Read != nil:
		return "read"
	case e.Write != nil:
		return "write"
	case e.Error != "":
		return "error"
	case e.Message != "":
		return "msg"
	case e.ReleaseError != "":
		return "release_error"
	case e.Acquired != 0:
		return "acquired"
	case e.Released != 0:
		return "released"
	case e.WriteAt != 0:
		return "write_at"
	case e.Wait != 0:
		return "wait"
	case e.Hold != 0:
		return "hold"
	case e.RenewFailures != 0:
		return "renew_failures"
	}
	return ""
}

// checkSequence checks the events together: time order, one invocation per
// id, each completion after its own invocation and naming the same
// operation, and no process with two operations in flight. lineNo[i] is
// event i's line.
func checkSequence(events []Event, lineNo []int) error {
	type opState struct {
		invoke, complete int32 // event indexes; complete -1 while in flight
	}
	states := make([]opState, 0, len(events)/2+1)
	var hiID, hiProcess int64
	invocations := 0
	for i := range events {
		if events[i].Type == Invoke {
			hiID, hiProcess = max(hiID, events[i].ID), max(hiProcess, int64(events[i].Process))
			invocations++
		}
	}
	// id → index+1 in states; process → index+1 in states of its
	// operation in flight (0: none).
	ops := NewIDTable[int32](invocations, hiID)
	inFlight := NewIDTable[int32](invocations, hiProcess)
	// Ids invoked later, for "completion before its invocation".
	invokedAt := func(id int64, from int) int {
		for j := from; j < len(events); j++ {
			if events[j].Type == Invoke && events[j].ID == id {
				return j
			}
		}
		return -1
	}
	var last int64
	for i := range events {
		e := &events[i]
		line := lineNo[i]
		if e.Type != Invoke && e.IsCompletion() {
			var st *opState
			if si := ops.Get(e.ID); si > 0 {
				st = &states[si-1]
			}
			switch {
			case st == nil:
				if j := invokedAt(e.ID, i+1); j >= 0 {
					return bad("id", "the completion of id %d comes before its invocation (line %d)", e.ID, lineNo[j]).at(line)
				}
				return bad("id", "the completion of id %d has no invocation", e.ID).at(line)
			case st.complete >= 0:
				return bad("id", "id %d was completed already on line %d", e.ID, lineNo[st.complete]).at(line)
			}
			inv := &events[st.invoke]
			if e.F != inv.F || e.Key != inv.Key || e.Process != inv.Process {
				for _, f := range []struct {
					name        string
					got, wanted string
				}{{"f", e.F, inv.F}, {"key", e.Key, inv.Key}, {"process", fmt.Sprint(e.Process), fmt.Sprint(inv.Process)}} {
					if f.got != f.wanted {
						return bad(f.name, "the completion of id %d says %q, its invocation (line %d) %q", e.ID, f.got, lineNo[st.invoke], f.wanted).at(line)
					}
				}
			}
			if e.Client != "" && inv.Client != "" && e.Client != inv.Client {
				return bad("client", "the completion of id %d says %q, its invocation (line %d) %q", e.ID, e.Client, lineNo[st.invoke], inv.Client).at(line)
			}
			if e.Time < inv.Time {
				return bad("t", "the completion of id %d at %d is before its invocation at %d (line %d)", e.ID, e.Time, inv.Time, lineNo[st.invoke]).at(line)
			}
			st.complete = int32(i)
			inFlight.Set(int64(e.Process), 0)
		}
		if e.Time < last {
			return bad("t", "%d is before the previous event's %d: events must be in time order", e.Time, last).at(line)
		}
		last = e.Time
		if e.Type != Invoke {
			continue
		}
		if si := ops.Get(e.ID); si > 0 {
			return bad("id", "id %d was invoked already on line %d (ids are unique)", e.ID, lineNo[states[si-1].invoke]).at(line)
		}
		if si := inFlight.Get(int64(e.Process)); si > 0 {
			busyInv := states[si-1].invoke
			return bad("process", "process %d invokes id %d while its id %d (line %d) has not completed; a process runs one operation at a time",
				e.Process, e.ID, events[busyInv].ID, lineNo[busyInv]).at(line)
		}
		ops.Set(e.ID, int32(len(states))+1)
		inFlight.Set(int64(e.Process), int32(len(states))+1)
		states = append(states, opState{invoke: int32(i), complete: -1})
	}
	return nil
}
