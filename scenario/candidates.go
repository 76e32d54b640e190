package scenario

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/splitbrain/splitbrain/harness"
	"github.com/splitbrain/splitbrain/targets"
	"github.com/splitbrain/splitbrain/targets/store"
)

// Candidate is one answer a team may adopt: a lock backend, the lock
// client that takes its locks (a registered library, or the command line
// of an adapter the user brings with its files and packages) and the
// configuration both run in (the backend's and the client's settings, the
// counter store and its settings), under a short name. validate
// --candidates compares candidates side by side.
type Candidate struct {
	// Name is the candidate's short name in the grid ("redis/redsync");
	// empty: made from the rest (Candidate.Label).
	Name string `yaml:"name,omitempty" json:"name"`
	// Target is the backend.
	Target string `yaml:"target" json:"target"`
	// Client is a registered client that serves Target, or the command
	// line of the user's adapter (docs/client-protocol.md); empty: the
	// backend's own.
	Client string `yaml:"client,omitempty" json:"client,omitempty"`
	// ClientFiles (a directory, relative to the candidates file) and
	// ClientPackages (Debian packages) go with an adapter's command line,
	// as run --client-files and --client-packages.
	ClientFiles    string   `yaml:"client_files,omitempty" json:"client_files,omitempty"`
	ClientPackages []string `yaml:"client_packages,omitempty" json:"client_packages,omitempty"`
	// Fencing says the user's adapter gives fencing tokens (its hello's
	// offers.token): the fenced scenarios then run with it. A registered
	// client's own declaration is used instead; unset for an adapter, it
	// runs the scenarios a token-less client runs.
	Fencing bool `yaml:"fencing,omitempty" json:"fencing,omitempty"`
	// RecipeOptions are the configuration under test (--recipe-opt): the
	// backend's settings and the client's.
	RecipeOptions map[string]string `yaml:"recipe_options,omitempty" json:"recipe_options,omitempty"`
	// Store is the kind of counter store (--store) and StoreOptions its
	// settings (--store-opt); empty: each scenario's own.
	Store        string            `yaml:"store,omitempty" json:"store,omitempty"`
	StoreOptions map[string]string `yaml:"store_options,omitempty" json:"store_options,omitempty"`
}

// candidatesFile is a candidates file as a mapping (the other form is the
// bare list).
type candidatesFile struct {
	Candidates []Candidate `yaml:"candidates"`
}

// External says the candidate's client is an adapter the user brings.
func (c Candidate) External() bool {
	if c.Client == "" {
		return false
	}
	_, err := targets.LookupRecipe(c.Client)
	return err != nil
}

// ownClient says the candidate runs the backend's own client.
func (c Candidate) ownClient(b targets.Backend) bool { return c.Client == "" || c.Client == b.Recipe }

// Label is the candidate's name: Name, else the target, the client when
// it is not the target's own ("redis/redsync"; an adapter's program,
// "redis/my_lock.py"), and the settings given ("redis persistence=aof-always").
func (c Candidate) Label() string {
	if c.Name != "" {
		return c.Name
	}
	s := c.Target
	if b, err := targets.Lookup(c.Target); c.Client != "" && (err != nil || !c.ownClient(b)) {
		s += "/" + clientShort(c.Client)
	}
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(c.RecipeOptions)) {
		kv = append(kv, k+"="+c.RecipeOptions[k])
	}
	if c.Store != "" {
		kv = append(kv, "store="+c.Store)
	}
	for _, k := range slices.Sorted(maps.Keys(c.StoreOptions)) {
		kv = append(kv, k+"="+c.StoreOptions[k])
	}
	if len(kv) > 0 {
		s += " " + strings.Join(kv, ",")
	}
	return s
}

// clientShort is a client's short name: a registered one's kind, an
// adapter's program ("python3 my_lock.py" → "my_lock.py").
func clientShort(client string) string {
	if _, err := targets.LookupRecipe(client); err == nil {
		return client
	}
	f := strings.Fields(client)
	for i := len(f) - 1; i >= 0; i-- {
		if !strings.HasPrefix(f[i], "-") {
			return filepath.Base(f[i])
		}
	}
	return client
}

