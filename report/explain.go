package report

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/nemesis"
)

// Kind says what sort of anomaly an [Anomaly] is.
type Kind string

// Kinds of anomaly.
const (
	// LostUpdate: a holder wrote after its lease had passed to a newer
	// holder, and one of the two overwrote the other's increments.
	LostUpdate Kind = "lost-update"
	// StaleRead: a holder read a value that had already been overwritten,
	// although the holds did not overlap; its write then lost increments.
	StaleRead Kind = "stale-read"
	// LostWrite: an acknowledged write that no later read saw and no
	// competing writer explains.
	LostWrite Kind = "lost-write"
	// NotLinearizable: the checker found the key illegal but no single late
	// or stale write explains it.
	NotLinearizable Kind = "not-linearizable"
	// FenceOrderBroken: the lock service granted a token not above the token
	// of a grant known to have come before (the lock broke its promise).
	FenceOrderBroken Kind = "fence-order"
	// ImpossibleValue: a read saw a value no sequence of the key's
	// increments could produce.
	ImpossibleValue Kind = "impossible-value"
)

// Roles of the operations of an anomaly (Op.Role).
const (
	// RoleLate is the late (or stale) writer.
	RoleLate = "late"
	// RoleLost marks an operation whose increment was lost.
	RoleLost = "lost"
	// RoleNewer marks the newer holder whose grant made the late write late.
	RoleNewer = "newer"
	// RoleOverwriter marks the write that overwrote a late write.
	RoleOverwriter = "overwriter"
	// RoleFinal marks the read that saw the outcome.
	RoleFinal = "final-read"
)

// Op is one operation as an explanation shows it: its invocation and
// completion merged, times on the run's time base.
type Op struct {
	ID      int64  `json:"id"`
	Process int    `json:"process"`
	Client  string `json:"client"`
	F       string `json:"f"`
	Key     string `json:"key"`
	Fenced  bool   `json:"fenced,omitempty"`
	// Bypass marks a client that writes without the lock and the token.
	Bypass  bool           `json:"bypass,omitempty"`
	Token   uint64         `json:"token,omitempty"`
	Outcome history.Type   `json:"outcome"`
	Error   string         `json:"error,omitempty"`
	Read    *history.Value `json:"read,omitempty"`
	Write   *history.Value `json:"write,omitempty"`
	Invoke  int64          `json:"invoke"`
	// Complete is the completion time; 0 when the operation never completed.
	Complete int64 `json:"complete,omitempty"`
	// Acquired, WriteAt and Released are the client's own marks (0 when
	// unknown).
	Acquired int64 `json:"acquired,omitempty"`
	WriteAt  int64 `json:"write_at,omitempty"`
	Released int64 `json:"released,omitempty"`
	// Role is what the operation did in the anomaly (Role* constants), or
	// empty for context.
	Role string `json:"role,omitempty"`

	// succ is the first write that read what this one wrote, sibling the
	// next write that read the same state.
	succ, sibling *Op
	// chainPos is the position on the key's surviving chain, -1 if off it.
	chainPos int
}

// acq is when the op got the lock, or its invocation when unknown.
func (o *Op) acq() int64 {
	if o.Acquired > 0 {
		return o.Acquired
	}
	return o.Invoke
}

// wrote is when the op sent its write, or its completion when unknown.
func (o *Op) wrote() int64 {
	if o.WriteAt > 0 {
		return o.WriteAt
	}
	return o.end()
}

// end is the completion time, or +inf for an operation that never completed.
func (o *Op) end() int64 {
	if o.Complete > 0 {
		return o.Complete
	}
	return math.MaxInt64
}

func newOp(h *history.Op) Op {
	o := Op{chainPos: -1,
		ID: h.Invoke.ID, Client: h.Invoke.Client, F: h.Invoke.F, Key: h.Invoke.Key, Fenced: h.Invoke.Fenced, Bypass: h.Invoke.Bypass,
		Process: h.Invoke.Process, Outcome: h.Outcome(), Invoke: h.Invoke.Time,
	}
	if c := h.Complete; c != nil {
		o.Complete, o.Token, o.Error = c.Time, c.Token, c.Error
		o.Read, o.Write = c.Read, c.Write
		o.Acquired, o.WriteAt, o.Released = c.Acquired, c.WriteAt, c.Released
	}
	return o
}

// Window is the smallest stretch of a key's history that still shows an
// anomaly.
type Window struct {
	// Start is the first invocation in the window, End the last completion.
	Start int64 `json:"start"`
	End   int64 `json:"end"`
	// Prefix is the counter's state just before the window (what its first
	// operations read).
	Prefix history.Value `json:"prefix"`
	// Ops are the window's operations in invocation order.
	Ops []Op `json:"ops"`
	// KeyOps is how many checked operations the key has in the whole
	// history: what the window was shrunk from.
	KeyOps int `json:"key_ops"`
	// Verified says the linearizability checker, run on the window alone
	// (starting from Prefix), found it illegal.
	Verified bool `json:"verified"`
}

// Events returns the window's history: a synthetic operation that sets the
// counter to Prefix (when it is not the initial state), then the window's
// invocations and completions in time order. Checking it with
// [checkers.NewLinearizable] gives an invalid verdict when Verified is set.
func (w Window) Events() []history.Event {
	return windowEvents(w.Prefix, opsOf(w.Ops))
}

func opsOf(ops []Op) []*Op {
	out := make([]*Op, len(ops))
	for i := range ops {
		out[i] = &ops[i]
	}
	return out
}

