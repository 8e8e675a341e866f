package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/venturi-dev/bookmarks/shared/tasks"
)

const (
	maxURLLen   = 2048
	maxTitleLen = 500
	// maxTags is the most tags a bookmark or a request names. A tag-index rebuild lists at
	// most tasks.MaxRebuildTags tags (beyond, it rebuilds all tags), so one request never
	// reaches that cap: the constant below does not compile if maxTags exceeds it.
	maxTags   = 20
	maxTagLen = tasks.MaxTagLen
)

const _ = uint(tasks.MaxRebuildTags - maxTags) // maxTags <= tasks.MaxRebuildTags

var tagPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// requireJSON answers 415 to a request whose body is not declared as JSON: the Content-Type
// must be application/json or application/*+json, without a charset or with charset=utf-8.
// Besides telling a client what went wrong, it keeps out the cross-site "simple" requests a
// browser sends without a preflight (text/plain, form encodings, no Content-Type at all).
func requireJSON(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !isJSONContentType(c.Request().Header.Get(echo.HeaderContentType)) {
			return echo.NewHTTPError(http.StatusUnsupportedMediaType,
				"send the body as application/json (Content-Type: application/json)")
		}
		return next(c)
	}
}

func isJSONContentType(ct string) bool {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	if mt != "application/json" && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		return false
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return false
	}
	return true
}

// noSimpleBody answers 415 to a request that declares a body type a cross-site HTML form
// or a no-preflight fetch can send (form encodings, text/plain, anything but JSON). It
// guards the state-changing endpoints that take no body (refetch, delete); those that take
// one require JSON with requireJSON. A request with no Content-Type passes (curl -X POST).
// The API key is the real defence against cross-site requests (see the README's threat
// model); this one costs nothing and keeps working if a deployment ever adds cookies.
func noSimpleBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if ct := c.Request().Header.Get(echo.HeaderContentType); ct != "" && !isJSONContentType(ct) {
			return echo.NewHTTPError(http.StatusUnsupportedMediaType,
				"this endpoint takes no body; send none (or declare it application/json)")
		}
		return next(c)
	}
}

// decodeJSON reads the body into v: 400 when it is not one JSON value of the right shape,
// 413 (from the body limit) when it is too long. The body is read whole first (the body
// limit bounds it) so that a type error can be located in it (see typeErrorPath). Only
// messages about the JSON itself reach the client: a failed read is a bodyReadError, whose
// cause (which names addresses) is logged, not sent.
func decodeJSON(c echo.Context, v any) error {
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		var he *echo.HTTPError
		if errors.As(err, &he) {
			return he
		}
		return &bodyReadError{err}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.Is(err, io.EOF):
			return &badRequest{msg: "the body is empty; send a JSON object"}
		case errors.Is(err, io.ErrUnexpectedEOF):
			return &badRequest{msg: "malformed JSON: the body ends in the middle of a value"}
		case errors.As(err, &te):
			path := typeErrorPath(body, te)
			if path == "" {
				return &badRequest{msg: "the body must be a JSON object"}
			}
			return &badRequest{msg: fmt.Sprintf("field %q must be a JSON %s", path, jsonKind(te.Type.Kind().String())), field: path}
		case errors.As(err, &se):
			return &badRequest{msg: "malformed JSON: " + se.Error()}
		default: // not the client's doing (json.InvalidUnmarshalError): a 500, logged
			return err
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &badRequest{msg: "malformed JSON: unexpected data after the object"}
	}
	return nil
}

