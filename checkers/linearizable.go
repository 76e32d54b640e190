package checkers

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/splitbrain/splitbrain/history"
)

// stepKind is what a critical section did to its key, as the model sees it.
type stepKind uint8

const (
	// stepWrite: the section read Read and wrote Write (acknowledged, or of
	// unknown outcome but observed by a later read).
	stepWrite stepKind = iota
	// stepRead: the section (or a plain read) read Read and changed nothing;
	// fenced writes that the store rejected are this kind.
	stepRead
	// stepBlind: an unknown-outcome write that was observed, but whose read
	// was never reported. The workload writes what it read plus one, so it
	// can only have written one more than the state it read: it is legal
	// only on a state one below the value observed.
	stepBlind
	// stepMaybe: an unknown-outcome write nobody observed, with its read
	// known: it may or may not have applied.
	stepMaybe
	// stepMaybeBlind: an unknown-outcome write nobody observed whose read
	// is unknown: it may or may not have applied, and if it did it wrote
	// one more than the state it read.
	stepMaybeBlind
)

// modelInput is the Porcupine input of one operation.
type modelInput struct {
	key   string
	kind  stepKind
	read  history.Value
	write history.Value
	id    int64
}

// CounterModel is the Porcupine model of a lock-protected counter, one per
// key (histories are partitioned by key). The state is the counter's value
// and the tag of the write that produced it. A step is legal only if the
// value (and tag) it read equals the state; an acknowledged write then sets
// the state; a fenced write the store rejected leaves it.
var CounterModel = porcupine.Model{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		byKey := make(map[string][]porcupine.Operation)
		var keys []string
		for _, op := range ops {
			k := op.Input.(modelInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return history.Value{} },
	Step: func(state, input, _ any) (bool, any) {
		s := state.(history.Value)
		in := input.(modelInput)
		switch in.kind {
		case stepBlind:
			if in.write.Value != s.Value+1 {
				return false, s
			}
			return true, in.write
		case stepRead:
			return s == in.read, s
		default:
			if s != in.read {
				return false, s
			}
			return true, in.write
		}
	},
	Equal: func(a, b any) bool { return a.(history.Value) == b.(history.Value) },
	Hash: func(state any) uint64 {
		v := state.(history.Value)
		return uint64(v.Tag)*0x9e3779b97f4a7c15 ^ uint64(v.Value)
	},
	DescribeOperation: func(input, _ any) string {
		in := input.(modelInput)
		switch in.kind {
		case stepRead:
			return fmt.Sprintf("op %d read %d (tag %d)", in.id, in.read.Value, in.read.Tag)
		case stepBlind:
			return fmt.Sprintf("op %d wrote %d (read unknown)", in.id, in.write.Value)
		case stepMaybe:
			return fmt.Sprintf("op %d may have read %d (tag %d) and written %d", in.id, in.read.Value, in.read.Tag, in.write.Value)
		case stepMaybeBlind:
			return fmt.Sprintf("op %d may have written one more than it read", in.id)
		default:
			return fmt.Sprintf("op %d read %d (tag %d), wrote %d", in.id, in.read.Value, in.read.Tag, in.write.Value)
		}
	},
	DescribeState: func(state any) string {
		v := state.(history.Value)
		return fmt.Sprintf("%d (tag %d)", v.Value, v.Tag)
	},
}

// LinearizableOptions configure [NewLinearizable].
type LinearizableOptions struct {
	// Timeout bounds the whole check; past it the verdict is Unknown.
	// Zero means one minute.
	Timeout time.Duration
	// Parallelism is how many keys are checked at once; zero means GOMAXPROCS.
	Parallelism int
	// VisualizeLimit caps the operations put into the visualization (the
	// keys with anomalies are preferred) and kept for it in the details;
	// zero means 20000.
	VisualizeLimit int
	// KeepUnobserved keeps unknown-outcome writes that no read observed,
	// as "may or may not have applied" steps of a nondeterministic model,
	// on every key instead of only on keys with blind writes (see
	// buildSteps). The verdict is the same; the search grows exponentially
	// with them. It exists to measure what dropping saves.
	KeepUnobserved bool
	// PorcupineOnly skips the chain decision and gives every key to
	// Porcupine: the reference the chain is tested against, and the old
	// path for benchmarks.
	PorcupineOnly bool
	// SearchBudget bounds the memory Porcupine may need for one key,
	// estimated as n²/8 bytes for n operations (its cache keeps an n-bit
	// set per step); a key over it is Unknown, not searched. Zero means
	// 2 GiB (or half the Go memory limit when one is set and lower);
	// negative means no bound.
	SearchBudget int64
}

// Linearizable checks the critical sections: first by the chain decision
// (chain.go), which decides in linear time every key whose write order the
// unique write tags force, then with Porcupine for the keys it cannot (blind
// or kept unknown-outcome writes make the order ambiguous).
type Linearizable struct {
	opts LinearizableOptions
}

func init() {
	Register(Kind{
		Name: "linearizable", Order: 40,
		Doc:     "the critical sections behaved as if each ran atomically on its key (Porcupine)",
		New:     func(r Run) Checker { return NewLinearizable(r.Linearizable) },
		Details: func() any { return new(LinearizableDetails) },
		Words: Words{
			Row: func(r Result, f Format) string {
				d, _ := r.Details.(*LinearizableDetails)
				if d == nil {
					return r.Reason
				}
				s := fmt.Sprintf("%d operations checked on %d keys in %s; unknown writes dropped %d, kept %d", d.Checked, d.Keys, f.Dur(d.Duration), d.DroppedUnknown, d.KeptUnknown)
				if len(d.IllegalKeys) > 0 {
					s += "; illegal: " + strings.Join(d.IllegalKeys, ", ")
				}
				if len(d.UnknownKeys) > 0 {
					s += "; undecided: " + strings.Join(d.UnknownKeys, ", ")
				}
				return s
			},
			Line: func(r Result, _ Format) string {
				if r.Verdict == Valid {
					return "the history is linearizable"
				}
				return r.Reason
			},
			Headline: func(r Result, f Format) string {
				if d, _ := r.Details.(*LinearizableDetails); d != nil && r.Verdict == Invalid && len(d.IllegalKeys) > 0 {
					return "not linearizable on " + f.List(d.IllegalKeys)
				}
				return r.Reason
			},
		},
	})
}

// NewLinearizable returns a Linearizable checker.
func NewLinearizable(opts LinearizableOptions) Linearizable {
	if opts.Timeout <= 0 {
		opts.Timeout = time.Minute
	}
	if opts.Parallelism <= 0 {
		opts.Parallelism = runtime.GOMAXPROCS(0)
	}
	if opts.VisualizeLimit <= 0 {
		opts.VisualizeLimit = 20000
	}
	if opts.SearchBudget == 0 {
		opts.SearchBudget = 2 << 30
		if lim := debug.SetMemoryLimit(-1); lim > 0 && lim < math.MaxInt64 && lim/2 < opts.SearchBudget {
			opts.SearchBudget = lim / 2
		}
	}
	return Linearizable{opts: opts}
}

// Name implements [Checker].
func (Linearizable) Name() string { return "linearizable" }

// LinearizableDetails is the linearizable section of results.json.
type LinearizableDetails struct {
	// Checked is the number of operations checked (both stages).
	Checked int `json:"checked"`
	// DroppedUnknown counts unknown-outcome writes never observed by a read;
	// they may be taken as never having happened, so they are left out,
	// which keeps Porcupine's search small (except on keys with blind
	// writes, where they are kept as steps that may or may not apply).
	DroppedUnknown int `json:"dropped_unknown"`
	// KeptUnknown counts unknown-outcome writes that a read observed.
	KeptUnknown int `json:"kept_unknown"`
	// Keys is the number of keys (independent partitions).
	Keys int `json:"keys"`
	// ChainKeys counts the keys the chain decision decided; SearchedKeys
	// those given to Porcupine.
	ChainKeys    int `json:"chain_keys"`
	SearchedKeys int `json:"searched_keys"`
	// IllegalKeys and UnknownKeys name the keys with a violation, or whose
	// check timed out (or would not fit the search budget).
	IllegalKeys []string `json:"illegal_keys,omitempty"`
	UnknownKeys []string `json:"unknown_keys,omitempty"`
	// Anomalies explain the illegal keys, one each, in key order.
	Anomalies []LinearAnomaly `json:"anomalies,omitempty"`
	// Duration is how long the check took.
	Duration time.Duration `json:"duration_ns"`

	keys []keySteps
}

// isUnknown reports whether op's outcome is unknown (info, or never
// completed).
func isUnknown(op history.Op) bool {
	o := op.Outcome()
	return o != history.OK && o != history.Fail
}

// maybe reports whether ops hold a step that may or may not apply.
func maybe(ops []porcupine.Operation) bool {
	for _, op := range ops {
		if k := op.Input.(modelInput).kind; k == stepMaybe || k == stepMaybeBlind {
			return true
		}
	}
	return false
}

// keyResult is one key's outcome.
type keyResult struct {
	verdict Verdict
	anomaly *LinearAnomaly
	chain   bool
	// why says why an unknown key is unknown.
	why string
}

// Check implements [Checker].
func (l Linearizable) Check(ctx context.Context, in Input) Result {
	start := time.Now()
	keys, dropped, kept := buildSteps(in, l.opts.KeepUnobserved)
	det := &LinearizableDetails{DroppedUnknown: dropped, KeptUnknown: kept, Keys: len(keys)}
	for i := range keys {
		det.Checked += len(keys[i].steps)
	}

	deadline := start.Add(l.opts.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	results := make([]keyResult, len(keys))
	var wg sync.WaitGroup
	sem := make(chan struct{}, l.opts.Parallelism)
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results[i] = keyResult{verdict: Unknown, why: "the check ran out of time"}
				return
			}
			defer func() { <-sem }()
			results[i] = l.checkKey(ctx, &keys[i], deadline)
		}()
	}
	wg.Wait()

	verdicts := make([]Verdict, 0, len(keys))
	whys := map[string]bool{}
	for i, r := range results {
		key := keys[i].key
		if r.chain {
			det.ChainKeys++
		} else {
			det.SearchedKeys++
		}
		verdicts = append(verdicts, r.verdict)
		switch r.verdict {
		case Invalid:
			det.IllegalKeys = append(det.IllegalKeys, key)
			if r.anomaly != nil {
				det.Anomalies = append(det.Anomalies, *r.anomaly)
			}
		case Unknown:
			det.UnknownKeys = append(det.UnknownKeys, key)
			whys[r.why] = true
		}
	}
	sort.Strings(det.IllegalKeys)
	sort.Strings(det.UnknownKeys)
	det.keys = shown(keys, det.IllegalKeys, l.opts.VisualizeLimit)
	slices.SortFunc(det.Anomalies, func(a, b LinearAnomaly) int { return strings.Compare(a.Key, b.Key) })
	det.Duration = time.Since(start)
	r := Result{Verdict: And(verdicts...), Judges: true, Aspect: AspectData, Details: det}
	switch {
	case len(det.IllegalKeys) > 0:
		r.Reason = "not linearizable on " + strings.Join(det.IllegalKeys, ", ")
	case len(det.UnknownKeys) > 0:
		why := "the check ran out of time"
		if !whys[why] {
			why = strings.Join(sortedKeys(whys), "; ")
		}
		r.Reason = "linearizability undecided on " + strings.Join(det.UnknownKeys, ", ") + " (" + why + ")"
	}
	return r
}