// Anomaly is one violation, explained.
type Anomaly struct {
	Kind Kind   `json:"kind"`
	Key  string `json:"key"`
	// Title is a one-line summary; Text the explanation in plain words.
	Title string `json:"title"`
	Text  string `json:"text"`
	// Late is the late (or stale) writer; nil for NotLinearizable.
	Late *Op `json:"late,omitempty"`
	// Newer are the holders granted the lock after Late whose writes
	// happened during Late's hold.
	Newer []Op `json:"newer,omitempty"`
	// Lost are the operations whose acknowledged increments were lost.
	Lost []Op `json:"lost,omitempty"`
	// Overwriter is the write that overwrote a late write that landed
	// mid-history (nil when the late write survived).
	Overwriter *Op `json:"overwriter,omitempty"`
	// Faults are the fault windows overlapping Late's hold.
	Faults []checkers.Window `json:"faults,omitempty"`
	// Window is the shrunk history that shows the anomaly.
	Window *Window `json:"window,omitempty"`
	// At is when the anomaly happened, for anomalies without a late writer.
	At int64 `json:"at,omitempty"`
}

// ExplainOptions configure [Explain].
type ExplainOptions struct {
	// LeaseTTL is the lock's lease (results.json options.lease_ttl_ns);
	// zero leaves lease expiry out of the text.
	LeaseTTL time.Duration
	// IllegalKeys are the keys the linearizability checker found illegal;
	// one that no late or stale write explains gets a NotLinearizable
	// anomaly.
	IllegalKeys []string
	// Verify is how many windows are checked with the linearizability
	// checker (the first found, key by key); zero means 50.
	Verify int
	// MaxWindowOps caps a window; a longer one is cut to the anomaly's own
	// operations. Zero means 2000.
	MaxWindowOps int
	// CheckTimeout bounds each check of a window; zero means 5 s.
	CheckTimeout time.Duration
	// Origin is the time the text counts from (a run's test start,
	// results.json test_start_ns); zero counts from the history's zero.
	Origin int64
	// Summary is the summary checker's details of the same history, when
	// the caller has them (nil: the explainer runs that checker itself).
	Summary *checkers.SummaryDetails
}

// Explain finds the anomalies of a counter history and explains each in
// plain words, with the smallest window of the history that shows it. A
// valid history gives none.
func Explain(events []history.Event, opts ExplainOptions) []Anomaly {
	return ExplainContext(context.Background(), events, opts)
}

// ExplainContext is [Explain] with a context bounding the checker runs.
func ExplainContext(ctx context.Context, events []history.Event, opts ExplainOptions) []Anomaly {
	return explainInput(ctx, checkers.NewInput(events), opts)
}

func explainInput(ctx context.Context, in checkers.Input, opts ExplainOptions) []Anomaly {
	if opts.Verify == 0 {
		opts.Verify = 50
	}
	if opts.MaxWindowOps <= 0 {
		opts.MaxWindowOps = 2000
	}
	if opts.CheckTimeout <= 0 {
		opts.CheckTimeout = 5 * time.Second
	}
	e := &explainer{ctx: ctx, opts: opts, tf: newTimeFmt(in.End, opts.Origin), faults: checkers.Windows(in.Faults)}
	e.index(in)
	var out []Anomaly
	explained := map[string]bool{}
	// Keys in order of their first anomaly would be nicer, but the checks
	// are bounded by count, so go by key name for determinism.
	freed := false
	for _, k := range e.keys {
		kh := e.byKey[k]
		if !freed && len(kh.ops) >= bigKey {
			// build makes this key's operations at once. Collect the
			// checkers' garbage and return it to the OS first: with the
			// memory limit near the live data (check sets it), the peak
			// otherwise overshoots it by whatever the collector has not
			// yet scavenged (a 1M-op one-key history: up to 3.1× its size
			// instead of 2.7×, and no faster).
			debug.FreeOSMemory()
			freed = true
		}
		e.build(kh)
		as := e.explainKey(kh)
		e.release(kh)
		if len(as) > 0 {
			explained[k] = true
		}
		out = append(out, as...)
	}
	out = append(out, e.fenceOrder(in)...)
	for _, a := range e.impossible(in) {
		explained[a.Key] = true
		out = append(out, a)
	}
	for _, a := range e.blindJumps(in, opts.IllegalKeys) {
		if !explained[a.Key] {
			explained[a.Key] = true
			out = append(out, a)
		}
	}
	for _, k := range opts.IllegalKeys {
		if !explained[k] {
			out = append(out, Anomaly{
				Kind: NotLinearizable, Key: k,
				Title: fmt.Sprintf("%s is not linearizable", k),
				Text: fmt.Sprintf("The linearizability checker found no order of the operations on %s that a correct lock and store could give, "+
					"but no single late or stale write explains it (the chain of writes does not fork). See linearizability.html for the operations.", k),
			})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return anomalyTime(out[i]) < anomalyTime(out[j]) })
	return out
}

func anomalyTime(a Anomaly) int64 {
	switch {
	case a.Late != nil:
		return a.Late.Invoke
	case a.At != 0:
		return a.At
	}
	return math.MaxInt64
}

// fenceOrder explains each key's first grant out of token order, with
// what it cost.
func (e *explainer) fenceOrder(in checkers.Input) []Anomaly {
	r := checkers.FenceOrder{}.Check(e.ctx, in)
	d, _ := r.Details.(*checkers.FenceOrderDetails)
	if d == nil || d.Violations == 0 {
		return nil
	}
	var out []Anomaly
	seen := map[string]bool{}
	for _, v := range checkers.TokenViolations(in) {
		if seen[v.Key] {
			continue
		}
		seen[v.Key] = true
		var cost checkers.FenceCost
		for _, c := range d.Costs {
			if c.Key == v.Key {
				cost = c
			}
		}
		g, p := v.Grant, v.Earlier
		a := Anomaly{Kind: FenceOrderBroken, Key: v.Key, At: max(g.Known, 1), Title: "The lock broke its promise: " + v.String()}
		a.Text = fmt.Sprintf("Client %s was granted token %d on %s (it held the lock by %s), after client %s had been granted token %d (held by %s, before %s asked): "+
			"the lock service's tokens went backwards, which breaks the fencing contract — a store that keeps the highest token refuses the new holders' writes, and one that does not lets two holders write.",
			g.Client, g.Token, v.Key, e.tf.at(g.Known), p.Client, p.Token, e.tf.at(p.Known), g.Client)
		if n := cost.Violations; n > 1 {
			a.Text += fmt.Sprintf(" %s on %s came out of order.", plural(n, "grant"), v.Key)
		}
		a.Text += " " + fenceCostWords(cost)
		a.Faults = e.overlapping(p.Known, g.Known)
		if fw, _ := e.faultWords("", a.Faults, g.Known); fw != "" {
			a.Text += " It happened " + fw + "."
		}
		out = append(out, a)
	}
	return out
}

