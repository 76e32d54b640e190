package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/splitbrain/splitbrain/checkers"
	"github.com/splitbrain/splitbrain/history"
	"github.com/splitbrain/splitbrain/nemesis"
)

// The report's charts are plain SVG drawn here and written by html/template
// (which escapes every label). Large histories are downsampled into time
// buckets, so a chart has at most a few thousand elements whatever the
// number of operations.

// chart is one SVG figure; every coordinate is preformatted.
type chart struct {
	ID     string
	Title  string
	Desc   string
	Width  int
	Height int
	// Bands are shaded fault windows, under everything else.
	Bands []svgRect
	Grid  []svgLine
	Rects []svgRect
	Lines []svgLine
	Polys []svgPoly
	Dots  []svgDot
	Texts []svgText
	// Legend is shown under the chart.
	Legend []legendItem
	// Note says what was left out or merged.
	Note string
}

type svgRect struct {
	X, Y, W, H  string
	Fill, Class string
	Title       string
}

type svgLine struct {
	X1, Y1, X2, Y2 string
	Stroke, Class  string
	Title          string
}

type svgPoly struct {
	Points string
	Stroke string
	Class  string
	Title  string
}

type svgDot struct {
	CX, CY, R string
	Fill      string
	Title     string
}

type svgText struct {
	X, Y   string
	Text   string
	Anchor string
	Class  string
}

type legendItem struct {
	Color, Label, Class string
}

// Colors of the outcomes and roles.
var (
	outcomeColor = map[history.Type]string{history.OK: "#2e7d32", history.Fail: "#ef6c00", history.Info: "#7b1fa2"}
	outcomes     = []history.Type{history.OK, history.Fail, history.Info}
	keyColors    = []string{"#4e79a7", "#59a14f", "#b07aa1", "#9c755f", "#76b7b2", "#edc948", "#ff9da7", "#bab0ac"}
	roleColor    = map[string]string{
		RoleLate: "#f57c00", RoleLost: "#c62828", RoleNewer: "#1565c0", RoleOverwriter: "#6a1b9a", RoleFinal: "#2e7d32", "": "#9e9e9e",
	}
)

// faultColor is the colour the fault called f registered (blue for a
// fault this program does not know).
func faultColor(f string) string {
	if k, ok := nemesis.Lookup(f); ok && k.Report.Color != "" {
		return k.Report.Color
	}
	return "#1e88e5"
}

// freezes says whether the fault called f stops its targets until heal.
func freezes(f string) bool {
	k, ok := nemesis.Lookup(f)
	return ok && k.Report.Freezes
}

// Plot geometry.
const (
	chartWidth = 1000
	padLeft    = 70
	padRight   = 16
	padTop     = 34
	padBottom  = 30
)

// xAxis maps run time onto the plot's width.
type xAxis struct {
	t0, t1 int64
	x0, x1 float64
	tf     timeFmt
}

func newXAxis(t0, t1 int64, tf timeFmt) xAxis {
	if t1 <= t0 {
		t1 = t0 + 1
	}
	return xAxis{t0: t0, t1: t1, x0: padLeft, x1: chartWidth - padRight, tf: tf}
}

func (a xAxis) x(t int64) float64 {
	t = min(max(t, a.t0), a.t1)
	return a.x0 + (a.x1-a.x0)*float64(t-a.t0)/float64(a.t1-a.t0)
}

// ticks are round times across the axis, with labels.
func (a xAxis) ticks() []int64 {
	span := float64(a.t1 - a.t0)
	step := niceStep(span / 10)
	// Round times counted from the origin (the test's start).
	o := float64(a.tf.origin)
	first := math.Ceil((float64(a.t0)-o)/step) * step
	var out []int64
	for t := first; t <= float64(a.t1)-o; t += step {
		out = append(out, int64(t+o))
	}
	return out
}