// checkKey decides one key: by the chain when its steps are deterministic,
// else by Porcupine within the search budget and the deadline.
func (l Linearizable) checkKey(ctx context.Context, k *keySteps, deadline time.Time) keyResult {
	left := time.Until(deadline)
	if left <= 0 || ctx.Err() != nil {
		return keyResult{verdict: Unknown, why: "the check ran out of time", chain: !l.opts.PorcupineOnly && k.deterministic()}
	}
	if !l.opts.PorcupineOnly && k.deterministic() {
		if a := chainKey(k); a != nil {
			return keyResult{verdict: Invalid, anomaly: a, chain: true}
		}
		return keyResult{verdict: Valid, chain: true}
	}
	n := int64(len(k.steps))
	if need := n * n / 8; l.opts.SearchBudget > 0 && need > l.opts.SearchBudget {
		return keyResult{verdict: Unknown, why: fmt.Sprintf("%s: %d operations whose order unknown outcomes leave open; the search would need about %d MiB, over its budget of %d MiB",
			k.key, n, need>>20, l.opts.SearchBudget>>20)}
	}
	part := k.porcupineOps()
	model := singleKey
	if maybe(part) {
		model = maybeModel
	}
	switch porcupine.CheckOperationsTimeout(model, part, left) {
	case porcupine.Ok:
		return keyResult{verdict: Valid}
	case porcupine.Illegal:
		return keyResult{verdict: Invalid, anomaly: &LinearAnomaly{Key: k.key, By: "porcupine",
			Text: fmt.Sprintf("%s: no order of its %d operations is one a correct lock and store could give (Porcupine's search; unknown outcomes leave the order of writes open, see linearizability.html)", k.key, n)}}
	default:
		return keyResult{verdict: Unknown, why: "the check ran out of time"}
	}
}