// recipe is what the candidate's client offers, as far as choosing its
// scenarios goes: a registered client's declaration, or, for an adapter,
// a recipe of the external kind serving Target that gives tokens when the
// candidate says so.
func (c Candidate) recipe(b targets.Backend) (targets.Recipe, error) {
	switch {
	case c.ownClient(b):
		return b.RunRecipe()
	case !c.External():
		return targets.LookupRecipe(c.Client)
	}
	return adapterRecipe(b.Name, c.Fencing), nil
}

// Check refuses a candidate that cannot run, in one line naming the fix:
// an unknown backend, a client that does not serve it, a setting neither
// takes, an unknown store or store setting, files or packages without an
// adapter.
func (c Candidate) Check() error {
	b, err := targets.Lookup(c.Target)
	if err != nil {
		if c.Target == "" {
			return harness.BadInput("no target (want one of %s)", strings.Join(targets.Names(), ", "))
		}
		return harness.BadInput("%v", err)
	}
	if !c.External() && (c.ClientFiles != "" || len(c.ClientPackages) > 0) {
		return harness.BadInput("client_files and client_packages go with the command line of your own adapter as client, not with %q", c.Client)
	}
	if c.External() && !strings.ContainsAny(c.Client, " /.") {
		return harness.BadInput("client %q: no such client for target %s (known: %s); your own adapter is its command line, e.g. 'python3 my_lock.py'",
			c.Client, c.Target, strings.Join(harness.ClientNames(b), ", "))
	}
	r, err := c.recipe(b)
	if err != nil {
		return harness.BadInput("%v", err)
	}
	if !r.Serves(b.Name) {
		return harness.BadInput("client %s does not serve target %s (clients of %s: %s)", r.Kind, c.Target, c.Target, strings.Join(harness.ClientNames(b), ", "))
	}
	if !c.External() {
		if err := b.CheckOptionsWith(r, c.RecipeOptions); err != nil {
			return harness.BadInput("recipe_options: %v", err)
		}
	}
	if c.Store != "" || len(c.StoreOptions) > 0 {
		k, err := store.Lookup(c.Store)
		if err != nil {
			return harness.BadInput("store: %v", err)
		}
		if _, err := k.ParseOptions(c.StoreOptions); err != nil {
			return harness.BadInput("store_options: %v", err)
		}
	}
	return nil
}

// Set is the validation set of the candidate: the checklist's scenarios
// that apply to its backend with its client, each run in its configuration
// (never in one a scenario prefers), with test phases of timeLimit. Bad
// input is an InputError.
func (c Candidate) Set(timeLimit time.Duration) (*Set, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	b, _ := targets.Lookup(c.Target)
	r, _ := c.recipe(b)
	name := "validate-" + strings.Trim(nonName.ReplaceAllString(c.Label(), "-"), "-")
	opts := c.RecipeOptions
	if opts == nil {
		opts = map[string]string{}
	}
	s := &Set{Name: name, TimeLimit: timeLimit, Seeds: []uint64{1}, Repetitions: 1, EarlyEnd: true}
	for _, n := range validationScenarios {
		sc, _ := Lookup(n)
		if !validates(sc, b, r) {
			continue
		}
		e := Entry{Scenario: n, Targets: []string{c.Target}, RecipeOptions: maps.Clone(opts),
			Store: c.Store, StoreOptions: maps.Clone(c.StoreOptions)}
		if !c.ownClient(b) {
			e.Clients = []string{c.Client}
			e.ClientFiles, e.ClientPackages = c.ClientFiles, slices.Clone(c.ClientPackages)
			e.ClientFencing = c.External() && c.Fencing
		}
		s.Entries = append(s.Entries, e)
	}
	return s, nil
}

// nonName matches what a set's name leaves out of a candidate's label.
var nonName = regexp.MustCompile(`[^A-Za-z0-9_.]+`)