func (a xAxis) label(t int64) string {
	t -= a.tf.origin
	if a.tf.div == 1 {
		return strconv.FormatInt(t, 10) + " ns"
	}
	v := float64(t) / a.tf.div
	prec := 0
	if step := niceStep(float64(a.t1-a.t0)/10) / a.tf.div; step < 1 {
		prec = int(math.Ceil(-math.Log10(step)))
	}
	return strconv.FormatFloat(v, 'f', prec, 64) + " " + a.tf.unit
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// frame draws the x grid, the fault bands and their labels for a plot area
// from y0 to y1.
func (c *chart) frame(ax xAxis, y0, y1 float64, faults []checkers.Window) {
	for _, t := range ax.ticks() {
		x := num(ax.x(t))
		c.Grid = append(c.Grid, svgLine{X1: x, Y1: num(y0), X2: x, Y2: num(y1), Class: "grid"})
		c.Texts = append(c.Texts, svgText{X: x, Y: num(y1 + 16), Text: ax.label(t), Anchor: "middle", Class: "tick"})
	}
	c.Lines = append(c.Lines, svgLine{X1: num(ax.x0), Y1: num(y1), X2: num(ax.x1), Y2: num(y1), Class: "axis"})
	var rowEnd [2]float64
	for _, w := range faults {
		if w.End < ax.t0 || w.Start > ax.t1 {
			continue
		}
		x0, x1 := ax.x(w.Start), ax.x(w.End)
		label := faultLabel(w)
		c.Bands = append(c.Bands, svgRect{
			X: num(x0), Y: num(y0), W: num(max(x1-x0, 1.5)), H: num(y1 - y0), Fill: faultColor(w.F), Class: "fault",
			Title: fmt.Sprintf("%s: %s", label, ax.tf.span(w.Start, w.End)),
		})
		// Labels go in one of two rows above the plot, wherever they fit.
		width := float64(len(label))*6.2 + 6
		row := 0
		if x0 < rowEnd[0] {
			row = 1
		}
		if x0 >= rowEnd[row] || row == 1 {
			rowEnd[row] = x0 + width
			c.Texts = append(c.Texts, svgText{X: num(x0 + 2), Y: num(y0 - 18 + float64(row)*11), Text: label, Class: "flabel"})
		}
	}
}

func faultLabel(w checkers.Window) string {
	if len(w.Targets) == 0 {
		return w.F
	}
	return w.F + " " + strings.Join(w.Targets, ",")
}

// latencyChart plots each critical section's latency (completion minus
// invocation) against its invocation time, per outcome, on a log scale:
// in each time bucket the range (min to max) as a line and the median as
// a dot.
func latencyChart(ops []history.Op, ax xAxis, faults []checkers.Window) chart {
	const buckets = 200
	h := 240
	y0, y1 := float64(padTop), float64(h-padBottom)
	c := chart{ID: "latency", Title: "Latency over time", Width: chartWidth, Height: h,
		Desc: "Latency of each critical section by invocation time, per outcome, log scale; fault windows shaded."}
	type cell struct{ lat []int64 }
	cells := map[history.Type][]cell{}
	for _, o := range outcomes {
		cells[o] = make([]cell, buckets)
	}
	lo, hi := int64(math.MaxInt64), int64(0)
	n := 0
	for _, op := range ops {
		if op.Invoke.F != history.FCriticalSection || op.Complete == nil {
			continue
		}
		lat := max(op.Complete.Time-op.Invoke.Time, 1)
		b := bucketOf(op.Invoke.Time, ax, buckets)
		cs := cells[op.Complete.Type]
		if cs == nil {
			continue
		}
		cs[b].lat = append(cs[b].lat, lat)
		lo, hi = min(lo, lat), max(hi, lat)
		n++
	}
	if n == 0 {
		c.Note = "No completed critical sections."
		c.frame(ax, y0, y1, faults)
		return c
	}
	dlo := math.Floor(math.Log10(float64(lo)))
	dhi := math.Ceil(math.Log10(float64(hi)))
	if dhi <= dlo {
		dhi = dlo + 1
	}
	y := func(v int64) float64 {
		return y1 - (y1-y0)*(math.Log10(float64(max(v, 1)))-dlo)/(dhi-dlo)
	}
	for d := dlo; d <= dhi; d++ {
		yy := num(y(int64(math.Pow(10, d))))
		c.Grid = append(c.Grid, svgLine{X1: num(ax.x0), Y1: yy, X2: num(ax.x1), Y2: yy, Class: "grid"})
		c.Texts = append(c.Texts, svgText{X: num(ax.x0 - 6), Y: yy, Text: dur(time.Duration(math.Pow(10, d))), Anchor: "end", Class: "tick ymid"})
	}
	c.frame(ax, y0, y1, faults)
	width := (ax.x1 - ax.x0) / buckets
	for _, o := range outcomes {
		count := 0
		for b, cl := range cells[o] {
			if len(cl.lat) == 0 {
				continue
			}
			count += len(cl.lat)
			slices.Sort(cl.lat)
			x := num(ax.x0 + width*(float64(b)+0.5))
			mn, md, mx := cl.lat[0], cl.lat[len(cl.lat)/2], cl.lat[len(cl.lat)-1]
			title := fmt.Sprintf("%s: %d ops, median %s, max %s", o, len(cl.lat), dur(time.Duration(md)), dur(time.Duration(mx)))
			if mx > mn {
				c.Lines = append(c.Lines, svgLine{X1: x, Y1: num(y(mn)), X2: x, Y2: num(y(mx)), Stroke: outcomeColor[o], Class: "range", Title: title})
			}
			c.Dots = append(c.Dots, svgDot{CX: x, CY: num(y(md)), R: "2.2", Fill: outcomeColor[o], Title: title})
		}
		c.Legend = append(c.Legend, legendItem{Color: outcomeColor[o], Label: fmt.Sprintf("%s (%d)", o, count)})
	}
	c.Legend = append(c.Legend, faultLegend(faults)...)
	c.Note = fmt.Sprintf("%d critical sections in %d time buckets of %s: dot = median, line = min to max.", n, buckets, dur(time.Duration((ax.t1-ax.t0)/buckets)))
	return c
}

func faultLegend(faults []checkers.Window) []legendItem {
	seen := map[string]bool{}
	var out []legendItem
	for _, w := range faults {
		if !seen[w.F] {
			seen[w.F] = true
			out = append(out, legendItem{Color: faultColor(w.F), Label: w.F + " (fault)", Class: "band"})
		}
	}
	return out
}

func bucketOf(t int64, ax xAxis, buckets int) int {
	b := int(float64(t-ax.t0) / float64(ax.t1-ax.t0) * float64(buckets))
	return min(max(b, 0), buckets-1)
}

// throughputChart plots completed critical sections per second by
// completion time, per outcome.
func throughputChart(ops []history.Op, ax xAxis, faults []checkers.Window) chart {
	h := 220
	y0, y1 := float64(padTop), float64(h-padBottom)
	c := chart{ID: "throughput", Title: "Throughput over time", Width: chartWidth, Height: h,
		Desc: "Completed critical sections per second, per outcome; fault windows shaded."}
	span := ax.t1 - ax.t0
	width := int64(niceStep(float64(span) / 100))
	width = max(width, 1)
	buckets := int(span/width) + 1
	counts := map[history.Type][]int{}
	for _, o := range outcomes {
		counts[o] = make([]int, buckets)
	}
	for _, op := range ops {
		if op.Invoke.F != history.FCriticalSection || op.Complete == nil || op.Complete.Time < ax.t0 {
			continue
		}
		b := min(int((op.Complete.Time-ax.t0)/width), buckets-1)
		if cs := counts[op.Complete.Type]; cs != nil {
			cs[b]++
		}
	}
	perSec := float64(time.Second) / float64(width)
	peak := 0.0
	for _, o := range outcomes {
		for _, n := range counts[o] {
			peak = max(peak, float64(n)*perSec)
		}
	}
	top := niceStep(max(peak, 1) / 4)
	ymax := math.Ceil(max(peak, 1)/top) * top
	y := func(v float64) float64 { return y1 - (y1-y0)*v/ymax }
	for v := 0.0; v <= ymax+top/2; v += top {
		yy := num(y(v))
		c.Grid = append(c.Grid, svgLine{X1: num(ax.x0), Y1: yy, X2: num(ax.x1), Y2: yy, Class: "grid"})
		c.Texts = append(c.Texts, svgText{X: num(ax.x0 - 6), Y: yy, Text: trimFloat(v, 1) + "/s", Anchor: "end", Class: "tick ymid"})
	}
	c.frame(ax, y0, y1, faults)
	for _, o := range outcomes {
		var pts strings.Builder
		total := 0
		for b, n := range counts[o] {
			total += n
			xa := ax.x(ax.t0 + int64(b)*width)
			xb := ax.x(ax.t0 + int64(b+1)*width)
			yy := num(y(float64(n) * perSec))
			fmt.Fprintf(&pts, "%s,%s %s,%s ", num(xa), yy, num(xb), yy)
		}
		if total == 0 {
			continue
		}
		c.Polys = append(c.Polys, svgPoly{Points: strings.TrimSpace(pts.String()), Stroke: outcomeColor[o], Class: "series",
			Title: fmt.Sprintf("%s: %d completions", o, total)})
		c.Legend = append(c.Legend, legendItem{Color: outcomeColor[o], Label: fmt.Sprintf("%s (%d)", o, total)})
	}
	c.Legend = append(c.Legend, faultLegend(faults)...)
	c.Note = fmt.Sprintf("Completions per %s bucket, as operations per second.", dur(time.Duration(width)))
	return c
}

// naturalLess orders client names c2 before c10.
func naturalLess(a, b string) bool {
	ta, na := splitNum(a)
	tb, nb := splitNum(b)
	if ta != tb {
		return ta < tb
	}
	if na != nb {
		return na < nb
	}
	return a < b
}

func splitNum(s string) (string, int) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	n, err := strconv.Atoi(s[i:])
	if err != nil {
		return s, -1
	}
	return s[:i], n
}