// blindJumps explains, on illegal keys, an unknown-outcome write whose read
// was not recorded and that a read saw holding v, when no write of the key
// can have left v-1 for it to read (a write of unknown read could have, so
// such keys are left to the generic explanation).
func (e *explainer) blindJumps(in checkers.Input, illegal []string) []Anomaly {
	bad := map[string]bool{}
	for _, k := range illegal {
		bad[k] = true
	}
	if len(bad) == 0 {
		return nil
	}
	// seenBy maps a tag to the first operation that read it.
	seenBy := history.NewOpsIDTable[*history.Op](in.Ops)
	for i := range in.Ops {
		op := &in.Ops[i]
		if c := op.Complete; c != nil && c.Read != nil {
			if seenBy.Get(c.Read.Tag) == nil {
				seenBy.Set(c.Read.Tag, op)
			}
		}
	}
	// Per key: the values writes left (known, or seen), and how many
	// writes of unknown value may have applied (each could add one).
	type keyInfo struct {
		values    map[int64]bool
		wildcards int64
	}
	keys := map[string]*keyInfo{}
	var blind []*history.Op
	for i := range in.Ops {
		op := &in.Ops[i]
		k := op.Invoke.Key
		if op.Invoke.F != history.FCriticalSection || !bad[k] || op.Outcome() == history.Fail {
			continue
		}
		ki := keys[k]
		if ki == nil {
			ki = &keyInfo{values: map[int64]bool{0: true}}
			keys[k] = ki
		}
		switch by := seenBy.Get(op.Invoke.ID); {
		case op.Complete != nil && op.Complete.Read != nil:
			ki.values[op.Complete.Read.Value+1] = true
		case by != nil:
			ki.values[by.Complete.Read.Value] = true
			blind = append(blind, op)
		default:
			ki.wildcards++
		}
	}
	var out []Anomaly
	for _, op := range blind {
		ki := keys[op.Invoke.Key]
		by := seenBy.Get(op.Invoke.ID)
		v := *by.Complete.Read
		reachable := false
		for u := range ki.values {
			if u <= v.Value-1 && v.Value-1 <= u+ki.wildcards {
				reachable = true
				break
			}
		}
		if reachable {
			continue
		}
		who := "Client " + op.Invoke.Client
		if op.Invoke.Client == "" {
			who = fmt.Sprintf("Operation %d", op.Invoke.ID)
		}
		a := Anomaly{Kind: ImpossibleValue, Key: op.Invoke.Key, At: max(by.Complete.Time, 1),
			Title: fmt.Sprintf("Impossible value on %s: %d written by a critical section that can only have written one more than it read", op.Invoke.Key, v.Value)}
		a.Text = fmt.Sprintf("%s's critical section (operation %d), invoked at %s, has an unknown outcome and its read was not recorded; a read at %s saw its write holding %d. "+
			"It writes what it read plus one, so it must have read %d on %s — but no write on %s left %d. The value was not produced by increments: "+
			"something else wrote the key, or an increment in between was lost.",
			who, op.Invoke.ID, e.tf.at(op.Invoke.Time), e.tf.at(by.Complete.Time), v.Value, v.Value-1, op.Invoke.Key, op.Invoke.Key, v.Value-1)
		out = append(out, a)
	}
	return out
}

// fenceCostWords says what a broken fence order cost a key.
func fenceCostWords(c checkers.FenceCost) string {
	s := fmt.Sprintf("From then on the store refused %s on %s", plural(c.Refused, "stale write"), c.Key)
	if c.ToEnd {
		return s + fmt.Sprintf(", and %s never had a successful critical section again (%s to the end).", c.Key, dur(roundDur(c.Stall)))
	}
	return s + fmt.Sprintf("; %s went %s without a successful critical section.", c.Key, dur(roundDur(c.Stall)))
}

// impossible explains the values read that no sequence of increments
// gives.
func (e *explainer) impossible(in checkers.Input) []Anomaly {
	d := e.opts.Summary
	if d == nil {
		r := checkers.Summary{}.Check(e.ctx, in)
		d, _ = r.Details.(*checkers.SummaryDetails)
	}
	if d == nil {
		return nil
	}
	var out []Anomaly
	seen := map[string]bool{}
	for _, ir := range d.Impossible {
		if seen[ir.Key] {
			continue
		}
		seen[ir.Key] = true
		var at int64 = 1
		who := fmt.Sprintf("Operation %d", ir.ID)
		for _, op := range in.Ops {
			if op.Invoke.ID == ir.ID && op.Complete != nil {
				at = max(op.Complete.Time, 1)
				if op.Invoke.Client != "" {
					who = fmt.Sprintf("Client %s (operation %d)", op.Invoke.Client, ir.ID)
				}
			}
		}
		a := Anomaly{Kind: ImpossibleValue, Key: ir.Key, At: at}
		if ir.Value < 0 {
			a.Title = fmt.Sprintf("Impossible value on %s: %d", ir.Key, ir.Value)
			a.Text = fmt.Sprintf("%s read %d on %s at %s: a counter that starts at 0 and only goes up by one never holds a negative value.", who, ir.Value, ir.Key, e.tf.at(at))
		} else {
			a.Title = fmt.Sprintf("Impossible value on %s: %d after at most %s", ir.Key, ir.Value, plural(ir.Max, "increment"))
			a.Text = fmt.Sprintf("%s read %d on %s at %s, but only %s on %s may have applied (acknowledged, or of unknown outcome): "+
				"no sequence of increments reaches %d. Something other than the clients' increments wrote the key, or the store returned a value it was never given.",
				who, ir.Value, ir.Key, e.tf.at(at), plural(ir.Max, "critical section"), ir.Key, ir.Value)
		}
		out = append(out, a)
	}
	return out
}