// singleKey is CounterModel for an already partitioned history.
var singleKey = func() porcupine.Model {
	m := CounterModel
	m.Partition = nil
	return m
}()

// maybeModel is singleKey made nondeterministic for stepMaybe and
// stepMaybeBlind: such a step leads both to the unchanged state and, when
// its read matches (or, read unknown, always), to its write.
var maybeModel = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{history.Value{}} },
	Step: func(state, input, output any) []any {
		in := input.(modelInput)
		s, _ := state.(history.Value)
		switch in.kind {
		case stepMaybe:
			if s == in.read {
				return []any{s, in.write}
			}
			return []any{s}
		case stepMaybeBlind:
			return []any{s, history.Value{Value: s.Value + 1, Tag: in.id}}
		}
		if ok, next := CounterModel.Step(state, input, output); ok {
			return []any{next}
		}
		return nil
	},
	Equal:             CounterModel.Equal,
	Hash:              CounterModel.Hash,
	DescribeOperation: CounterModel.DescribeOperation,
	DescribeState:     CounterModel.DescribeState,
}).ToModel()

// shown returns the steps the visualization shows: those of the illegal
// keys when there are any (else of every key), in key order, the first
// limit of them. They are copies, so that the rest of a big history's steps
// are not held after the check.
func shown(keys []keySteps, illegal []string, limit int) []keySteps {
	var out []keySteps
	n := 0
	for i := range keys {
		k := &keys[i]
		if n >= limit {
			break
		}
		if len(illegal) > 0 && !slices.Contains(illegal, k.key) {
			continue
		}
		steps := slices.Clone(k.steps[:min(len(k.steps), limit-n)])
		out = append(out, keySteps{key: k.key, steps: steps})
		n += len(steps)
	}
	return out
}