// maxDrawnHolds is the number of holds drawn one by one; beyond it each
// client's holds closer than a pixel are merged into one bar.
const maxDrawnHolds = 3000

// timelineChart draws each client's critical sections as bars on its own
// row (who held which key with which token when), marks each write, shades
// the client's own pauses and highlights overlapping holds. It returns the
// number of overlapping pairs.
func timelineChart(holds []checkers.Hold, ax xAxis, faults []checkers.Window, late map[int64]bool) (chart, int) {
	var clients []string
	seen := map[string]bool{}
	for _, h := range holds {
		if !seen[h.Client] {
			seen[h.Client] = true
			clients = append(clients, h.Client)
		}
	}
	sort.Slice(clients, func(i, j int) bool { return naturalLess(clients[i], clients[j]) })
	row := map[string]int{}
	for i, c := range clients {
		row[c] = i
	}
	const rowH, gap = 18.0, 6.0
	y0 := float64(padTop)
	y1 := y0 + float64(max(len(clients), 1))*(rowH+gap)
	c := chart{ID: "timeline", Title: "Critical sections per client", Width: chartWidth, Height: int(y1) + padBottom,
		Desc: "One row per client; each bar is a hold of a key's lock, labelled with its token; overlapping holds outlined in red."}
	c.frame(ax, y0, y1, faults)
	ry := func(client string) float64 { return y0 + float64(row[client])*(rowH+gap) + gap/2 }
	for _, cl := range clients {
		c.Texts = append(c.Texts, svgText{X: num(ax.x0 - 6), Y: num(ry(cl) + rowH/2), Text: cl, Anchor: "end", Class: "rowlabel ymid"})
	}
	// The client's own pauses (faults that freeze it), on its row.
	for _, w := range faults {
		if !freezes(w.F) {
			continue
		}
		for _, t := range w.Targets {
			if _, ok := row[t]; ok {
				x0, x1 := ax.x(w.Start), ax.x(w.End)
				c.Rects = append(c.Rects, svgRect{X: num(x0), Y: num(ry(t) - gap/2 + 1), W: num(max(x1-x0, 1)), H: num(rowH + gap - 2), Class: "paused",
					Title: fmt.Sprintf("%s paused %s", t, ax.tf.span(w.Start, w.End))})
			}
		}
	}
	keys := map[string]string{}
	var keyNames []string
	for _, h := range holds {
		if _, ok := keys[h.Key]; !ok {
			keys[h.Key] = ""
			keyNames = append(keyNames, h.Key)
		}
	}
	sort.Slice(keyNames, func(i, j int) bool { return naturalLess(keyNames[i], keyNames[j]) })
	for i, k := range keyNames {
		keys[k] = keyColors[i%len(keyColors)]
		c.Legend = append(c.Legend, legendItem{Color: keys[k], Label: "key " + k})
	}
	overlapped, pairs := overlaps(holds)
	merge := len(holds) > maxDrawnHolds
	// Each client's holds, in order of start (holds are).
	byClient := make([][]checkers.Hold, len(clients))
	counts := make([]int, len(clients))
	for i := range holds {
		counts[row[holds[i].Client]]++
	}
	for i, n := range counts {
		byClient[i] = make([]checkers.Hold, 0, n)
	}
	for _, h := range holds {
		byClient[row[h.Client]] = append(byClient[row[h.Client]], h)
	}
	drawn, merged := 0, 0
	for ci, cl := range clients {
		hs := byClient[ci]
		y := ry(cl)
		for i := 0; i < len(hs); {
			h := hs[i]
			j := i + 1
			x1 := ax.x(h.End)
			if merge {
				for j < len(hs) && ax.x(hs[j].Start)-x1 < 1 {
					x1 = max(x1, ax.x(hs[j].End))
					j++
				}
			}
			if j == i+1 {
				c.holdBar(h, ax, y, rowH, keys[h.Key], overlapped[h.ID], late[h.ID], !merge)
				drawn++
				i = j
				continue
			}
			// A merged bar: the key's colour if all share one, outlined if
			// any of them overlapped another hold.
			fill, class, nOver, end := keys[h.Key], "hold merged", 0, h.End
			for _, m := range hs[i:j] {
				if keys[m.Key] != fill {
					fill = "#90a4ae"
				}
				if overlapped[m.ID] {
					nOver++
				}
				end = max(end, m.End)
			}
			if nOver > 0 {
				class += " overlap"
			}
			x0 := ax.x(h.Start)
			c.Rects = append(c.Rects, svgRect{X: num(x0), Y: num(y), W: num(max(x1-x0, 1)), H: num(rowH), Fill: fill, Class: class,
				Title: fmt.Sprintf("%s: %d holds %s, %d of them overlapping another", cl, j-i, ax.tf.span(h.Start, end), nOver)})
			merged += j - i
			// Late and refused writes keep their marks.
			for _, m := range hs[i:j] {
				if late[m.ID] || m.Error == history.ErrStaleToken {
					c.writeTick(m, ax, y, rowH, late[m.ID])
				}
			}
			i = j
		}
	}
	// The overlaps themselves, underlined on both rows (adjacent ones
	// merged per row when there are many).
	type span struct{ s, e int64 }
	under := map[string][]span{}
	for _, p := range pairs {
		s, e := p.Second.Start, min(p.First.End, p.Second.End)
		under[p.First.Client] = append(under[p.First.Client], span{s, e})
		under[p.Second.Client] = append(under[p.Second.Client], span{s, e})
	}
	for _, cl := range clients {
		spans := under[cl]
		sort.Slice(spans, func(i, j int) bool { return spans[i].s < spans[j].s })
		for i := 0; i < len(spans); {
			s, e, n := spans[i].s, spans[i].e, 1
			j := i + 1
			for merge && j < len(spans) && ax.x(spans[j].s)-ax.x(e) < 1 {
				e = max(e, spans[j].e)
				j, n = j+1, n+1
			}
			title := fmt.Sprintf("%s overlapped another holder %s", cl, ax.tf.span(s, e))
			if n > 1 {
				title = fmt.Sprintf("%s: %d overlaps %s", cl, n, ax.tf.span(s, e))
			}
			c.Rects = append(c.Rects, svgRect{X: num(ax.x(s)), Y: num(ry(cl) + rowH - 4), W: num(max(ax.x(e)-ax.x(s), 1.5)), H: "4", Class: "ovl", Title: title})
			i = j
		}
	}
	c.Legend = append(c.Legend, legendItem{Color: "#d32f2f", Label: "overlapping hold", Class: "outline"},
		legendItem{Color: "#000", Label: "write sent", Class: "tick"},
		legendItem{Color: "#d32f2f", Label: "late write accepted / refused (dashed)", Class: "tick"})
	c.Legend = append(c.Legend, faultLegend(faults)...)
	if merged > 0 {
		c.Note = fmt.Sprintf("%d holds: %d drawn one by one, %d closer than a pixel merged into bars (grey when of several keys).", len(holds), drawn, merged)
	}
	if len(holds) == 0 {
		c.Note = "No client was granted a lock."
	}
	return c, len(pairs)
}