// explainer holds one history's index.
type explainer struct {
	ctx    context.Context
	opts   ExplainOptions
	tf     timeFmt
	faults []checkers.Window
	keys   []string
	byKey  map[string]*keyHist
	// verified counts the windows checked so far.
	verified int
	// writer maps a tag to the write that wrote it, for the key being
	// explained.
	writer *history.IDTable[*Op]
	// ops are the history's operations; observed marks the tags a read
	// saw.
	ops      []history.Op
	observed *history.IDTable[bool]
}

// keyHist is one key's operations.
type keyHist struct {
	key string
	// ops are the key's operations (indexes into the explainer's ops).
	ops []int32
	// rootSucc lists the writes that read the initial state.
	rootSucc *Op
	// model are the operations the checker judges, in invocation order.
	model []*Op
	// writes are the writes that took effect, in invocation order.
	writes []*Op
	// finals are the ok plain reads, in completion order.
	finals []*Op
}

// index groups the operations by key; a key's Ops are built only while it
// is explained (see build), so the index costs a few bytes per operation
// rather than an Op each.
func (e *explainer) index(in checkers.Input) {
	e.ops = in.Ops
	e.observed = history.NewOpsIDTable[bool](in.Ops)
	for _, op := range in.Ops {
		if c := op.Complete; c != nil && c.Read != nil {
			e.observed.Set(c.Read.Tag, true)
		}
	}
	e.byKey = map[string]*keyHist{}
	e.writer = history.NewOpsIDTable[*Op](in.Ops)
	var last *keyHist
	for i := range in.Ops {
		key := in.Ops[i].Invoke.Key
		k := last
		if k == nil || k.key != key {
			k = e.byKey[key]
		}
		if k == nil {
			k = &keyHist{key: key}
			e.byKey[key] = k
			e.keys = append(e.keys, key)
		}
		k.ops = append(k.ops, int32(i))
		last = k
	}
	sort.Strings(e.keys)
}

// build makes k's Ops: its model, writes and final reads, the writer of
// each tag it wrote, and the successor lists.
func (e *explainer) build(k *keyHist) {
	all := make([]Op, len(k.ops))
	for j, i := range k.ops {
		o := &all[j]
		*o = newOp(&e.ops[i])
		switch {
		case o.F == history.FRead:
			if o.Outcome == history.OK && o.Read != nil {
				k.model = append(k.model, o)
				k.finals = append(k.finals, o)
			}
		case o.F != history.FCriticalSection:
		case o.Outcome == history.OK && o.Read != nil && o.Write != nil,
			o.Outcome == history.Info && e.observed.Get(o.ID) && o.Write != nil,
			// A blind write: it took effect, but what it read is unknown.
			o.Outcome == history.Info && e.observed.Get(o.ID):
			k.model = append(k.model, o)
			k.writes = append(k.writes, o)
			e.writer.Set(o.writeTag(), o)
		case o.Outcome == history.Fail && o.Read != nil:
			k.model = append(k.model, o)
		}
	}
	sort.SliceStable(k.finals, func(i, j int) bool { return k.finals[i].Complete < k.finals[j].Complete })
	// Successor lists, each in order of the writes' landing.
	for i := len(k.writes) - 1; i >= 0; i-- {
		w := k.writes[i]
		if w.Read == nil {
			continue
		}
		if p := e.writer.Get(w.Read.Tag); p != nil && p.Key == k.key {
			w.sibling, p.succ = p.succ, w
		} else if w.Read.Tag == 0 {
			w.sibling, k.rootSucc = k.rootSucc, w
		}
	}
}

// bigKey is the number of operations on one key from which building them
// is worth a forced collection first (once per explanation: later keys
// reuse what earlier ones released).
const bigKey = 100_000

// release drops k's Ops (the anomalies hold copies) once it is explained.
func (e *explainer) release(k *keyHist) {
	for _, w := range k.writes {
		if e.writer.Get(w.writeTag()) == w {
			e.writer.Set(w.writeTag(), nil)
		}
	}
	k.model, k.writes, k.finals, k.rootSucc = nil, nil, nil, nil
}

// chain is the sequence of writes that survived on a key: from the state
// the last read saw back to the initial state.
type chain struct {
	ops []*Op // oldest first
	// rootKnown says the chain reaches the initial state (tag 0).
	rootKnown bool
}

// hasTag reports whether tag is a state of the chain.
func (c *chain) hasTag(e *explainer, tag int64) bool {
	if tag == 0 {
		return c.rootKnown
	}
	w := e.writer.Get(tag)
	return w != nil && w.chainPos >= 0
}

// next is the chain write that read tag, nil when tag is the tip.
func (c *chain) next(e *explainer, tag int64) *Op {
	i := -1
	if w := e.writer.Get(tag); tag != 0 && w != nil {
		i = w.chainPos
	}
	if i+1 < len(c.ops) {
		return c.ops[i+1]
	}
	return nil
}

