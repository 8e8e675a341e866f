package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints aligned columns; rows are added with row and the table printed by flush.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = cleanCell(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// cleanCell keeps a cell on one line of one column: control characters (tabs and newlines
// of notes, escapes that would drive the terminal) become spaces.
func cleanCell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, s)
}

// clip shortens s to at most n runes, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// timeText writes a time in UTC, to the second, in RFC 3339 (which the filter's after:
// and before: read back); "" for the zero time.
func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// timePtrText is timeText of an optional time.
func timePtrText(t *time.Time) string {
	if t == nil {
		return ""
	}
	return timeText(*t)
}

// durText writes a duration rounded for reading: microseconds under a second,
// milliseconds under a minute, seconds above, without zero trailing units ("5m", not
// "5m0s"); "" for 0.
func durText(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return spanText(d)
}

// spanText is durText, with "0s" for 0.
func spanText(d time.Duration) string {
	switch {
	case d < time.Second && d > -time.Second:
		return d.Round(time.Microsecond).String()
	case d < time.Minute && d > -time.Minute:
		return d.Round(time.Millisecond).String()
	}
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// rateText writes a per-second rate.
func rateText(r float64) string {
	if r == 0 {
		return "0"
	}
	return strconv.FormatFloat(r, 'f', 1, 64)
}

// jsonText writes a JSON value compactly on one line; "" for none.
func jsonText(raw []byte) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// kv prints "key  value" lines aligned, skipping empty values.
type kv struct{ tw *tabwriter.Writer }

func newKV(w io.Writer) *kv { return &kv{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)} }

func (k *kv) add(key, value string) {
	if value != "" {
		fmt.Fprintf(k.tw, "%s\t%s\n", key, cleanCell(value))
	}
}

func (k *kv) flush() error { return k.tw.Flush() }