func (c *chart) holdBar(h checkers.Hold, ax xAxis, y, rowH float64, fill string, overlap, late, ticks bool) {
	x0, x1 := ax.x(h.Start), ax.x(h.End)
	w := max(x1-x0, 1)
	class := "hold"
	if overlap {
		class += " overlap"
	}
	title := fmt.Sprintf("%s held %s %s (op %d, %s", h.Client, h.Key, ax.tf.span(h.Start, h.End), h.ID, h.Outcome)
	if h.Token != 0 {
		title = fmt.Sprintf("%s held %s with token %d %s (op %d, %s", h.Client, h.Key, h.Token, ax.tf.span(h.Start, h.End), h.ID, h.Outcome)
	}
	if h.Error != "" {
		title += " " + h.Error
	}
	title += ")"
	if h.WriteAt > 0 {
		title += "; write sent at " + ax.tf.at(h.WriteAt)
	}
	c.Rects = append(c.Rects, svgRect{X: num(x0), Y: num(y), W: num(w), H: num(rowH), Fill: fill, Class: class, Title: title})
	if label := holdLabel(h, w); label != "" {
		c.Texts = append(c.Texts, svgText{X: num(x0 + w/2), Y: num(y + rowH/2), Text: label, Anchor: "middle", Class: "barlabel ymid"})
	}
	if h.WriteAt > 0 && (ticks || late || h.Error == history.ErrStaleToken) {
		c.writeTick(h, ax, y, rowH, late)
	}
}

