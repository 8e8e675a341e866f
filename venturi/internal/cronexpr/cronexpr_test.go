package cronexpr

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func mustLoc(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// fireTimes returns the n fires of expr after from, formatted in loc.
func fireTimes(t *testing.T, expr string, loc *time.Location, from time.Time, n int) []string {
	t.Helper()
	c, err := Parse(expr)
	if err != nil {
		t.Fatalf("parse %q: %v", expr, err)
	}
	var out []string
	f := from
	for range n {
		f = c.Next(f, loc)
		out = append(out, f.In(loc).Format("01-02 15:04:05 MST"))
	}
	return out
}

func TestCronParseAndNext(t *testing.T) {
	utc := time.UTC
	from := time.Date(2026, 1, 30, 23, 59, 30, 0, utc) // a Friday
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{"* * * * *", []string{"01-31 00:00:00 UTC", "01-31 00:01:00 UTC"}},
		{"*/15 * * * * *", []string{"01-30 23:59:45 UTC", "01-31 00:00:00 UTC", "01-31 00:00:15 UTC"}},
		{"0 9 * * mon-fri", []string{"02-02 09:00:00 UTC", "02-03 09:00:00 UTC"}},
		{"0 0 1 JAN,jul *", []string{"07-01 00:00:00 UTC", "01-01 00:00:00 UTC"}},
		{"30 4 1,15 * 5", []string{"01-30 04:30:00 UTC"}[:0]}, // filled below: dom OR dow
		{"@hourly", []string{"01-31 00:00:00 UTC", "01-31 01:00:00 UTC"}},
		{"@daily", []string{"01-31 00:00:00 UTC", "02-01 00:00:00 UTC"}},
		{"@weekly", []string{"02-01 00:00:00 UTC", "02-08 00:00:00 UTC"}},
		{"@monthly", []string{"02-01 00:00:00 UTC", "03-01 00:00:00 UTC"}},
		{"0 0 29 2 *", []string{"02-29 00:00:00 UTC"}}, // 2028
		{"0 12 * * 7", []string{"02-01 12:00:00 UTC"}}, // 7 is Sunday
		{"5/20 10-12/2 * * *", []string{"01-31 10:05:00 UTC", "01-31 10:25:00 UTC", "01-31 10:45:00 UTC", "01-31 12:05:00 UTC"}},
	} {
		if len(tc.want) == 0 {
			continue
		}
		got := fireTimes(t, tc.expr, utc, from, len(tc.want))
		if strings.Join(got, ", ") != strings.Join(tc.want, ", ") {
			t.Errorf("%q: got %v, want %v", tc.expr, got, tc.want)
		}
	}
	// Both day fields restricted: the 1st or 15th, or any Friday.
	got := fireTimes(t, "30 4 1,15 * fri", utc, time.Date(2026, 1, 31, 0, 0, 0, 0, utc), 4)
	want := []string{"02-01 04:30:00 UTC", "02-06 04:30:00 UTC", "02-13 04:30:00 UTC", "02-15 04:30:00 UTC"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("dom|dow: got %v, want %v", got, want)
	}
	for _, bad := range []string{"", "* * * *", "* * * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *",
		"* * * 13 *", "* * * * 8", "*/0 * * * *", "5-1 * * * *", "a * * * *", "@often", "0 0 30 2 *", "0 0 31 4 *",
		"1,,2 * * * *", "-1 * * * *", "+1 * * * *", "1-2-3 * * * *", strings.Repeat("1,", 200) + "1 * * * *"} {
		if _, err := Parse(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: err %v, want ErrInvalid", bad, err)
		}
	}
}

