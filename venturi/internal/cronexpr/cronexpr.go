// Package cronexpr parses cron expressions and computes their fire times in a time
// zone, with the DST rules of Vixie cron.
package cronexpr

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// ErrInvalid is returned (wrapped, with the reason) for a cron expression that does
// not parse or never fires.
var ErrInvalid = errors.New("venturi: invalid cron expression")

// Spec is a parsed cron expression: one bit set per allowed value of each field.
// Matching is on local wall-clock time; Spec.Next resolves wall times to instants
// in a time zone (see Next for the DST rules).
type Spec struct {
	sec, min, hour, dom, month, dow uint64
	domStar, dowStar                bool // the field began with * or ?: Vixie cron's day rule
}

type cronField struct {
	name     string
	lo, hi   int
	names    []string // names[i] is the value lo+i
	nameBase int
}

var (
	fieldSec   = cronField{name: "second", lo: 0, hi: 59}
	fieldMin   = cronField{name: "minute", lo: 0, hi: 59}
	fieldHour  = cronField{name: "hour", lo: 0, hi: 23}
	fieldDom   = cronField{name: "day of month", lo: 1, hi: 31}
	fieldMonth = cronField{name: "month", lo: 1, hi: 12, nameBase: 1,
		names: []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}}
	// Day of week 0-7: 0 and 7 are Sunday.
	fieldDow = cronField{name: "day of week", lo: 0, hi: 7, nameBase: 0,
		names: []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}}
)

var cronMacros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

// maxCronLen bounds an expression's length (it is stored and parsed by every worker).
const maxCronLen = 256

// cronHorizon bounds how far Next looks for a matching time: an expression that matches
// nothing within it (30 February) is refused when parsed.
const cronHorizon = 10 // years

// Parse parses a cron expression: five fields (minute hour day-of-month month
// day-of-week), or six with a leading seconds field, or a macro (@yearly, @annually,
// @monthly, @weekly, @daily, @midnight, @hourly). A field is *, ?, a value, a range a-b,
// a step */n, a-b/n or a/n (a to the field's end), or a comma-separated list of those.
// Months and days of week also take their English three-letter names (JAN, mon).
func Parse(expr string) (*Spec, error) {
	if len(expr) > maxCronLen {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrInvalid, maxCronLen)
	}
	s := strings.TrimSpace(expr)
	if strings.HasPrefix(s, "@") {
		m, ok := cronMacros[strings.ToLower(s)]
		if !ok {
			return nil, fmt.Errorf("%w: unknown macro %q", ErrInvalid, s)
		}
		s = m
	}
	fields := strings.Fields(s)
	switch len(fields) {
	case 5:
		fields = append([]string{"0"}, fields...)
	case 6:
	default:
		return nil, fmt.Errorf("%w: %q has %d fields, want 5 (minute hour day month weekday) or 6 (with seconds first)",
			ErrInvalid, expr, len(fields))
	}
	c := &Spec{}
	var err error
	for i, f := range []struct {
		dst  *uint64
		spec cronField
	}{{&c.sec, fieldSec}, {&c.min, fieldMin}, {&c.hour, fieldHour}, {&c.dom, fieldDom}, {&c.month, fieldMonth}, {&c.dow, fieldDow}} {
		if *f.dst, err = parseCronField(fields[i], f.spec); err != nil {
			return nil, err
		}
	}
	if c.dow&(1<<7) != 0 { // 7 is Sunday
		c.dow = c.dow&^(1<<7) | 1
	}
	c.domStar = fields[3][0] == '*' || fields[3][0] == '?'
	c.dowStar = fields[5][0] == '*' || fields[5][0] == '?'
	// Refuse what never fires (31 April, 30 February), whatever the year.
	from := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	if c.nextWall(from).IsZero() {
		return nil, fmt.Errorf("%w: %q never matches a date", ErrInvalid, expr)
	}
	return c, nil
}

func parseCronField(s string, f cronField) (uint64, error) {
	var set uint64
	for part := range strings.SplitSeq(s, ",") {
		bad := func(why string) error {
			return fmt.Errorf("%w: %s field %q: %s", ErrInvalid, f.name, part, why)
		}
		if part == "" {
			return 0, bad("empty list item")
		}
		rng, stepStr, hasStep := strings.Cut(part, "/")
		lo, hi := f.lo, f.hi
		switch {
		case rng == "*" || rng == "?":
		default:
			a, b, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = f.value(a); err != nil {
				return 0, bad(err.Error())
			}
			switch {
			case isRange:
				if hi, err = f.value(b); err != nil {
					return 0, bad(err.Error())
				}
				if hi < lo {
					return 0, bad("range ends before it starts")
				}
			case hasStep: // a/n: from a to the field's end
			default:
				hi = lo
			}
		}
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepStr)
			if err != nil || n < 1 || n > f.hi-f.lo+1 {
				return 0, bad(fmt.Sprintf("step must be 1 to %d", f.hi-f.lo+1))
			}
			step = n
		}
		for v := lo; v <= hi; v += step {
			set |= 1 << uint(v)
		}
	}
	return set, nil
}

