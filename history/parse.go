package history

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Parse reads a whole history held in memory: lines are decoded in
// parallel by a parser that knows Event's flat shape and interns the few
// distinct strings (a line it does not expect, such as one with an escape
// in a string or an unknown field, goes to encoding/json), into one slice.
// A torn last line (one that is not JSON, as a crash mid-write leaves) is
// dropped and reported; any other bad line, a field an event does not have,
// and events that do not fit together (see docs/history-format.md) give a
// [*LineError] wrapping ErrCorrupt that names the line and the field.
func Parse(data []byte) ([]Event, ReadReport, error) {
	var st parseState
	st.events = make([]Event, 0, bytes.Count(data, []byte{'\n'})+1)
	adviseHuge(st.events)
	if err := st.block(data, true); err != nil {
		return st.events, st.rep, err
	}
	return st.finish()
}

// readBlock is how much of a history [ReadFrom] decodes at a time.
var readBlock = 8 << 20

// ReadFrom reads a history from r a block at a time, decoding each block as
// [Parse] does, so that the file's text is never held whole; size, when
// known (else 0), sizes the events slice from the first block's lines.
// Errors are Parse's, and reading errors are wrapped.
func ReadFrom(r io.Reader, size int64) ([]Event, ReadReport, error) {
	var st parseState
	// A small history gets a buffer of its size; one of unknown size
	// starts small, and the buffer doubles up to readBlock as it fills.
	start := min(readBlock, 64<<10)
	if size > 0 {
		start = min(readBlock, int(size)+1)
	}
	buf := make([]byte, start)
	n := 0 // bytes held in buf
	for eof := false; !eof; {
		m, err := io.ReadFull(r, buf[n:])
		n += m
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			eof = true
		case err != nil:
			return nil, st.rep, fmt.Errorf("read history: %w", err)
		}
		end := n
		if !eof {
			end = bytes.LastIndexByte(buf[:n], '\n') + 1
			if end == 0 { // a line longer than the buffer
				buf = append(buf[:n], make([]byte, len(buf))...)
				continue
			}
		}
		if st.events == nil {
			lines := bytes.Count(buf[:end], []byte{'\n'}) + 1
			est := lines
			if size > int64(end) && end > 0 {
				est = int(float64(size)/float64(end)*float64(lines)*1.02) + 16
			}
			st.events = make([]Event, 0, est)
			adviseHuge(st.events)
			st.lineNo = make([]int, 0, est)
		}
		if err := st.block(buf[:end], eof); err != nil {
			return st.events, st.rep, err
		}
		n = copy(buf, buf[end:n])
		if !eof && len(buf) < readBlock {
			grown := make([]byte, min(2*len(buf), readBlock))
			n = copy(grown, buf[:n])
			buf = grown
		}
	}
	return st.finish()
}

// parseState is a history being decoded block by block.
type parseState struct {
	events []Event
	lineNo []int
	line   int // lines seen so far
	rep    ReadReport
	// parsers decode the blocks (one per worker; their interned
	// strings carry over); lines, errs and syntax are a block's, kept for
	// the next one.
	parsers []*eventParser
	lines   [][]byte
	errs    []error
	syntax  []bool
}

// reuse returns (*s)[:n] zeroed, growing *s when needed.
func reuse[T any](s *[]T, n int) []T {
	if cap(*s) < n {
		*s = make([]T, n)
	}
	*s = (*s)[:n]
	clear(*s)
	return *s
}

