package history

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

const schemaPath = "../docs/history.schema.json"

func loadSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	const url = "https://github.com/splitbrain/splitbrain/docs/history.schema.json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func schemaAccepts(t *testing.T, s *jsonschema.Schema, line string) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(line))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

// TestSchemaFields: the schema lists exactly the fields the parser knows,
// for events and for values.
func TestSchemaFields(t *testing.T) {
	b, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Properties map[string]any `json:"properties"`
		Required   []string       `json:"required"`
		Defs       struct {
			Value struct {
				Properties map[string]any `json:"properties"`
				Required   []string       `json:"required"`
			} `json:"value"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	sorted := func(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }
	if got, want := keys(doc.Properties), sorted(FieldNames()); !slices.Equal(got, want) {
		t.Errorf("schema properties %v, parser fields %v", got, want)
	}
	if got, want := keys(doc.Defs.Value.Properties), sorted(ValueFieldNames()); !slices.Equal(got, want) {
		t.Errorf("schema value properties %v, parser value fields %v", got, want)
	}
	if !slices.Equal(sorted(doc.Required), []string{"t", "type"}) || !slices.Equal(sorted(doc.Defs.Value.Required), []string{"tag", "value"}) {
		t.Errorf("required %v / %v", doc.Required, doc.Defs.Value.Required)
	}
}

// TestSchemaAgreesWithParser: every line of every history the parser
// accepts (the corpus, the format's examples, a generated run) is valid
// under the schema; every line the parser refuses on its own is refused by
// the schema, except for the rules only the parser can check (docs/
// history-format.md lists them).
func TestSchemaAgreesWithParser(t *testing.T) {
	s := loadSchema(t)
	files, _ := filepath.Glob("../checkers/testdata/*/history.jsonl")
	examples, _ := filepath.Glob("../docs/examples/*.jsonl")
	files = append(files, examples...)
	if len(files) < 30 || len(examples) == 0 {
		t.Fatalf("%d histories, %d examples", len(files), len(examples))
	}
	inputs := map[string][]byte{"generated": encode(t, generated(200)...)}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inputs[f] = b
	}
	accepted := 0
	for name, b := range inputs {
		if _, rep, err := Parse(b); err != nil || rep.TornTail {
			continue
		}
		accepted++
		for i, line := range bytes.Split(b, []byte("\n")) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			if err := schemaAccepts(t, s, string(line)); err != nil {
				t.Errorf("%s line %d: the parser accepts it, the schema does not: %v", name, i+1, err)
			}
		}
	}
	if accepted < 20 {
		t.Fatalf("only %d accepted histories", accepted)
	}
	// One-line faults of TestMalformed: the schema refuses the faulty line
	// too, except where the rule spans lines or compares values.
	parserOnly := map[string]bool{
		"write tagged with another id": true, "write not read plus one": true,
		"completion before its invoke": true, "completion without invoke": true, "completion time before invoke time": true,
		"events out of time order": true, "duplicate invoke id": true, "two completions": true, "completion of another key": true,
		"completion of another f": true, "completion by another process": true, "process with two ops in flight": true, "blank lines count": true,
	}
	for _, tt := range malformedCases {
		line := tt.lines[tt.line-1]
		err := schemaAccepts(t, s, line)
		switch {
		case parserOnly[tt.name] && err != nil && tt.line > 1:
			// fine either way
		case !parserOnly[tt.name] && err == nil:
			t.Errorf("%s: the schema accepts %s", tt.name, line)
		}
	}
}