// writerOf is the write of k that wrote tag, or nil.
func (e *explainer) writerOf(k *keyHist, tag int64) *Op {
	if w := e.writer.Get(tag); w != nil && w.Key == k.key {
		return w
	}
	return nil
}

func (e *explainer) chain(k *keyHist) (*chain, *Op) {
	c := &chain{}
	var final *Op
	tip := int64(-1)
	if n := len(k.finals); n > 0 {
		final = k.finals[n-1]
		if t := final.Read.Tag; t == 0 || e.writerOf(k, t) != nil {
			tip = t
		}
	}
	if tip < 0 {
		// No usable final read: the state is what the last write to land
		// wrote (unfenced stores keep the last write).
		var last *Op
		for _, w := range k.writes {
			if last == nil || w.wrote() > last.wrote() || (w.wrote() == last.wrote() && w.ID > last.ID) {
				last = w
			}
		}
		if last == nil {
			return c, final
		}
		tip = last.writeTag()
		final = nil
	}
	for _, w := range k.writes {
		w.chainPos = -1
	}
	var rev []*Op
	for t := tip; ; {
		if t == 0 {
			c.rootKnown = true
			break
		}
		w := e.writerOf(k, t)
		if w == nil || w.chainPos >= 0 {
			break
		}
		w.chainPos = len(rev) // provisional, fixed below
		rev = append(rev, w)
		if w.Read == nil {
			break // a blind write: what came before is unknown
		}
		t = w.Read.Tag
	}
	slices.Reverse(rev)
	c.ops = rev
	for i, w := range rev {
		w.chainPos = i
	}
	return c, final
}

func (o *Op) writeTag() int64 {
	if o.Write != nil {
		return o.Write.Tag
	}
	return o.ID
}

// explainKey finds the forks in a key's chain of writes: each write that
// took effect but is not on the surviving chain starts (or belongs to) a
// lost branch, and the branch's first write read a state that another write
// also read.
func (e *explainer) explainKey(k *keyHist) []Anomaly {
	if len(k.writes) == 0 {
		return nil
	}
	ch, final := e.chain(k)
	var heads []*Op
	for _, w := range k.writes {
		if w.chainPos < 0 && w.Read != nil && ch.hasTag(e, w.Read.Tag) {
			heads = append(heads, w)
		}
	}
	sort.SliceStable(heads, func(i, j int) bool { return heads[i].wrote() < heads[j].wrote() })
	var out []Anomaly
	for _, h := range heads {
		var branch []*Op
		queue := []*Op{h}
		for len(queue) > 0 {
			w := queue[0]
			queue = queue[1:]
			branch = append(branch, w)
			for s := w.succ; s != nil; s = s.sibling {
				if s.chainPos < 0 {
					queue = append(queue, s)
				}
			}
		}
		sort.SliceStable(branch, func(i, j int) bool { return branch[i].wrote() < branch[j].wrote() })
		out = append(out, e.explainBranch(k, ch, final, h, branch))
	}
	return out
}

// explainBranch explains one lost branch whose first write h read fork
// state t, which the chain continued from with write s.
func (e *explainer) explainBranch(k *keyHist, ch *chain, final *Op, h *Op, branch []*Op) Anomaly {
	t := *h.Read
	s := ch.next(e, t.Tag)
	a := Anomaly{Key: k.key}
	var core []*Op
	switch {
	case s != nil && (s.Bypass || h.Bypass):
		a.Kind = LostUpdate
		core = append([]*Op{s}, branch...)
		e.textBypass(&a, t, s, h, branch)
	case s == nil:
		a.Kind = LostWrite
		core = slices.Clone(branch)
		e.textLostWrite(&a, t, branch, final)
	case s.acq() < h.acq() && s.wrote() > h.acq():
		// s held the lock first and wrote after h was granted: s is the
		// late writer and its write overwrote the branch.
		a.Kind = LostUpdate
		core = append([]*Op{s}, branch...)
		e.textLateSurvived(&a, s, branch)
	case h.acq() < s.acq() && h.wrote() > s.acq():
		// h held the lock first and wrote after s was granted: h's late
		// write landed mid-chain and was itself overwritten later.
		a.Kind = LostUpdate
		core = append(e.textLateOverwritten(&a, h, s, ch, branch), branch...)
	default:
		a.Kind = StaleRead
		core = append([]*Op{s}, branch...)
		e.textStale(&a, t, s, h, branch)
	}
	if a.Kind == LostWrite && final != nil {
		core = append(core, final)
	}
	a.Window = e.window(k, t, core, &a, final)
	return a
}

func withRole(o *Op, role string) Op {
	c := *o
	c.Role = role
	return c
}

func (e *explainer) overlapping(from, to int64) []checkers.Window {
	var out []checkers.Window
	for _, w := range e.faults {
		if w.Start < to && w.End > from {
			out = append(out, w)
		}
	}
	return out
}

// faultWords describes the faults overlapping a client's hold, in the
// words each fault registered, and when the client itself ran again after
// a fault that froze it (0 if none did).
func (e *explainer) faultWords(client string, ws []checkers.Window, before int64) (string, int64) {
	var parts []string
	var resumed int64
	for _, w := range ws {
		self := slices.Contains(w.Targets, client)
		who := "the run"
		if len(w.Targets) > 0 {
			who = list(w.Targets)
		}
		if self {
			who = "it"
		}
		k, known := nemesis.Lookup(w.F)
		var what string
		switch {
		case known && k.Report.Phrase != nil:
			what = "while " + k.Report.Phrase(who, isAre(w.Targets, self))
		default:
			what = "during fault " + w.F + " on " + who
		}
		if w.Detail != "" && (!known || k.Report.QuoteDetail) {
			what += " (" + w.Detail + ")"
		}
		parts = append(parts, what+" "+e.tf.span(w.Start, w.End))
		if known && k.Report.Freezes && self && w.Start < before {
			// The heal is recorded just after the process runs again, so
			// a write can come first: it resumed by then at the latest.
			resumed = max(resumed, min(w.End, before))
		}
	}
	return strings.Join(parts, "; "), resumed
}