// holdLabel is what a hold's bar of w pixels carries: its fencing token
// and how long it was held ("token 17, held 1.2 s"), else "token 17", else
// on a short bar the token's number alone (the section's note says what a
// bare number is), else nothing; a hold without a token says how long it
// was held where that fits.
func holdLabel(h checkers.Hold, w float64) string {
	var labels []string
	if h.End >= h.Start && h.End != math.MaxInt64 {
		labels = append(labels, "held "+dur(time.Duration(h.End-h.Start).Round(time.Millisecond)))
	}
	if h.Token != 0 {
		token := "token " + strconv.FormatUint(h.Token, 10)
		if len(labels) > 0 {
			labels[0] = token + ", " + labels[0]
		}
		labels = append(labels, token, strconv.FormatUint(h.Token, 10))
	}
	for _, l := range labels {
		if w >= float64(len(l))*5.6+6 {
			return l
		}
	}
	return ""
}

// writeTick marks when a hold's write was sent: red when it was a late
// write that was accepted, red and dashed when the store refused it.
func (c *chart) writeTick(h checkers.Hold, ax xAxis, y, rowH float64, late bool) {
	stroke, cls, what := "#000", "wtick", "write sent"
	switch {
	case h.Error == history.ErrStaleToken:
		stroke, cls, what = "#d32f2f", "wtick refused", "write refused (stale token), sent"
	case late:
		stroke, cls, what = "#d32f2f", "wtick late", "late write accepted, sent"
	}
	x := num(ax.x(h.WriteAt))
	c.Lines = append(c.Lines, svgLine{X1: x, Y1: num(y + 3), X2: x, Y2: num(y + rowH - 3), Stroke: stroke, Class: cls,
		Title: fmt.Sprintf("%s (token %d): %s at %s", h.Client, h.Token, what, ax.tf.at(h.WriteAt))})
}