// typeErrorPath names the value a type error is about with the path form validation uses:
// items[0].url, tags[2], url; "" for the body itself. encoding/json's Field joins struct
// fields only (items.url), so the path is found by walking the body's tokens to the value
// the error's offset points at: the end of a scalar, or just past the opening bracket or
// brace of an array or object. If no value matches, the path falls back to the Field.
// Member names are encoding/json's (a JSON key matches a field case-insensitively).
func typeErrorPath(body []byte, te *json.UnmarshalTypeError) string {
	type frame struct {
		array   bool
		index   int    // arrays: the current element's index
		key     string // objects: the current member's name
		wantKey bool   // objects: the next string token is a name
	}
	var stack []frame
	// The names are encoding/json's (the struct fields' JSON names) when they line up with
	// the objects on the way, so that {"URL": 5} is named url, as validation names it; the
	// walk adds the indexes.
	names := strings.Split(te.Field, ".")
	path := func() string {
		objects := 0
		for _, f := range stack {
			if !f.array {
				objects++
			}
		}
		var b strings.Builder
		i := 0
		for _, f := range stack {
			if f.array {
				b.WriteString("[" + strconv.Itoa(f.index) + "]")
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			if te.Field != "" && objects == len(names) {
				b.WriteString(names[i])
			} else {
				b.WriteString(f.key)
			}
			i++
		}
		return b.String()
	}
	startValue := func() {
		if n := len(stack); n > 0 && stack[n-1].array {
			stack[n-1].index++
		}
	}
	endValue := func() {
		if n := len(stack); n > 0 && !stack[n-1].array {
			stack[n-1].wantKey = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return te.Field
		}
		if n := len(stack); n > 0 && !stack[n-1].array && stack[n-1].wantKey {
			if name, ok := tok.(string); ok {
				stack[n-1].key, stack[n-1].wantKey = name, false
				continue
			}
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			startValue()
			if dec.InputOffset() == te.Offset {
				return path()
			}
			stack = append(stack, frame{array: tok == json.Delim('['), index: -1, wantKey: tok == json.Delim('{')})
		case json.Delim(']'), json.Delim('}'):
			if len(stack) == 0 {
				return te.Field
			}
			stack = stack[:len(stack)-1]
			endValue()
		default:
			startValue()
			if dec.InputOffset() == te.Offset {
				return path()
			}
			endValue()
		}
	}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "slice", "array":
		return "array"
	case "bool":
		return "boolean"
	case "struct", "map", "ptr":
		return "object"
	}
	return "number"
}

// checkURL validates a bookmark URL and returns its normal form: absolute http(s), a host, a
// port (if any) from 1 to 65535, no credentials, no control characters, and at most
// maxURLLen bytes in the normal form that is stored (percent-encoding can triple the length
// of non-ASCII text, and the database refuses a longer URL). It does not judge addresses:
// the worker's dial-time guard decides what may be fetched (loopback, private ranges,
// decimal-encoded IPs, ...); this is for friendly errors only.
func checkURL(raw string) (string, string) {
	raw = strings.TrimSpace(raw)
	switch {
	case raw == "":
		return "", "is required"
	case len(raw) > maxURLLen:
		return "", fmt.Sprintf("must be at most %d bytes", maxURLLen)
	case strings.IndexFunc(raw, unicode.IsControl) >= 0 || !utf8.ValidString(raw):
		return "", "must not contain control characters"
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "", "is not a valid URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "", "must be an absolute http or https URL"
	case u.Hostname() == "":
		return "", "must have a host"
	case u.User != nil:
		return "", "must not contain credentials"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", "must have a port from 1 to 65535"
		}
	}
	u.Fragment, u.RawFragment = "", ""
	u.Host = strings.ToLower(u.Host)
	u.RawQuery = escapeQuery(u.RawQuery)
	out := u.String()
	if len(out) > maxURLLen {
		return "", fmt.Sprintf("must be at most %d bytes once normalized (non-ASCII characters are percent-encoded)", maxURLLen)
	}
	return out, ""
}

// escapeQuery percent-encodes what url.URL.String leaves raw in a query but a URL may not
// contain: whitespace (a normal form ending in a space would not survive trimming, nor a
// request line) and the ASCII characters RFC 3986 excludes. Other text is kept as it is.
func escapeQuery(q string) string {
	if !strings.ContainsFunc(q, needsQueryEscape) {
		return q
	}
	var b strings.Builder
	for _, r := range q {
		if needsQueryEscape(r) {
			b.WriteString(url.PathEscape(string(r)))
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func needsQueryEscape(r rune) bool {
	return unicode.IsSpace(r) || strings.ContainsRune(`"<>\^`+"`{|}", r)
}

func checkTitle(title string) (string, string) {
	title = strings.TrimSpace(title)
	if utf8.RuneCountInString(title) > maxTitleLen {
		return "", fmt.Sprintf("must be at most %d characters", maxTitleLen)
	}
	if !utf8.ValidString(title) || strings.ContainsRune(title, 0) {
		return "", "must be valid text"
	}
	return title, ""
}

// checkTags lower-cases, validates and de-duplicates tags.
func checkTags(tags []string) ([]string, string) {
	if len(tags) > maxTags {
		return nil, fmt.Sprintf("at most %d tags", maxTags)
	}
	out := make([]string, 0, len(tags))
	seen := map[string]bool{}
	for _, t := range tags {
		t = strings.ToLower(strings.TrimSpace(t))
		if len(t) == 0 || len(t) > maxTagLen || !tagPattern.MatchString(t) {
			return nil, fmt.Sprintf("each tag must be 1-%d characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit", maxTagLen)
		}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out, ""
}