// isAre is "was" or "were" for the targets of a fault.
func isAre(targets []string, self bool) string {
	if len(targets) > 1 && !self {
		return "were"
	}
	return "was"
}

// leaseWords says how the late writer's lease ended, given the newer
// holder's grant.
func (e *explainer) leaseWords(late *Op, newerAcq int64) string {
	if e.opts.LeaseTTL <= 0 {
		return ""
	}
	exp := late.acq() + int64(e.opts.LeaseTTL)
	if exp <= newerAcq+int64(50*time.Millisecond) {
		return fmt.Sprintf(" until its lease (TTL %s) expired at about %s", dur(e.opts.LeaseTTL), e.tf.at(exp))
	}
	return fmt.Sprintf(" until it lost its lease (a TTL of %s would have lasted until %s)", dur(e.opts.LeaseTTL), e.tf.at(exp))
}

func fenceWord(o *Op) string {
	if o.Fenced {
		return "fenced"
	}
	return "unfenced"
}

func increments(ops []*Op) string {
	var who []string
	seen := map[string]bool{}
	for _, o := range ops {
		if !seen[o.Client] {
			seen[o.Client] = true
			who = append(who, o.Client+"'s")
		}
	}
	if len(ops) == 1 {
		return who[0] + " increment"
	}
	return fmt.Sprintf("%d increments (%s)", len(ops), list(who))
}

// holdIntro is "client c3 held token 7 on k0 from 10.30 s until its lease
// expired at about 12.30 s, while it was paused from 11.00 s to 13.02 s".
func (e *explainer) holdIntro(a *Anomaly, late *Op, newerAcq int64) (string, int64) {
	a.Faults = e.overlapping(late.acq(), late.wrote())
	fw, resumed := e.faultWords(late.Client, a.Faults, late.wrote())
	s := fmt.Sprintf("Client %s held %s on %s from %s%s", late.Client, tokenWords(late.Token), late.Key, e.tf.at(late.acq()), e.leaseWords(late, newerAcq))
	if fw != "" {
		s += ", " + fw
	}
	return s + ".", resumed
}

// newerWords is "c5 acquired token 8 at 12.41 s and wrote 42 (it read 41);
// 3 more increments followed (c2, c4), up to 45".
func (e *explainer) newerWords(first *Op, rest []*Op) string {
	s := fmt.Sprintf("Client %s acquired %s at %s and wrote %d (it read %d)", first.Client, tokenWords(first.Token), e.tf.at(first.acq()), first.Write.Value, first.Read.Value)
	if len(rest) > 0 {
		var who []string
		seen := map[string]bool{}
		for _, o := range rest {
			if !seen[o.Client] {
				seen[o.Client] = true
				who = append(who, o.Client)
			}
		}
		s += fmt.Sprintf("; %s followed (%s), up to %d", plural(len(rest), "more increment"), list(who), valueOf(rest[len(rest)-1]))
	}
	return s
}

func valueOf(o *Op) int64 {
	if o.Write != nil {
		return o.Write.Value
	}
	if o.Read != nil {
		return o.Read.Value
	}
	return 0
}

func (e *explainer) lateWriteWords(late *Op, resumed int64) string {
	s := "Client " + late.Client + "'s "
	if resumed > 0 {
		s = "Client " + late.Client + " resumed at " + e.tf.at(resumed) + " and its "
	}
	s += fmt.Sprintf("%s write of %d (it had read %d) was accepted at %s", fenceWord(late), late.Write.Value, late.Read.Value, e.tf.at(late.wrote()))
	return s
}

func (e *explainer) textLateSurvived(a *Anomaly, late *Op, branch []*Op) {
	newer := branch[0]
	a.Late = ptr(withRole(late, RoleLate))
	for _, o := range branch {
		a.Lost = append(a.Lost, withRole(o, RoleLost))
		if o.acq() > late.acq() {
			a.Newer = append(a.Newer, withRole(o, RoleNewer))
		}
	}
	intro, resumed := e.holdIntro(a, late, newer.acq())
	last := branch[len(branch)-1]
	a.Title = fmt.Sprintf("Lost update on %s: %s's late write (%s) overwrote %s", late.Key, late.Client, tokenWords(late.Token), increments(branch))
	a.Text = fmt.Sprintf("%s %s. %s, overwriting %d and losing %s.", intro, e.newerWords(newer, branch[1:]),
		e.lateWriteWords(late, resumed), valueOf(last), increments(branch))
	if late.Fenced {
		a.Text += fmt.Sprintf(" The store accepted the fenced write although %s had been granted: fencing did not work.", tokenWords(newer.Token))
	}
}