// DefaultCandidates are validate --candidates default: every registered
// backend with each client that serves it (its own first), in its default
// configuration; and, for a backend whose durable configuration
// (targets.Backend.DurableWith) is not its default, the backend with its
// own client in that configuration.
func DefaultCandidates() []Candidate {
	var out []Candidate
	for _, b := range targets.Backends() {
		for _, cl := range harness.ClientNames(b) {
			c := Candidate{Target: b.Name}
			if cl != b.Recipe {
				c.Client = cl
			}
			out = append(out, c)
		}
		if len(b.DurableWith) > 0 && !b.Runs(nil, b.DurableWith) {
			out = append(out, Candidate{Target: b.Name, RecipeOptions: maps.Clone(b.DurableWith)})
		}
	}
	return out
}

// LoadCandidates reads a candidates file: a YAML list of candidates, or a
// mapping whose key candidates holds the list. Unknown keys, a candidate
// that cannot run and two candidates of one name are refused in one line
// (an InputError naming the fix); an adapter's client_files are relative to
// the file.
func LoadCandidates(path string) ([]Candidate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, harness.BadInput("--candidates: %v (give a YAML file, or default)", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, harness.BadInput("--candidates %s: %s", path, strings.ReplaceAll(err.Error(), "\n", " "))
	}
	if len(doc.Content) == 0 {
		return nil, harness.BadInput("--candidates %s: the file is empty (want a list of candidates, each with a target: see docs/adoption.md)", path)
	}
	list := doc.Content[0]
	if list.Kind == yaml.MappingNode {
		if msg := unknownKey(list, reflect.TypeFor[candidatesFile]()); msg != "" {
			return nil, harness.BadInput("--candidates %s: %s", path, msg)
		}
		list = nil
		for i := 0; i+1 < len(doc.Content[0].Content); i += 2 {
			if doc.Content[0].Content[i].Value == "candidates" {
				list = doc.Content[0].Content[i+1]
			}
		}
	}
	if list == nil || list.Kind != yaml.SequenceNode {
		return nil, harness.BadInput("--candidates %s: want a list of candidates (or a mapping with the key candidates), each a mapping with a target", path)
	}
	for i, n := range list.Content {
		if n.Kind != yaml.MappingNode {
			return nil, harness.BadInput("--candidates %s, candidates[%d] at line %d: want a mapping with a target (and client, recipe_options, ...)", path, i, n.Line)
		}
		if msg := unknownKey(n, reflect.TypeFor[Candidate]()); msg != "" {
			return nil, harness.BadInput("--candidates %s, candidates[%d]: %s", path, i, msg)
		}
	}
	var cs []Candidate
	if err := list.Decode(&cs); err != nil {
		return nil, harness.BadInput("--candidates %s: %s", path, yamlProblem(b, err))
	}
	if len(cs) == 0 {
		return nil, harness.BadInput("--candidates %s: no candidates (want a list, each with a target)", path)
	}
	for i := range cs {
		if cs[i].ClientFiles != "" && !filepath.IsAbs(cs[i].ClientFiles) {
			cs[i].ClientFiles = filepath.Join(filepath.Dir(path), cs[i].ClientFiles)
		}
	}
	if err := CheckCandidates(cs); err != nil {
		return nil, harness.BadInput("--candidates %s, %v", path, unwrapInput(err))
	}
	return cs, nil
}

// CheckCandidates checks each candidate (Candidate.Check) and that no two
// have one name; the error names the candidate ("candidates[2] (redis
// aof): ...").
func CheckCandidates(cs []Candidate) error {
	seen := map[string]int{}
	for i, c := range cs {
		if err := c.Check(); err != nil {
			return harness.BadInput("candidates[%d] (%s): %v", i, c.Label(), unwrapInput(err))
		}
		if j, ok := seen[c.Label()]; ok {
			return harness.BadInput("candidates[%d] and candidates[%d] are both named %q: give each a name of its own (name: ...)", j, i, c.Label())
		}
		seen[c.Label()] = i
	}
	return nil
}

// unwrapInput is what an InputError says, without wrapping it again.
func unwrapInput(err error) error {
	if ie, ok := err.(*harness.InputError); ok {
		return ie.Err
	}
	return err
}