func (f cronField) value(s string) (int, error) {
	if s == "" {
		return 0, errors.New("empty value")
	}
	for i, n := range f.names {
		if strings.EqualFold(s, n) {
			return f.nameBase + i, nil
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil || s[0] == '+' || s[0] == '-' {
		return 0, fmt.Errorf("%q is not a number or name", s)
	}
	if v < f.lo || v > f.hi {
		return 0, fmt.Errorf("%d is out of range %d-%d", v, f.lo, f.hi)
	}
	return v, nil
}

// DayMatches reports whether t's date matches the day-of-month and day-of-week fields,
// with Vixie cron's rule: when both are restricted, either one matching suffices.
func (c *Spec) DayMatches(t time.Time) bool {
	dom := c.dom&(1<<uint(t.Day())) != 0
	dow := c.dow&(1<<uint(t.Weekday())) != 0
	if c.domStar || c.dowStar {
		return dom && dow
	}
	return dom || dow // both restricted: either matches (Vixie cron)
}

// AllHours reports whether the expression fires in every hour of the day: such a
// schedule follows real time through a repeated (fall-back) hour.
func (c *Spec) AllHours() bool { return c.hour&(1<<24-1) == 1<<24-1 }

// nextSet returns the smallest value >= v in set, or -1.
func nextSet(set uint64, v int) int {
	if v > 63 {
		return -1
	}
	rest := set >> uint(v) << uint(v)
	if rest == 0 {
		return -1
	}
	return bits.TrailingZeros64(rest)
}

// nextWall returns the first wall-clock time strictly after w (a time whose fields are
// read as a naive date and time; its location must be UTC) that matches the expression,
// or the zero time when none does within cronHorizon years.
func (c *Spec) nextWall(w time.Time) time.Time {
	t := w.Truncate(time.Second).Add(time.Second)
	limit := w.Year() + cronHorizon
	for t.Year() <= limit {
		if c.month&(1<<uint(t.Month())) == 0 {
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if !c.DayMatches(t) {
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
			continue
		}
		h := nextSet(c.hour, t.Hour())
		if h < 0 {
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
			continue
		}
		if h != t.Hour() {
			t = time.Date(t.Year(), t.Month(), t.Day(), h, 0, 0, 0, time.UTC)
		}
		m := nextSet(c.min, t.Minute())
		if m < 0 {
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour()+1, 0, 0, 0, time.UTC)
			continue
		}
		if m != t.Minute() {
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), m, 0, 0, time.UTC)
		}
		s := nextSet(c.sec, t.Second())
		if s < 0 {
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute()+1, 0, 0, time.UTC)
			continue
		}
		return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), s, 0, time.UTC)
	}
	return time.Time{}
}

// wallOf returns t's wall-clock reading in loc as a naive UTC time.
func wallOf(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// Next returns the first fire strictly after t in loc, or the zero time if there is none
// within the horizon. Wall-clock times are resolved to instants by these rules:
//
//   - A wall time that does not exist (a spring-forward gap) is read with the offset in
//     effect before the gap: 02:30 on a day whose clocks jump from 02:00 to 03:00 is 03:30
//     after the jump. A daily 02:30 fires at 03:30 that day; an hourly schedule's 02:00 is
//     the same instant as its 03:00, and fires once.
//   - A wall time that occurs twice (a fall-back overlap) fires at its first occurrence
//     only, unless the expression fires in every hour of the day (its hour field is *),
//     in which case it fires at both: hourly and finer schedules follow real time.
func (c *Spec) Next(t time.Time, loc *time.Location) time.Time {
	at := t          // an instant in the zone period being searched
	for range 1000 { // zone periods crossed; the horizon stops the search long before
		start, end := at.In(loc).ZoneBounds()
		_, off := at.In(loc).Zone()
		offD := time.Duration(off) * time.Second
		var prevOff time.Duration
		hasPrev := !start.IsZero()
		if hasPrev {
			_, p := start.Add(-time.Nanosecond).In(loc).Zone()
			prevOff = time.Duration(p) * time.Second
		}
		best := time.Time{}
		// Wall times of this period after t (t read with this period's offset).
		w := t.Add(offD).UTC()
		for {
			w = c.nextWall(w)
			if w.IsZero() {
				break
			}
			inst := w.Add(-offD)
			if !end.IsZero() && !inst.Before(end) {
				break // belongs to a later period
			}
			if hasPrev && inst.Before(start) {
				continue // not a wall time of this period
			}
			if hasPrev && prevOff > offD && inst.Sub(start) < prevOff-offD && !c.AllHours() {
				continue // the second occurrence of a repeated wall time
			}
			best = inst
			break
		}
		// Wall times skipped by a spring forward at this period's start, read with the
		// previous offset, land in [start, start+gap).
		if gap := offD - prevOff; hasPrev && gap > 0 && t.Before(start.Add(gap)) {
			gapStartWall := wallOf(start, loc).Add(-gap) // e.g. 02:00
			from := gapStartWall.Add(-time.Second)
			if tw := t.Add(prevOff).UTC(); !tw.Before(gapStartWall) {
				from = tw
			}
			if g := c.nextWall(from); !g.IsZero() && g.Before(gapStartWall.Add(gap)) {
				if inst := g.Add(-prevOff); inst.After(t) && (best.IsZero() || inst.Before(best)) {
					best = inst
				}
			}
		}
		if !best.IsZero() {
			return best
		}
		if end.IsZero() || end.Year() > t.Year()+cronHorizon {
			return time.Time{}
		}
		at = end
	}
	return time.Time{}
}

// NextOrNever is [Spec.Next], or a time a hundred years after t when the expression
// matches nothing within its horizon: venturi's rule for a schedule's next_fire, which is
// never NULL; the firer and the schedule API apply it alike.
func (s *Spec) NextOrNever(t time.Time, loc *time.Location) time.Time {
	if n := s.Next(t, loc); !n.IsZero() {
		return n
	}
	return t.AddDate(100, 0, 0)
}