// textLateOverwritten explains a late write that landed mid-chain; it
// returns the chain writes it rolled back and the one that overwrote it.
func (e *explainer) textLateOverwritten(a *Anomaly, late, s *Op, ch *chain, branch []*Op) []*Op {
	a.Late = ptr(withRole(late, RoleLate))
	for _, o := range branch {
		a.Lost = append(a.Lost, withRole(o, RoleLost))
	}
	// The chain writes between s and the late write's landing were rolled
	// back by it; the first chain write after the branch overwrote it.
	i := s.chainPos
	var rolled []*Op
	var over *Op
	lastBranch := branch[len(branch)-1].wrote()
	for _, w := range ch.ops[i:] {
		if w.wrote() < late.wrote() {
			rolled = append(rolled, w)
		} else if w.wrote() >= lastBranch && over == nil {
			over = w
		}
	}
	if len(rolled) == 0 {
		rolled = []*Op{s}
	}
	for _, o := range rolled {
		a.Newer = append(a.Newer, withRole(o, RoleNewer))
	}
	intro, resumed := e.holdIntro(a, late, s.acq())
	before := s.Write.Value
	if n := len(rolled); n > 0 {
		before = valueOf(rolled[n-1])
	}
	var rest []*Op
	if len(rolled) > 1 {
		rest = rolled[1:]
	}
	a.Title = fmt.Sprintf("Lost update on %s: %s's late write (%s) rolled the counter back from %d to %d", late.Key, late.Client, tokenWords(late.Token), before, late.Write.Value)
	a.Text = fmt.Sprintf("%s %s. %s, rolling %s back from %d to %d.", intro, e.newerWords(s, rest),
		e.lateWriteWords(late, resumed), late.Key, before, late.Write.Value)
	if over != nil {
		a.Overwriter = ptr(withRole(over, RoleOverwriter))
		a.Text += fmt.Sprintf(" Then %s (%s), which had read %d, wrote %d at %s over it, so %s was lost.",
			over.Client, tokenWords(over.Token), over.Read.Value, over.Write.Value, e.tf.at(over.wrote()), increments(branch))
		return append(rolled, over)
	}
	a.Text += fmt.Sprintf(" A later write overwrote it, so %s was lost.", increments(branch))
	return rolled
}

func (e *explainer) textStale(a *Anomaly, t history.Value, s, h *Op, branch []*Op) {
	// The stale reader is whichever of the two got the lock later.
	reader, writer := s, h
	if h.acq() > s.acq() {
		reader, writer = h, s
	}
	a.Late = ptr(withRole(reader, RoleLate))
	for _, o := range branch {
		a.Lost = append(a.Lost, withRole(o, RoleLost))
	}
	a.Faults = e.overlapping(reader.acq(), reader.wrote())
	fw, _ := e.faultWords(reader.Client, a.Faults, reader.wrote())
	ack := ""
	if writer.Outcome == history.OK {
		ack = fmt.Sprintf(", acknowledged at %s", e.tf.at(writer.Complete))
	}
	a.Title = fmt.Sprintf("Stale read on %s: %s read %d after %s had written %d", reader.Key, reader.Client, t.Value, writer.Client, writer.Write.Value)
	a.Text = fmt.Sprintf("Client %s wrote %d on %s (%s) at %s%s. Client %s acquired %s at %s, after that write, yet read %d, the value before it",
		writer.Client, writer.Write.Value, writer.Key, tokenWords(writer.Token), e.tf.at(writer.wrote()), ack,
		reader.Client, tokenWords(reader.Token), e.tf.at(reader.acq()), t.Value)
	if fw != "" {
		a.Text += ", " + fw
	}
	a.Text += fmt.Sprintf(". Its write of %d was accepted at %s: %s was lost. The holds did not overlap, so the store (not the lock) served a stale value.",
		reader.Write.Value, e.tf.at(reader.wrote()), increments(branch))
}

// textBypass explains a fork where one of the writers took no lock.
func (e *explainer) textBypass(a *Anomaly, t history.Value, s, h *Op, branch []*Op) {
	by, other := s, h
	if !s.Bypass {
		by, other = h, s
	}
	a.Late = ptr(withRole(by, RoleLate))
	for _, o := range branch {
		a.Lost = append(a.Lost, withRole(o, RoleLost))
	}
	if !other.Bypass {
		a.Newer = []Op{withRole(other, RoleNewer)}
	}
	a.Faults = e.overlapping(min(by.Invoke, other.acq()), max(by.wrote(), other.wrote()))
	a.Title = fmt.Sprintf("Lost update on %s: %s wrote without the lock", by.Key, by.Client)
	held := fmt.Sprintf("Client %s, holding %s on %s from %s,", other.Client, tokenWords(other.Token), other.Key, e.tf.at(other.acq()))
	if other.Bypass {
		held = fmt.Sprintf("Client %s, another bypass writer,", other.Client)
	}
	a.Text = fmt.Sprintf("Client %s writes without taking the lock or presenting a token (a bypass writer): invoked at %s, it read %d on %s and its write of %d was accepted at %s. "+
		"%s had read %d too and wrote %d at %s. The counter went on from %s's write, so %s was lost: a lock only protects data from clients that take it.",
		by.Client, e.tf.at(by.Invoke), t.Value, by.Key, by.Write.Value, e.tf.at(by.wrote()),
		held, t.Value, other.Write.Value, e.tf.at(other.wrote()), s.Client, increments(branch))
	if fw, _ := e.faultWords(by.Client, a.Faults, by.wrote()); fw != "" {
		a.Text += " It happened " + fw + "."
	}
}

func (e *explainer) textLostWrite(a *Anomaly, t history.Value, branch []*Op, final *Op) {
	h := branch[0]
	a.Late = ptr(withRole(h, RoleLate))
	for _, o := range branch {
		a.Lost = append(a.Lost, withRole(o, RoleLost))
	}
	a.Faults = e.overlapping(h.acq(), h.end())
	a.Title = fmt.Sprintf("Lost write on %s: %s's acknowledged write of %d vanished", h.Key, h.Client, h.Write.Value)
	seen := "no later write built on it"
	if final != nil {
		seen = fmt.Sprintf("the final read at %s saw %d, the value before it", e.tf.at(final.Complete), t.Value)
	}
	a.Text = fmt.Sprintf("Client %s (%s) read %d on %s and its write of %d was acknowledged at %s, but %s; no competing writer explains it, so %s was lost.",
		h.Client, tokenWords(h.Token), t.Value, h.Key, h.Write.Value, e.tf.at(h.Complete), seen, increments(branch))
	if fw, _ := e.faultWords(h.Client, a.Faults, h.end()); fw != "" {
		a.Text += " It happened " + fw + "."
	}
}

func ptr[T any](v T) *T { return &v }