// overlaps finds every pair of holds of one key that overlap in time;
// holds are in order of start.
func overlaps(holds []checkers.Hold) (map[int64]bool, []checkers.Overlap) {
	marked := map[int64]bool{}
	var pairs []checkers.Overlap
	open := map[string][]int{}
	for i := range holds {
		h := &holds[i]
		o := slices.DeleteFunc(open[h.Key], func(j int) bool { return holds[j].End <= h.Start })
		for _, j := range o {
			f := &holds[j]
			marked[f.ID], marked[h.ID] = true, true
			pairs = append(pairs, checkers.Overlap{Key: h.Key, First: *f, Second: *h, Duration: time.Duration(min(f.End, h.End) - h.Start)})
		}
		open[h.Key] = append(o, i)
	}
	return marked, pairs
}

// windowChart draws an anomaly's window: one row per operation, the
// invocation-to-completion span thin, the hold thick in the colour of the
// operation's role, its write as a tick, and the late writer's lease
// expiry.
func windowChart(id string, ops []Op, a Anomaly, faults []checkers.Window, tf timeFmt, ttl time.Duration) chart {
	const rowH, gap = 14.0, 6.0
	const maxRows = 60
	note := ""
	if len(ops) > maxRows {
		note = fmt.Sprintf("First %d of %d operations shown; the table lists more.", maxRows, len(ops))
		ops = ops[:maxRows]
	}
	start, end := int64(math.MaxInt64), int64(0)
	for _, o := range ops {
		start = min(start, o.Invoke)
		end = max(end, o.Complete, o.Released, o.WriteAt)
	}
	var expiry int64
	if a.Late != nil && ttl > 0 && a.Late.Acquired > 0 {
		expiry = a.Late.Acquired + int64(ttl)
		end = max(end, expiry)
	}
	pad := max((end-start)/40, 1)
	ax := newXAxis(start-pad, end+pad, tf)
	ax.x0 = 130
	y0 := float64(padTop)
	y1 := y0 + float64(len(ops))*(rowH+gap)
	c := chart{ID: id, Title: "Window", Width: chartWidth, Height: int(y1) + padBottom, Note: note,
		Desc: "The operations of the anomaly's window, one per row in order of lock grant: thin line from invocation to completion, bar for the hold, tick for the write."}
	var fs []checkers.Window
	for _, f := range faults {
		if f.End >= ax.t0 && f.Start <= ax.t1 {
			fs = append(fs, f)
		}
	}
	c.frame(ax, y0, y1, fs)
	for i, o := range ops {
		y := y0 + float64(i)*(rowH+gap) + gap/2
		mid := num(y + rowH/2)
		color := roleColor[o.Role]
		label := o.Client
		if o.Token != 0 {
			label += " token " + strconv.FormatUint(o.Token, 10)
		}
		if o.F == history.FRead {
			label += " read"
		}
		c.Texts = append(c.Texts, svgText{X: num(ax.x0 - 6), Y: mid, Text: label, Anchor: "end", Class: "rowlabel ymid"})
		endT := o.Complete
		if endT == 0 {
			endT = ax.t1
		}
		title := opTitle(o, tf)
		c.Lines = append(c.Lines, svgLine{X1: num(ax.x(o.Invoke)), Y1: mid, X2: num(ax.x(endT)), Y2: mid, Stroke: color, Class: "span", Title: title})
		barStart := ax.x(o.Invoke)
		if o.Acquired > 0 {
			rel := o.Released
			if rel == 0 {
				rel = endT
			}
			x0, x1 := ax.x(o.Acquired), ax.x(rel)
			barStart = x0
			c.Rects = append(c.Rects, svgRect{X: num(x0), Y: num(y + 2), W: num(max(x1-x0, 1.5)), H: num(rowH - 4), Fill: color, Class: "hold", Title: title})
		}
		if o.WriteAt > 0 {
			x := num(ax.x(o.WriteAt))
			c.Lines = append(c.Lines, svgLine{X1: x, Y1: num(y - 1), X2: x, Y2: num(y + rowH + 1), Stroke: "#000", Class: "wtick", Title: "write sent at " + tf.at(o.WriteAt)})
		}
		// The words go right of the operation, else left of its start,
		// else inside its hold; the table has them anyway.
		what := opWhat(o)
		width := float64(len(what))*5.6 + 4
		holdEnd := ax.x(o.Released)
		switch xe := ax.x(endT) + 5; {
		case xe+width < ax.x1:
			c.Texts = append(c.Texts, svgText{X: num(xe), Y: mid, Text: what, Class: "oplabel ymid"})
		case ax.x(o.Invoke)-5-width > ax.x0:
			c.Texts = append(c.Texts, svgText{X: num(ax.x(o.Invoke) - 5), Y: mid, Text: what, Anchor: "end", Class: "oplabel ymid"})
		case o.Acquired > 0 && o.Released > 0 && holdEnd-barStart > width:
			c.Texts = append(c.Texts, svgText{X: num((barStart + holdEnd) / 2), Y: mid, Text: what, Anchor: "middle", Class: "barlabel ymid"})
		}
	}
	if expiry > 0 {
		x := num(ax.x(expiry))
		c.Lines = append(c.Lines, svgLine{X1: x, Y1: num(y0 - 4), X2: x, Y2: num(y1), Stroke: "#f57c00", Class: "lease",
			Title: fmt.Sprintf("%s's lease (TTL %s) ends at %s", a.Late.Client, dur(ttl), tf.at(expiry))})
		c.Texts = append(c.Texts, svgText{X: num(ax.x(expiry) + 3), Y: num(y0 - 6), Text: fmt.Sprintf("%s's lease ends", a.Late.Client), Class: "llabel"})
	}
	for _, r := range []string{RoleLate, RoleLost, RoleNewer, RoleOverwriter, RoleFinal, ""} {
		for _, o := range ops {
			if o.Role == r {
				name := r
				if name == "" {
					name = "other"
				}
				c.Legend = append(c.Legend, legendItem{Color: roleColor[r], Label: name})
				break
			}
		}
	}
	if expiry > 0 {
		c.Legend = append(c.Legend, legendItem{Color: "#f57c00", Label: "late writer's lease ends", Class: "tick"})
	}
	c.Legend = append(c.Legend, faultLegend(fs)...)
	return c
}

