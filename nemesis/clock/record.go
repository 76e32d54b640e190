package clock

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Record describes one clock fault. Its String form is the fault's Detail
// in the history and in results.json, space-separated key=value pairs:
//
//	mode=bump target=n1 group=node via=shim clocks=realtime offset=+3.2s observed=+3.201s uncertainty=2ms
//	mode=strobe target=c2 group=client via=vdso clocks=realtime,monotonic offsets=+2.5s,-2.5s period=50ms..200ms observed=+2.5s
//	mode=drift target=n1,n3,n4 group=node via=shim clocks=realtime rate=1.25x observed=+3ms uncertainty=2ms
//
// [ParseRecord] reads it back.
type Record struct {
	// Mode is ModeBump or ModeStrobe.
	Mode string
	// Target is the node whose main process was skewed, or the nodes,
	// comma-separated, when one fault skews several alike.
	Target string
	// Group is the target group it was drawn from.
	Group string
	// Via is the mechanism: ViaVDSO or ViaShim (both, comma-separated,
	// when the targets differ).
	Via string
	// Clocks are the clocks skewed ("realtime", "monotonic").
	Clocks []string
	// Offsets is the bump's offset, or the strobe's two (it starts at the
	// first).
	Offsets []time.Duration
	// PeriodMin and PeriodMax bound a strobe's time between flips.
	PeriodMin, PeriodMax time.Duration
	// Rate is a drift's rate, a factor of true time (1.25: a quarter
	// fast), from the fault's start.
	Rate float64
	// Observed is the CLOCK_REALTIME offset read back from the (first)
	// process once the fault was in force (a drift's: just after it
	// started, near zero).
	Observed time.Duration
	// Uncertainty bounds how far Observed may be from the offset the
	// process had (half the observation's round trip; zero when unknown,
	// and then not written).
	Uncertainty time.Duration
}

// String formats r as key=value pairs.
func (r Record) String() string {
	parts := []string{"mode=" + r.Mode, "target=" + r.Target, "group=" + r.Group, "via=" + r.Via, "clocks=" + strings.Join(r.Clocks, ",")}
	offs := make([]string, len(r.Offsets))
	for i, o := range r.Offsets {
		offs[i] = signed(o)
	}
	switch r.Mode {
	case ModeStrobe:
		parts = append(parts, "offsets="+strings.Join(offs, ","), fmt.Sprintf("period=%s..%s", r.PeriodMin, r.PeriodMax))
	case ModeDrift:
		parts = append(parts, "rate="+strconv.FormatFloat(r.Rate, 'g', -1, 64)+"x")
	default:
		parts = append(parts, "offset="+strings.Join(offs, ","))
	}
	parts = append(parts, "observed="+signed(r.Observed))
	if r.Uncertainty > 0 {
		parts = append(parts, "uncertainty="+r.Uncertainty.String())
	}
	return strings.Join(parts, " ")
}

// ParseRecord reads a Record from its String form (a fault's Detail).
func ParseRecord(s string) (Record, error) {
	var r Record
	for _, kv := range strings.Fields(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return r, fmt.Errorf("clock fault detail %q: %q is not key=value", s, kv)
		}
		var err error
		switch k {
		case "mode":
			r.Mode = v
		case "target":
			r.Target = v
		case "group":
			r.Group = v
		case "via":
			r.Via = v
		case "clocks":
			r.Clocks = strings.Split(v, ",")
		case "offset", "offsets":
			for _, o := range strings.Split(v, ",") {
				d, perr := time.ParseDuration(o)
				if perr != nil {
					err = perr
					break
				}
				r.Offsets = append(r.Offsets, d)
			}
		case "period":
			lo, hi, _ := strings.Cut(v, "..")
			var e1, e2 error
			r.PeriodMin, e1 = time.ParseDuration(lo)
			r.PeriodMax, e2 = time.ParseDuration(hi)
			if e1 != nil {
				err = e1
			} else {
				err = e2
			}
		case "rate":
			r.Rate, err = strconv.ParseFloat(strings.TrimSuffix(v, "x"), 64)
		case "observed":
			r.Observed, err = time.ParseDuration(v)
		case "uncertainty":
			r.Uncertainty, err = time.ParseDuration(v)
		}
		if err != nil {
			return r, fmt.Errorf("clock fault detail %q: %s: %w", s, k, err)
		}
	}
	if r.Mode == "" || r.Target == "" || (len(r.Offsets) == 0 && r.Rate == 0 && r.Mode != ModeDrift) {
		return r, fmt.Errorf("clock fault detail %q: want at least mode, target and offset (or a drift's rate)", s)
	}
	return r, nil
}

// signed formats d with an explicit sign when it is positive.
func signed(d time.Duration) string {
	if d > 0 {
		return "+" + d.String()
	}
	return d.String()
}
