package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// filled returns an event with every field set (whatever fields Event
// grows, so that the fast parser is compared on all of them).
func filled(t *testing.T) Event {
	t.Helper()
	var e Event
	v := reflect.ValueOf(&e).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("s" + v.Type().Field(i).Name)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(1000 + i))
		case reflect.Uint64:
			f.SetUint(uint64(2000 + i))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Pointer:
			f.Set(reflect.ValueOf(&Value{Value: int64(i), Tag: int64(10 * i)}))
		case reflect.Slice:
			f.Set(reflect.ValueOf([]string{"n1", "c2"}))
		default:
			t.Fatalf("field %s of kind %s: teach this test", v.Type().Field(i).Name, f.Kind())
		}
	}
	e.Type = Info
	return e
}

func encode(t *testing.T, evs ...Event) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, e := range evs {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// generated is a history of n critical sections and a fault, as a run
// writes them.
func generated(n int) []Event {
	var out []Event
	for i := 1; i <= n; i++ {
		id := int64(i)
		key := fmt.Sprintf("k%d", i%3)
		out = append(out,
			Event{Time: int64(10 * i), Type: Invoke, Process: i % 4, Client: fmt.Sprintf("c%d", i%4+1), ID: id, F: FCriticalSection, Key: key, Fenced: i%2 == 0},
			Event{Time: int64(10*i + 5), Type: OK, Process: i % 4, Client: fmt.Sprintf("c%d", i%4+1), ID: id, F: FCriticalSection, Key: key, Token: uint64(i),
				Read: &Value{Value: int64(i - 1), Tag: id - 1}, Write: &Value{Value: int64(i), Tag: id}, Acquired: int64(10*i + 1), WriteAt: int64(10*i + 3), Released: int64(10*i + 4), Wait: 1, Hold: 3})
		if i%50 == 0 {
			out = append(out, Event{Time: int64(10*i + 6), Type: Nemesis, Process: -1, F: "pause", Phase: PhaseStart, Targets: []string{"c1"}, Detail: "SIGSTOP"})
		}
	}
	return out
}

// TestParseMatchesReference: the fast parser reads what a plain
// encoding/json reader reads, and accepts and refuses the same files.
func TestParseMatchesReference(t *testing.T) {
	corpus, _ := filepath.Glob(filepath.Join("..", "..", "checkers", "testdata", "*", "history.jsonl"))
	inputs := map[string][]byte{}
	for _, p := range corpus {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		inputs[filepath.Base(filepath.Dir(p))] = b
	}
	full := filled(t)
	inputs["every field"] = encode(t, full)
	escaped := full
	escaped.Message = "quote \" and \\ and \u00e9 and <tag>"
	inputs["escapes"] = encode(t, escaped)
	inputs["generated"] = encode(t, generated(2000)...)
	inputs["unknown field and spacing"] = []byte(`{ "t" : 5 , "type":"invoke","id":1,"f":"cs","future":{"x":[1,2]}}` + "\n\n" + `{"t":6,"type":"ok","id":1,"f":"cs","read":null,"targets":[]}` + "\n")
	inputs["torn tail"] = append(bytes.Clone(inputs["lost-update-invalid"]), []byte(`{"t":9999,"type":"invo`)...)
	inputs["torn tail with a valid object"] = append(bytes.Clone(inputs["sequential-valid"]), []byte(`{"t":9999,"type":"invoke","id":77,"f":"cs"}`)...)
	inputs["corrupt middle line"] = []byte("{\"t\":1,\"type\":\"invoke\",\"id\":1,\"f\":\"cs\"}\nnot json\n{}\n")
	inputs["invalid event"] = []byte("{\"t\":1,\"type\":\"invoke\",\"f\":\"cs\"}\n")
	inputs["unknown type"] = []byte("{\"t\":1,\"type\":\"maybe\",\"id\":3}\n")
	inputs["negative time"] = []byte("{\"t\":-1,\"type\":\"nemesis\"}\n")
	inputs["float time"] = []byte("{\"t\":1.5,\"type\":\"nemesis\"}\n")
	inputs["empty"] = nil
	for name, b := range inputs {
		t.Run(name, func(t *testing.T) { compareWithReference(t, b) })
	}
}

func compareWithReference(t *testing.T, b []byte) {
	t.Helper()
	want, wantRep, wantErr := referenceRead(bytes.NewReader(b))
	got, gotRep, gotErr := Parse(b)
	if (wantErr == nil) != (gotErr == nil) || (wantErr != nil && errors.Is(wantErr, ErrCorrupt) != errors.Is(gotErr, ErrCorrupt)) {
		t.Fatalf("error %v, the reference's %v", gotErr, wantErr)
	}
	if wantErr != nil {
		if !strings.Contains(gotErr.Error(), "line") {
			t.Errorf("error %q does not name the line", gotErr)
		}
		return
	}
	if wantRep != gotRep {
		t.Errorf("report %+v, want %+v", gotRep, wantRep)
	}
	if len(want) == 0 && len(got) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		for i := range min(len(got), len(want)) {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("event %d:\n got %+v\nwant %+v", i, got[i], want[i])
			}
		}
		t.Fatalf("%d events, want %d", len(got), len(want))
	}
}

// TestParseFastPath: the lines a run writes take the fast parser, not the
// encoding/json fallback.
func TestParseFastPath(t *testing.T) {
	lines := bytes.Split(bytes.TrimSpace(encode(t, generated(300)...)), []byte("\n"))
	p := newEventParser(len(lines))
	for _, l := range lines {
		var e Event
		if !p.parse(l, &e) {
			t.Fatalf("fast parser refused %s", l)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, e := range generated(100_000) {
		enc.Encode(e)
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReadFromBlocks: reading a block at a time (blocks far smaller than
// the history, so lines straddle them) gives Parse's events, report and
// error, for the checkers' corpus (malformed and torn histories included).
func TestReadFromBlocks(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join("..", "checkers", "testdata", "*", "history.jsonl"))
	if len(paths) == 0 {
		t.Fatal("no corpus")
	}
	defer func(n int) { readBlock = n }(readBlock)
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		want, wantRep, wantErr := Parse(data)
		for _, block := range []int{1, 7, 64, 1 << 20} {
			readBlock = block
			got, rep, err := ReadFrom(bytes.NewReader(data), int64(len(data)))
			if fmt.Sprint(err) != fmt.Sprint(wantErr) || rep != wantRep {
				t.Fatalf("%s, block %d: %v %+v, Parse %v %+v", p, block, err, rep, wantErr, wantRep)
			}
			if err == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("%s, block %d: events differ", p, block)
			}
		}
	}
}
