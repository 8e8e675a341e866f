package dashboard

import (
	"bytes"
	"embed"
	"encoding/json"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// files holds the templates and the static assets.
//
//go:embed templates/*.html static/*
var files embed.FS

// assets serves the stylesheet and the script. Their names carry no version, so browsers
// revalidate them (ETag from the content is not needed: they are small).
func (h *handler) assets() http.Handler {
	static, _ := fs.Sub(files, "static") // static exists: the embed pattern guarantees it
	types := map[string]string{".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("file")
		b, err := fs.ReadFile(static, name)
		ct, ok := types[path.Ext(name)]
		if err != nil || !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
	})
}

// funcs are the templates' functions. Times are shown as the database wrote them, in UTC;
// durations as the API computed them (from the database clock), never against this
// process's clock.
func funcs(prefix string) template.FuncMap {
	return template.FuncMap{
		"path":     func(p string) string { return prefix + p },
		"time":     fmtTime,
		"timep":    func(t *time.Time) string { return fmtTimePtr(t) },
		"dur":      fmtDuration,
		"count":    countAny,
		"rate":     fmtRate,
		"json":     fmtJSON,
		"ulid":     func(id ulid.ULID) string { return id.String() },
		"short":    func(id ulid.ULID) string { s := id.String(); return s[:10] + "…" + s[20:] },
		"stateof":  func(m map[venturi.State]int64, s venturi.State) string { return fmtCount(m[s]) },
		"qkey":     queueKey,
		"dkey":     deferredKey,
		"str":      func(v any) string { return toString(v) },
		"eventcls": eventClass,
		"wfcls":    workflowClass,
		"outcls":   outcomeClass,
		"join":     func(s []string) string { return strings.Join(s, ", ") },
	}
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case venturi.State:
		return string(x)
	case venturi.Event:
		return string(x)
	case venturi.WorkflowState:
		return string(x)
	case venturi.WorkflowKind:
		return string(x)
	case venturi.Policy:
		return x.String()
	}
	return ""
}

// workflowClass is the CSS class of a workflow's state.
func workflowClass(s venturi.WorkflowState) string {
	switch s {
	case venturi.WorkflowOpen:
		return "active"
	case venturi.WorkflowSucceeded:
		return "ok"
	case venturi.WorkflowFailed:
		return "bad"
	}
	return "muted"
}

// outcomeClass is the CSS class of a node's outcome (ok, fail, cancel, del; decided:
// dfail, dcancel, skip).
func outcomeClass(o string) string {
	switch o {
	case "ok":
		return "ok"
	case "fail", "dfail":
		return "bad"
	}
	return "muted"
}

const timeLayout = "2006-01-02 15:04:05Z"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format(timeLayout)
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "–"
	}
	return fmtTime(*t)
}

// fmtDuration writes d with at most three significant figures: 850ms, 3.2s, 5m10s, 2h5m.
func fmtDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d < 0:
		return "-" + fmtDuration(-d)
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return pair(d.Round(time.Second), time.Minute, "m", time.Second, "s")
	case d < 48*time.Hour:
		return pair(d.Round(time.Minute), time.Hour, "h", time.Minute, "m")
	}
	return pair(d.Round(time.Hour), 24*time.Hour, "d", time.Hour, "h")
}

// pair writes d in two units: 5m10s, 5m (a zero second part is left out).
func pair(d, big time.Duration, bigName string, small time.Duration, smallName string) string {
	s := strconv.FormatInt(int64(d/big), 10) + bigName
	if r := (d % big) / small; r != 0 {
		s += strconv.FormatInt(int64(r), 10) + smallName
	}
	return s
}

// countAny is fmtCount for any integer the templates hold.
func countAny(v any) string {
	switch n := v.(type) {
	case int:
		return fmtCount(int64(n))
	case int64:
		return fmtCount(n)
	case int32:
		return fmtCount(int64(n))
	}
	return ""
}

// fmtCount writes n with thousands separators: 1,234,567.
func fmtCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func fmtRate(r float64) string {
	switch {
	case r == 0 || math.IsNaN(r) || math.IsInf(r, 0):
		return "0"
	case r < 10:
		return strconv.FormatFloat(r, 'f', 2, 64)
	case r < 100:
		return strconv.FormatFloat(r, 'f', 1, 64)
	}
	return fmtCount(int64(math.Round(r)))
}

// fmtFloatCount writes a count held as a float.
func fmtFloatCount(f float64) string { return fmtCount(int64(math.Round(f))) }

// maxShownJSON bounds the JSON a page shows of one value (a payload is at most 1 MiB).
const maxShownJSON = 64 << 10

// fmtJSON indents a JSON value for a <pre>, cut at maxShownJSON.
func fmtJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		b.Reset()
		b.Write(raw)
	}
	if b.Len() > maxShownJSON {
		return string(b.Bytes()[:maxShownJSON]) + "\n… (cut: " + fmtCount(int64(b.Len())) + " bytes in all)"
	}
	return b.String()
}

// eventClass is the CSS class of a journal event or a state.
func eventClass(v any) string {
	switch toString(v) {
	case "completed":
		return "ok"
	case "dead", "abandoned":
		return "bad"
	case "failed":
		return "warn"
	case "running", "available":
		return "active"
	case "cancelled", "replaced", "dropped":
		return "muted"
	}
	return ""
}

// sparkline is a small chart of a series, drawn by the page as an SVG polyline.
type sparkline struct {
	Points    string
	Max, Last float64
	Label     string // the last value, formatted
	Has       bool
	W, H      int
}

const (
	sparkW      = 160
	sparkH      = 32
	sparkPoints = 120
)

// newSparkline draws at most sparkPoints points of the series (the maximum of each bucket
// when there are more samples); format writes the last value.
func newSparkline(v []float64, format func(float64) string) sparkline {
	s := sparkline{W: sparkW, H: sparkH}
	if len(v) == 0 {
		return s
	}
	if len(v) > sparkPoints {
		b := make([]float64, sparkPoints)
		for i, x := range v {
			j := i * sparkPoints / len(v)
			b[j] = max(b[j], x)
		}
		v = b
	}
	for _, x := range v {
		s.Max = max(s.Max, x)
	}
	s.Last, s.Has = v[len(v)-1], true
	s.Label = format(s.Last)
	var pts strings.Builder
	for i, x := range v {
		px := 0.0
		if len(v) > 1 {
			px = float64(i) * sparkW / float64(len(v)-1)
		}
		py := float64(sparkH - 1)
		if s.Max > 0 {
			py = float64(sparkH-1) - x/s.Max*float64(sparkH-2)
		}
		if i > 0 {
			pts.WriteByte(' ')
		}
		pts.WriteString(strconv.FormatFloat(px, 'f', 1, 64) + "," + strconv.FormatFloat(py, 'f', 1, 64))
	}
	s.Points = pts.String()
	return s
}