// WriteVisualization writes Porcupine's HTML visualization of the checked
// operations (those of the keys with anomalies when there are any), up to
// limit (zero: the checker's VisualizeLimit, which also caps what the
// details keep), with each fault as an annotation spanning its window.
func (d *LinearizableDetails) WriteVisualization(w io.Writer, faults []history.Event, limit int) error {
	var ops []porcupine.Operation
	for i := range d.keys {
		ops = append(ops, d.keys[i].porcupineOps()...)
	}
	if limit > 0 && len(ops) > limit {
		ops = ops[:limit]
	}
	model := CounterModel
	if maybe(ops) {
		model = maybeModel
		model.Partition = CounterModel.Partition
	}
	_, info := porcupine.CheckOperationsVerbose(model, ops, time.Minute)
	info.AddAnnotations(FaultAnnotations(faults))
	if err := porcupine.Visualize(model, info, w); err != nil {
		return fmt.Errorf("visualize: %w", err)
	}
	return nil
}

// FaultAnnotations turns nemesis start/end events into annotations, one per
// fault window, tagged "nemesis".
func FaultAnnotations(faults []history.Event) []porcupine.Annotation {
	var out []porcupine.Annotation
	for _, w := range Windows(faults) {
		out = append(out, porcupine.Annotation{
			Tag:             "nemesis",
			Start:           w.Start,
			End:             w.End,
			Description:     w.F,
			Details:         fmt.Sprintf("%s %v: %s", w.F, w.Targets, w.Detail),
			BackgroundColor: "#f6d5d5",
		})
	}
	return out
}

// Window is one fault, from its start event to its end event.
type Window struct {
	F       string   `json:"f"`
	Targets []string `json:"targets"`
	Detail  string   `json:"detail,omitempty"`
	Start   int64    `json:"start"`
	// End is the heal time; a fault never healed in the history ends at the
	// last event seen.
	End int64 `json:"end"`
}

// Windows pairs nemesis start and end events. A start is matched with the
// next end of the same fault and targets.
func Windows(faults []history.Event) []Window {
	var (
		out  []Window
		last int64
	)
	open := make(map[string][]int)
	for _, e := range faults {
		last = max(last, e.Time)
		k := fmt.Sprint(e.F, e.Targets)
		switch e.Phase {
		case history.PhaseStart:
			open[k] = append(open[k], len(out))
			out = append(out, Window{F: e.F, Targets: e.Targets, Detail: e.Detail, Start: e.Time, End: -1})
		case history.PhaseEnd:
			if q := open[k]; len(q) > 0 {
				out[q[0]].End = e.Time
				open[k] = q[1:]
			}
		}
	}
	for i := range out {
		if out[i].End < 0 {
			out[i].End = last
		}
	}
	return out
}