// block decodes the whole lines of data; last says data ends the history
// (its last line may lack a newline, and be torn).
func (st *parseState) block(data []byte, last bool) error {
	// The per-block slices are reused: garbage makes the collector scan
	// the events decoded so far again.
	lines := st.lines[:0]
	defer func() { st.lines = lines[:0] }()
	first := len(st.events)
	torn := -1
	for rest := data; len(rest) > 0; {
		st.line++
		i := bytes.IndexByte(rest, '\n')
		line := rest
		if i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
			torn = len(lines) // a last line without newline may be torn
		}
		if len(bytes.TrimSpace(line)) == 0 {
			if i < 0 {
				torn = -1
			}
			continue
		}
		lines = append(lines, line)
		st.lineNo = append(st.lineNo, st.line)
	}
	if !last {
		torn = -1
	}
	if cap(st.events)-first < len(lines) {
		st.events = slices.Grow(st.events, len(lines))
	}
	st.events = st.events[:first+len(lines)]
	events := st.events[first:]
	errs := reuse(&st.errs, len(lines))
	// syntax marks lines that are not JSON events at all (as opposed to
	// events that fail validation): only those can be a torn tail.
	syntax := reuse(&st.syntax, len(lines))
	workers := min(runtime.GOMAXPROCS(0), max(1, len(lines)/2000))
	chunk := (len(lines) + workers - 1) / max(workers, 1)
	for len(st.parsers) < workers {
		st.parsers = append(st.parsers, newEventParser(0))
	}
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*chunk, min((w+1)*chunk, len(lines))
		if lo >= hi {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := st.parsers[w]
			p.reserve(hi - lo)
			for i := lo; i < hi; i++ {
				if !p.parse(lines[i], &events[i]) {
					if err, syn := decodeStrict(lines[i], &events[i]); err != nil {
						errs[i], syntax[i] = err, syn
						continue
					}
				}
				if ferr := validate(events[i]); ferr != nil {
					errs[i] = ferr
				}
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			continue
		}
		if i == torn && syntax[i] {
			st.rep.TornTail, st.rep.TornBytes = true, len(lines[i])
			st.events = st.events[:first+i]
			st.lineNo = st.lineNo[:first+i]
			break
		}
		st.events = st.events[:first+i]
		var fe *fieldError
		if errors.As(err, &fe) {
			return fe.at(st.lineNo[first+i])
		}
		return &LineError{Line: st.lineNo[first+i], Msg: err.Error()}
	}
	return nil
}

// finish checks the events together.
func (st *parseState) finish() ([]Event, ReadReport, error) {
	if err := checkSequence(st.events, st.lineNo); err != nil {
		return nil, st.rep, err
	}
	st.rep.Events = len(st.events)
	return st.events, st.rep, nil
}

// eventParser decodes one goroutine's lines.
type eventParser struct {
	strs   map[string]string
	recent [internSlots]string
	values []Value
	b      []byte
	i      int
}

func newEventParser(n int) *eventParser {
	return &eventParser{strs: map[string]string{}, values: make([]Value, 0, n)}
}

// reserve makes room for the values of n more lines: a new slab, as the
// events point into the old one.
func (p *eventParser) reserve(n int) {
	if cap(p.values)-len(p.values) < n {
		p.values = make([]Value, 0, n)
	}
	if len(p.strs) > internMax {
		clear(p.strs) // full of messages: start again for this block
	}
}

// parse decodes line into e, which must be zero (the events slice's new
// slots are: zeroing them again costs a write barrier per pointer while the
// collector runs); false means the line needs encoding/json, which zeroes e
// first.
func (p *eventParser) parse(line []byte, e *Event) bool {
	p.b, p.i = line, 0
	p.ws()
	if !p.eat('{') {
		return false
	}
	p.ws()
	if p.eat('}') {
		return p.end()
	}
	for {
		key, ok := p.rawString()
		if !ok {
			return false
		}
		p.ws()
		if !p.eat(':') {
			return false
		}
		p.ws()
		if !p.field(key, e) {
			return false
		}
		p.ws()
		if p.eat(',') {
			p.ws()
			continue
		}
		if p.eat('}') {
			return p.end()
		}
		return false
	}
}

func (p *eventParser) field(key []byte, e *Event) bool {
	var ok bool
	switch string(key) {
	case "t":
		e.Time, ok = p.int()
	case "type":
		var s string
		s, ok = p.str()
		e.Type = Type(s)
	case "process":
		var n int64
		n, ok = p.int()
		e.Process = int(n)
	case "client":
		e.Client, ok = p.str()
	case "id":
		e.ID, ok = p.int()
	case "f":
		e.F, ok = p.str()
	case "key":
		e.Key, ok = p.str()
	case "fenced":
		e.Fenced, ok = p.bool()
	case "bypass":
		e.Bypass, ok = p.bool()
	case "token":
		var n int64
		n, ok = p.int()
		e.Token = uint64(n)
		ok = ok && n >= 0
	case "read":
		e.Read, ok = p.value()
	case "write":
		e.Write, ok = p.value()
	case "error":
		e.Error, ok = p.str()
	case "msg":
		e.Message, ok = p.str()
	case "release_error":
		e.ReleaseError, ok = p.str()
	case "acquired":
		e.Acquired, ok = p.int()
	case "released":
		e.Released, ok = p.int()
	case "write_at":
		e.WriteAt, ok = p.int()
	case "wait":
		e.Wait, ok = p.int()
	case "hold":
		e.Hold, ok = p.int()
	case "renew_failures":
		var n int64
		n, ok = p.int()
		e.RenewFailures = int(n)
	case "phase":
		e.Phase, ok = p.str()
	case "targets":
		e.Targets, ok = p.strList()
	case "detail":
		e.Detail, ok = p.str()
	}
	return ok
}

