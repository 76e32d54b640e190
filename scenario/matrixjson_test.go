package scenario

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// fixtureMatrix is testdata/matrix.json: a matrix of two runs in which
// every field of a row is set (written once, by the code before Row was
// grouped into parts; the file is the format's record).
const fixtureMatrix = "testdata/matrix.json"

// TestMatrixJSONRoundTrip: matrix.json reads and writes back byte for
// byte, every row field in its place (Row's parts are embedded, so the
// file stays flat), and no field of the fixture is dropped or left zero.
func TestMatrixJSONRoundTrip(t *testing.T) {
	want, err := os.ReadFile(fixtureMatrix)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ReadMatrix(fixtureMatrix)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "matrix.json")
	if err := m.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("matrix.json changed on a round trip:\n%s", got)
	}
	// The fixture sets every field a row has: a field added to Row gets a
	// value in the fixture, one renamed or lost fails here.
	var raw struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(want, &raw); err != nil {
		t.Fatal(err)
	}
	keys := jsonKeys(reflect.TypeFor[Row]())
	for i, r := range raw.Rows {
		var have []string
		for k := range r {
			have = append(have, k)
		}
		slices.Sort(have)
		if !slices.Equal(have, keys) {
			t.Errorf("row %d: keys %v,\nRow's %v", i, have, keys)
		}
	}
}

// jsonKeys are the JSON keys of struct type t's fields, those of embedded
// structs in place (as encoding/json flattens them), sorted.
func jsonKeys(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := bytes.Cut([]byte(f.Tag.Get("json")), []byte(","))
		switch {
		case string(name) == "-":
		case f.Anonymous && len(name) == 0 && f.Type.Kind() == reflect.Struct:
			out = append(out, jsonKeys(f.Type)...)
		case len(name) > 0:
			out = append(out, string(name))
		default:
			out = append(out, f.Name)
		}
	}
	slices.Sort(out)
	return out
}
