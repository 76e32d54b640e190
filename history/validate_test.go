package history

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestMalformed: every way a history can be wrong is refused with the line
// and the field named, never judged.
func TestMalformed(t *testing.T) {
	for _, tt := range malformedCases {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(strings.Join(tt.lines, "\n") + "\n")
			_, _, err := Parse(data)
			var le *LineError
			if !errors.As(err, &le) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err %v, want a LineError", err)
			}
			if le.Line != tt.line || le.Field != tt.field {
				t.Fatalf("line %d field %q, want line %d field %q (%v)", le.Line, le.Field, tt.line, tt.field, err)
			}
			// The reference reader refuses it too.
			if _, _, rerr := referenceRead(strings.NewReader(string(data))); rerr == nil {
				t.Fatalf("the reference reader accepts it")
			}
		})
	}
}

const (
	inv = `{"t":1,"type":"invoke","process":0,"id":1,"f":"cs","key":"k0"}`
	ok  = `{"t":5,"type":"ok","process":0,"id":1,"f":"cs","key":"k0","read":{"value":0,"tag":0},"write":{"value":1,"tag":1}}`
)

// malformedCases are histories refused at line, field.
var malformedCases = []struct {
	name  string
	lines []string
	line  int
	field string
}{
	{"misspelt field", []string{`{"t":1,"type":"invoke","process":0,"id":1,"f":"cs","kye":"k0"}`}, 1, "kye"},
	{"misspelt value field", []string{inv, `{"t":5,"type":"ok","process":0,"id":1,"f":"cs","key":"k0","read":{"vaule":0,"tag":0},"write":{"value":1,"tag":1}}`}, 2, "read.vaule"},
	{"wrong JSON type", []string{`{"t":"1","type":"invoke","process":0,"id":1,"f":"cs","key":"k0"}`}, 1, "t"},
	{"negative token", []string{inv, `{"t":5,"type":"fail","process":0,"id":1,"f":"cs","key":"k0","token":-3}`}, 2, "token"},
	{"missing type", []string{`{"t":1,"process":0,"id":1,"f":"cs","key":"k0"}`}, 1, "type"},
	{"unknown type", []string{`{"t":1,"type":"maybe","process":0,"id":1,"f":"cs","key":"k0"}`}, 1, "type"},
	{"missing id", []string{`{"t":1,"type":"invoke","process":0,"f":"cs","key":"k0"}`}, 1, "id"},
	{"unknown f", []string{`{"t":1,"type":"invoke","process":0,"id":1,"f":"incr","key":"k0"}`}, 1, "f"},
	{"missing key", []string{`{"t":1,"type":"invoke","process":0,"id":1,"f":"cs"}`}, 1, "key"},
	{"negative process", []string{`{"t":1,"type":"invoke","process":-1,"id":1,"f":"cs","key":"k0"}`}, 1, "process"},
	{"outcome on the invocation", []string{`{"t":1,"type":"invoke","process":0,"id":1,"f":"cs","key":"k0","read":{"value":0,"tag":0}}`}, 1, "read"},
	{"ok cs without its read", []string{inv, `{"t":5,"type":"ok","process":0,"id":1,"f":"cs","key":"k0","write":{"value":1,"tag":1}}`}, 2, "read"},
	{"ok cs without its write", []string{inv, `{"t":5,"type":"ok","process":0,"id":1,"f":"cs","key":"k0","read":{"value":0,"tag":0}}`}, 2, "write"},
	{"info write without read", []string{inv, `{"t":5,"type":"info","process":0,"id":1,"f":"cs","key":"k0","write":{"value":1,"tag":1}}`}, 2, "read"},
	{"write tagged with another id", []string{inv, `{"t":5,"type":"ok","process":0,"id":1,"f":"cs","key":"k0","read":{"value":0,"tag":0},"write":{"value":1,"tag":9}}`}, 2, "write.tag"},
	{"write not read plus one", []string{inv, `{"t":5,"type":"ok","process":0,"id":1,"f":"cs","key":"k0","read":{"value":0,"tag":0},"write":{"value":7,"tag":1}}`}, 2, "write.value"},
	{"ok with an error", []string{inv, `{"t":5,"type":"ok","process":0,"id":1,"f":"cs","key":"k0","read":{"value":0,"tag":0},"write":{"value":1,"tag":1},"error":"busy"}`}, 2, "error"},
	{"ok read without value", []string{`{"t":1,"type":"invoke","process":0,"id":1,"f":"read","key":"k0"}`, `{"t":5,"type":"ok","process":0,"id":1,"f":"read","key":"k0"}`}, 2, "read"},
	{"read that writes", []string{`{"t":1,"type":"invoke","process":0,"id":1,"f":"read","key":"k0"}`, `{"t":5,"type":"ok","process":0,"id":1,"f":"read","key":"k0","read":{"value":0,"tag":0},"write":{"value":1,"tag":1}}`}, 2, "write"},
	{"fault phase", []string{`{"t":1,"type":"nemesis","process":-1,"f":"pause","phase":"begin"}`}, 1, "phase"},
	{"fault with an id", []string{`{"t":1,"type":"nemesis","process":-1,"id":4,"f":"pause","phase":"start"}`}, 1, "id"},
	{"fault field on an op", []string{`{"t":1,"type":"invoke","process":0,"id":1,"f":"cs","key":"k0","phase":"start"}`}, 1, "phase"},
	{"negative time", []string{`{"t":-1,"type":"invoke","process":0,"id":1,"f":"cs","key":"k0"}`}, 1, "t"},
	{"completion before its invoke", []string{ok, inv}, 1, "id"},
	{"completion without invoke", []string{ok}, 1, "id"},
	{"completion time before invoke time", []string{`{"t":9,"type":"invoke","process":0,"id":1,"f":"cs","key":"k0"}`, ok}, 2, "t"},
	{"events out of time order", []string{inv, `{"t":0,"type":"nemesis","process":-1,"f":"pause","phase":"start"}`}, 2, "t"},
	{"duplicate invoke id", []string{inv, ok, strings.Replace(inv, `"t":1`, `"t":6`, 1)}, 3, "id"},
	{"two completions", []string{inv, ok, strings.Replace(ok, `"t":5`, `"t":6`, 1)}, 3, "id"},
	{"completion of another key", []string{inv, strings.Replace(ok, `"key":"k0"`, `"key":"k1"`, 1)}, 2, "key"},
	{"completion of another f", []string{inv, `{"t":5,"type":"fail","process":0,"id":1,"f":"read","key":"k0"}`}, 2, "f"},
	{"completion by another process", []string{inv, strings.Replace(ok, `"process":0`, `"process":3`, 1)}, 2, "process"},
	{"process with two ops in flight", []string{inv, `{"t":2,"type":"invoke","process":0,"id":2,"f":"cs","key":"k1"}`}, 2, "process"},
	{"blank lines count", []string{"", inv, "", `{"t":0,"type":"invoke","process":1,"id":2,"f":"cs","key":"k0"}`}, 4, "t"},
}