// opWhat is "read 41, wrote 42" or "read 41, refused (stale-token)".
func opWhat(o Op) string {
	var parts []string
	if o.Read != nil {
		parts = append(parts, fmt.Sprintf("read %d", o.Read.Value))
	}
	if o.Write != nil && o.F == history.FCriticalSection {
		switch o.Outcome {
		case history.OK:
			parts = append(parts, fmt.Sprintf("wrote %d", o.Write.Value))
		case history.Info:
			parts = append(parts, fmt.Sprintf("wrote %d?", o.Write.Value))
		default:
			parts = append(parts, fmt.Sprintf("write of %d refused", o.Write.Value))
		}
	}
	if o.Error != "" {
		parts = append(parts, o.Error)
	}
	return strings.Join(parts, ", ")
}

func opTitle(o Op, tf timeFmt) string {
	s := fmt.Sprintf("op %d %s %s %s", o.ID, o.Client, o.F, o.Key)
	if o.Token != 0 {
		s += fmt.Sprintf(" token %d", o.Token)
	}
	s += ": " + opWhat(o) + "; invoked " + tf.at(o.Invoke)
	if o.Acquired > 0 {
		s += ", acquired " + tf.at(o.Acquired)
	}
	if o.WriteAt > 0 {
		s += ", write sent " + tf.at(o.WriteAt)
	}
	if o.Released > 0 {
		s += ", released " + tf.at(o.Released)
	}
	if o.Complete > 0 {
		s += ", " + string(o.Outcome) + " " + tf.at(o.Complete)
	}
	return s
}