// window cuts the history of a key down to an anomaly: the operations
// invoked and completed within the span of its core operations (the late
// writer's invocation to the last completion among the late writer, the
// overwritten operations and the overwriter), starting from the fork state.
// Operations that read a state neither the fork state nor written inside
// the window are left out, so the window is never illegal merely for having
// been cut out of its history: a legal history gives legal windows. The
// checker is then run on the window alone; if it does not find it illegal
// (or it is too long) the window is the core operations alone, checked in
// turn.
func (e *explainer) window(k *keyHist, prefix history.Value, core []*Op, an *Anomaly, final *Op) *Window {
	w := &Window{Prefix: prefix, KeyOps: len(k.model)}
	a, b := int64(math.MaxInt64), int64(math.MinInt64)
	for _, o := range core {
		a, b = min(a, o.Invoke), max(b, o.end())
	}
	ops := closed(prefix, k.slice(a, b))
	verify := e.verified < e.opts.Verify
	if len(ops) > e.opts.MaxWindowOps || !containsAll(ops, core) || (verify && !e.illegal(prefix, ops)) {
		ops = closed(prefix, core)
		sort.SliceStable(ops, func(i, j int) bool { return ops[i].Invoke < ops[j].Invoke })
		w.Verified = verify && e.illegal(prefix, ops)
	} else {
		w.Verified = verify
	}
	if verify {
		e.verified++
	}
	w.Ops = roles(ops, an, final)
	w.Start, w.End = a, 0
	for _, o := range ops {
		w.Start = min(w.Start, o.Invoke)
		if o.Complete > 0 {
			w.End = max(w.End, o.Complete)
		}
	}
	return w
}

func containsAll(ops, core []*Op) bool {
	in := make(map[*Op]bool, len(ops))
	for _, o := range ops {
		in[o] = true
	}
	for _, o := range core {
		if !in[o] {
			return false
		}
	}
	return true
}

// roles copies ops, marking each with its role in the anomaly.
func roles(ops []*Op, a *Anomaly, final *Op) []Op {
	role := map[int64]string{}
	if final != nil && a.Kind == LostWrite {
		role[final.ID] = RoleFinal
	}
	if a.Overwriter != nil {
		role[a.Overwriter.ID] = RoleOverwriter
	}
	for _, o := range a.Newer {
		role[o.ID] = RoleNewer
	}
	for _, o := range a.Lost {
		role[o.ID] = RoleLost
	}
	if a.Late != nil {
		role[a.Late.ID] = RoleLate
	}
	out := make([]Op, len(ops))
	for i, o := range ops {
		out[i] = withRole(o, role[o.ID])
	}
	return out
}

// slice is the key's checked operations invoked at or after a and
// completed by b, in invocation order.
func (k *keyHist) slice(a, b int64) []*Op {
	i := sort.Search(len(k.model), func(i int) bool { return k.model[i].Invoke >= a })
	var out []*Op
	for _, o := range k.model[i:] {
		if o.Invoke > b {
			break
		}
		if o.end() <= b {
			out = append(out, o)
		}
	}
	return out
}

// closed keeps the operations whose read state is prefix or written by
// another kept operation (repeatedly, so whole dependent chains go), in the
// order given.
func closed(prefix history.Value, ops []*Op) []*Op {
	keep := slices.Clone(ops)
	for {
		written := map[int64]bool{prefix.Tag: true}
		for _, o := range keep {
			if o.F == history.FCriticalSection && o.Outcome != history.Fail {
				written[o.writeTag()] = true
			}
		}
		n := len(keep)
		keep = slices.DeleteFunc(keep, func(o *Op) bool { return o.Read != nil && !written[o.Read.Tag] })
		if len(keep) == n {
			return keep
		}
	}
}

// illegal runs the linearizability checker on ops alone, starting from
// prefix.
func (e *explainer) illegal(prefix history.Value, ops []*Op) bool {
	if len(ops) == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.opts.CheckTimeout)
	defer cancel()
	lin := checkers.NewLinearizable(checkers.LinearizableOptions{Timeout: e.opts.CheckTimeout, Parallelism: 1})
	r := lin.Check(ctx, checkers.NewInput(windowEvents(prefix, ops)))
	return r.Verdict == checkers.Invalid
}

// prefixID is the id of the synthetic operation that sets a window's
// initial state.
const prefixID = -1

func windowEvents(prefix history.Value, ops []*Op) []history.Event {
	var evs []history.Event
	if prefix != (history.Value{}) {
		start := int64(math.MaxInt64)
		for _, o := range ops {
			start = min(start, o.Invoke)
		}
		inv := history.Event{Time: start - 2, Type: history.Invoke, Process: 0, Client: "before", ID: prefixID, F: history.FCriticalSection}
		if len(ops) > 0 {
			inv.Key = ops[0].Key
		}
		done := inv
		done.Time, done.Type = start-1, history.OK
		done.Read, done.Write = &history.Value{}, &prefix
		evs = append(evs, inv, done)
	}
	for _, o := range ops {
		evs = append(evs, o.events()...)
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time < evs[j].Time })
	return evs
}

// events rebuilds the operation's invocation and completion.
func (o *Op) events() []history.Event {
	inv := history.Event{Time: o.Invoke, Type: history.Invoke, Process: o.Process, Client: o.Client, ID: o.ID, F: o.F, Key: o.Key, Fenced: o.Fenced, Bypass: o.Bypass}
	if o.Complete == 0 {
		return []history.Event{inv}
	}
	done := inv
	done.Time, done.Type, done.Token, done.Error = o.Complete, o.Outcome, o.Token, o.Error
	done.Read, done.Write = o.Read, o.Write
	done.Acquired, done.WriteAt, done.Released = o.Acquired, o.WriteAt, o.Released
	return []history.Event{inv, done}
}