// TestWellFormed: what a run writes, and the less common but right shapes,
// are accepted.
func TestWellFormed(t *testing.T) {
	lines := []string{
		`{"t":1,"type":"invoke","process":0,"client":"c1","id":1,"f":"cs","key":"k0","fenced":true}`,
		`{"t":2,"type":"nemesis","process":-1,"f":"pause","phase":"start","targets":["c1"],"detail":"SIGSTOP"}`,
		`{"t":2,"type":"invoke","process":1,"id":2,"f":"cs","key":"k0"}`,
		`{"t":3,"type":"nemesis","f":"kill","phase":"error","detail":"no such node"}`,
		`{"t":4,"type":"fail","process":1,"id":2,"f":"cs","key":"k0","error":"busy","wait":1}`,
		`{"t":5,"type":"info","process":0,"client":"c1","id":1,"f":"cs","key":"k0","error":"timeout","msg":"no answer"}`,
		`{"t":6,"type":"invoke","process":5,"id":3,"f":"cs","key":"k0"}`,
		`{"t":7,"type":"info","process":5,"id":3,"f":"cs","key":"k0","token":4,"read":{"value":0,"tag":0}}`,
		`{"t":8,"type":"invoke","process":1,"id":4,"f":"read","key":"k0"}`,
		`{"t":9,"type":"fail","process":1,"id":4,"f":"read","key":"k0","error":"store-unavailable"}`,
		`{"t":9,"type":"invoke","process":1,"id":5,"f":"cs","key":"k0"}`,
	}
	ev, rep, err := Parse([]byte(strings.Join(lines, "\n")))
	if err != nil || len(ev) != len(lines) || rep.TornTail {
		t.Fatalf("%d events, %+v, %v", len(ev), rep, err)
	}
}

// TestFastParserEveryField: the fast parser decodes every field of an event
// as encoding/json does (Parse then judges the event; here only decoding
// is compared).
func TestFastParserEveryField(t *testing.T) {
	e := filled(t)
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var fast, slow Event
	if !newEventParser(1).parse(b, &fast) {
		t.Fatalf("fast parser refused %s", b)
	}
	if err := json.Unmarshal(b, &slow); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("fast %+v\nslow %+v", fast, slow)
	}
	if got := FieldNames(); len(got) != reflect.TypeFor[Event]().NumField() {
		t.Fatalf("field names %v miss some of Event's fields", got)
	}
}