// TestCronDST: the two DST rules, in New York (2026: clocks jump 02:00 -> 03:00 EST->EDT
// on 8 March and fall back 02:00 -> 01:00 on 1 November) and Berlin (29 March: 02:00 ->
// 03:00; 25 October: 03:00 -> 02:00), for a daily schedule inside the skipped or
// repeated hour and an hourly one.
func TestCronDST(t *testing.T) {
	ny, berlin := mustLoc(t, "America/New_York"), mustLoc(t, "Europe/Berlin")
	for _, tc := range []struct {
		name, expr string
		loc        *time.Location
		from       time.Time
		want       []string
	}{
		{"NY skipped hour, daily in the gap: fires at 03:30 EDT that day", "30 2 * * *", ny,
			time.Date(2026, 3, 7, 12, 0, 0, 0, ny), []string{"03-08 03:30:00 EDT", "03-09 02:30:00 EDT"}},
		{"NY skipped hour, hourly: no 02:00, nothing twice", "0 * * * *", ny,
			time.Date(2026, 3, 8, 0, 30, 0, 0, ny), []string{"03-08 01:00:00 EST", "03-08 03:00:00 EDT", "03-08 04:00:00 EDT"}},
		{"NY skipped hour, at :30 hourly", "30 * * * *", ny,
			time.Date(2026, 3, 8, 0, 45, 0, 0, ny), []string{"03-08 01:30:00 EST", "03-08 03:30:00 EDT", "03-08 04:30:00 EDT"}},
		{"NY repeated hour, daily in the overlap: once, at the first 01:30", "30 1 * * *", ny,
			time.Date(2026, 10, 31, 12, 0, 0, 0, ny), []string{"11-01 01:30:00 EDT", "11-02 01:30:00 EST"}},
		{"NY repeated hour, hourly: both 01:00s, real time", "0 * * * *", ny,
			time.Date(2026, 11, 1, 0, 30, 0, 0, ny), []string{"11-01 01:00:00 EDT", "11-01 01:00:00 EST", "11-01 02:00:00 EST"}},
		{"NY repeated hour, every 20 minutes follows real time", "*/20 * * * *", ny,
			time.Date(2026, 11, 1, 1, 30, 0, 0, ny),
			[]string{"11-01 01:40:00 EDT", "11-01 01:00:00 EST", "11-01 01:20:00 EST", "11-01 01:40:00 EST", "11-01 02:00:00 EST"}},
		{"Berlin skipped hour, daily 02:15", "15 2 * * *", berlin,
			time.Date(2026, 3, 28, 12, 0, 0, 0, berlin), []string{"03-29 03:15:00 CEST", "03-30 02:15:00 CEST"}},
		{"Berlin repeated hour, daily 02:15", "15 2 * * *", berlin,
			time.Date(2026, 10, 24, 12, 0, 0, 0, berlin), []string{"10-25 02:15:00 CEST", "10-26 02:15:00 CET"}},
		{"Berlin repeated hour, hourly", "0 * * * *", berlin,
			time.Date(2026, 10, 25, 1, 30, 0, 0, berlin), []string{"10-25 02:00:00 CEST", "10-25 02:00:00 CET", "10-25 03:00:00 CET"}},
		{"Berlin skipped hour, hourly", "0 * * * *", berlin,
			time.Date(2026, 3, 29, 1, 30, 0, 0, berlin), []string{"03-29 03:00:00 CEST", "03-29 04:00:00 CEST"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fireTimes(t, tc.expr, tc.loc, tc.from, len(tc.want))
			if strings.Join(got, ", ") != strings.Join(tc.want, ", ") {
				t.Errorf("got  %v\nwant %v", got, tc.want)
			}
		})
	}
}

// FuzzCronParse: whatever parses yields strictly increasing fire times whose wall times
// match the expression, in UTC and across New York's DST changes; nothing panics.
func FuzzCronParse(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/7 1-5 * * mon", "0 0 29 2 *", "@hourly", "5/20 10-12/2 1,15 * fri",
		"0 30 2 * * *", "59 59 23 31 12 *", "? ? ? ? ?"} {
		f.Add(s, int64(1772900000))
	}
	ny := mustLoc(f, "America/New_York")
	f.Fuzz(func(t *testing.T, expr string, start int64) {
		c, err := Parse(expr)
		if err != nil {
			return
		}
		from := time.Unix(start%(4e9), 0)
		for _, loc := range []*time.Location{time.UTC, ny} {
			prev := from
			for range 20 {
				n := c.Next(prev, loc)
				if n.IsZero() {
					break
				}
				if !n.After(prev) {
					t.Fatalf("%q in %v: next(%v) = %v, not after", expr, loc, prev, n)
				}
				if loc == time.UTC {
					w := n.UTC()
					if c.sec&(1<<w.Second()) == 0 || c.min&(1<<w.Minute()) == 0 || c.hour&(1<<w.Hour()) == 0 ||
						c.month&(1<<int(w.Month())) == 0 || !c.DayMatches(w) {
						t.Fatalf("%q: %v does not match", expr, w)
					}
				}
				prev = n
			}
		}
	})
}