// faultLanesChart draws each fault as a bar on the run's time axis, the
// faults in force at once on separate lanes (each fault takes the first
// lane free at its start), so that overlapping faults (--fault-overlap)
// read apart; its note says how many were in force at most, and when.
func faultLanesChart(faults []checkers.Window, ax xAxis) chart {
	order := make([]int, len(faults))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return faults[order[a]].Start < faults[order[b]].Start })
	lane := make([]int, len(faults))
	var laneEnd []int64
	for _, i := range order {
		w := faults[i]
		l := slices.IndexFunc(laneEnd, func(end int64) bool { return end <= w.Start })
		if l < 0 {
			l = len(laneEnd)
			laneEnd = append(laneEnd, 0)
		}
		lane[i], laneEnd[l] = l, w.End
	}
	const rowH, gap = 16.0, 5.0
	y0 := float64(padTop) - 14
	y1 := y0 + float64(max(len(laneEnd), 1))*(rowH+gap)
	c := chart{ID: "fault-lanes", Title: "Faults in force", Width: chartWidth, Height: int(y1) + padBottom,
		Desc: "Each fault as a bar from its start to its heal, faults in force at the same time on separate lanes."}
	c.frame(ax, y0, y1, nil)
	for l := range laneEnd {
		c.Texts = append(c.Texts, svgText{X: num(ax.x0 - 6), Y: num(y0 + float64(l)*(rowH+gap) + gap/2 + rowH/2), Text: fmt.Sprintf("lane %d", l+1), Anchor: "end", Class: "rowlabel ymid"})
	}
	for i, w := range faults {
		if w.End < ax.t0 || w.Start > ax.t1 {
			continue
		}
		x0, x1 := ax.x(w.Start), ax.x(w.End)
		y := y0 + float64(lane[i])*(rowH+gap) + gap/2
		label := faultLabel(w)
		c.Rects = append(c.Rects, svgRect{X: num(x0), Y: num(y), W: num(max(x1-x0, 1.5)), H: num(rowH), Fill: faultColor(w.F), Class: "lane",
			Title: fmt.Sprintf("%s (%s): %s", label, w.Detail, ax.tf.span(w.Start, w.End))})
		if width := float64(len(label))*6.2 + 6; width < x1-x0 {
			c.Texts = append(c.Texts, svgText{X: num(x0 + 3), Y: num(y + rowH/2), Text: label, Class: "lanelabel ymid"})
		}
	}
	c.Legend = faultLegend(faults)
	most, from, to := mostInForce(faults)
	switch {
	case len(faults) == 0:
		c.Note = "No fault was injected."
	case most == 1:
		c.Note = fmt.Sprintf("%d faults, one at a time.", len(faults))
	default:
		c.Note = fmt.Sprintf("%d faults; at most %d in force at once (first %s).", len(faults), most, ax.tf.span(from, to))
	}
	return c
}

// mostInForce is the largest number of faults in force at one moment and
// the first span during which that many were (a fault healed at the moment
// another starts is not in force with it).
func mostInForce(faults []checkers.Window) (most int, from, to int64) {
	type edge struct {
		at    int64
		delta int
	}
	edges := make([]edge, 0, 2*len(faults))
	for _, w := range faults {
		edges = append(edges, edge{w.Start, 1}, edge{w.End, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].delta < edges[j].delta // ends first
	})
	n, peak := 0, false
	for _, e := range edges {
		n += e.delta
		if peak && e.delta < 0 {
			to, peak = e.at, false
		}
		if n > most {
			most, from, peak = n, e.at, true
		}
	}
	return most, from, to
}