func (p *eventParser) end() bool {
	p.ws()
	return p.i == len(p.b)
}

func (p *eventParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\r', '\n':
			p.i++
		default:
			return
		}
	}
}

func (p *eventParser) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// rawString reads a string without escapes.
func (p *eventParser) rawString() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	ascii := true
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			// encoding/json replaces invalid UTF-8; leave such strings
			// to it.
			return s, ascii || utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= 0x80:
			ascii = false
		}
		p.i++
	}
	return nil, false
}

// internMax bounds an eventParser's map of interned strings.
const internMax = 4096

// internSlots is the size of an eventParser's cache of recent strings.
const internSlots = 256

func (p *eventParser) str() (string, bool) {
	raw, ok := p.rawString()
	if !ok {
		return "", false
	}
	// Most strings are a few names (types, clients, keys) repeated on
	// every line: a small cache indexed by a hash of the bytes answers
	// them without the map.
	h := uint32(2166136261)
	for _, c := range raw {
		h = (h ^ uint32(c)) * 16777619
	}
	slot := &p.recent[h%internSlots]
	if *slot == string(raw) {
		return *slot, true
	}
	if s, ok := p.strs[string(raw)]; ok {
		*slot = s
		return s, true
	}
	if len(p.strs) > internMax {
		return string(raw), true // messages and the like: not worth interning
	}
	s := string(raw)
	p.strs[s] = s
	*slot = s
	return s, true
}

// int reads a JSON integer; false (leaving it to encoding/json) for
// anything else, including one out of int64's range.
func (p *eventParser) int() (int64, bool) {
	start := p.i
	neg := p.i < len(p.b) && p.b[p.i] == '-'
	if neg {
		p.i++
	}
	digits := p.i
	var n uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		n = n*10 + uint64(p.b[p.i]-'0')
		p.i++
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return 0, false
	}
	switch nd := p.i - digits; {
	case nd == 0:
		return 0, false
	case nd > 1 && p.b[digits] == '0':
		return 0, false // JSON has no leading zeros; let encoding/json refuse it
	case nd >= 19: // may overflow: the careful way
		v, err := strconv.ParseInt(string(p.b[start:p.i]), 10, 64)
		return v, err == nil
	case neg:
		return -int64(n), true
	}
	return int64(n), true
}

func (p *eventParser) bool() (bool, bool) {
	switch {
	case bytes.HasPrefix(p.b[p.i:], []byte("true")):
		p.i += 4
		return true, true
	case bytes.HasPrefix(p.b[p.i:], []byte("false")):
		p.i += 5
		return false, true
	}
	return false, false
}

func (p *eventParser) value() (*Value, bool) {
	if bytes.HasPrefix(p.b[p.i:], []byte("null")) {
		p.i += 4
		return nil, true
	}
	if !p.eat('{') {
		return nil, false
	}
	var v Value
	p.ws()
	for closed := p.eat('}'); !closed; {
		key, ok := p.rawString()
		if !ok {
			return nil, false
		}
		p.ws()
		if !p.eat(':') {
			return nil, false
		}
		p.ws()
		n, ok := p.int()
		if !ok {
			return nil, false
		}
		switch string(key) {
		case "value":
			v.Value = n
		case "tag":
			v.Tag = n
		default:
			return nil, false
		}
		if closed, ok = p.next('}'); !ok {
			return nil, false
		}
	}
	if len(p.values) == cap(p.values) {
		p.values = make([]Value, 0, max(64, cap(p.values)))
	}
	p.values = append(p.values, v)
	return &p.values[len(p.values)-1], true
}

func (p *eventParser) strList() ([]string, bool) {
	if bytes.HasPrefix(p.b[p.i:], []byte("null")) {
		p.i += 4
		return nil, true
	}
	if !p.eat('[') {
		return nil, false
	}
	out := []string{}
	p.ws()
	for closed := p.eat(']'); !closed; {
		s, ok := p.str()
		if !ok {
			return nil, false
		}
		out = append(out, s)
		if closed, ok = p.next(']'); !ok {
			return nil, false
		}
	}
	return out, true
}

// next consumes what follows an element of an object or array: a comma
// (then another element must come) or the closing bracket.
func (p *eventParser) next(closing byte) (closed, ok bool) {
	p.ws()
	switch {
	case p.eat(','):
		p.ws()
		return false, p.i < len(p.b) && p.b[p.i] != closing
	case p.eat(closing):
		return true, true
	default:
		return false, false
	}
}
