package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
)

const (
	maxURLLen   = 2048
	maxTitleLen = 500
	maxTags     = 20
	maxTagLen   = 50
)

var tagPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// decodeJSON reads the body into v: 400 when it is not one JSON value of the right shape,
// 413 (from the body limit) when it is too long.
func decodeJSON(c echo.Context, v any) error {
	dec := json.NewDecoder(c.Request().Body)
	if err := dec.Decode(v); err != nil {
		var he *echo.HTTPError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &he):
			return he
		case errors.Is(err, io.EOF):
			return &badRequest{"the body is empty; send a JSON object"}
		case errors.As(err, &te):
			return &badRequest{fmt.Sprintf("field %q must be a JSON %s", te.Field, jsonKind(te.Type.Kind().String()))}
		default:
			return &badRequest{"malformed JSON: " + err.Error()}
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var he *echo.HTTPError
		if errors.As(err, &he) {
			return he
		}
		return &badRequest{"malformed JSON: unexpected data after the object"}
	}
	return nil
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

// checkURL validates a bookmark URL: absolute http(s), a host, no credentials, no control
// characters. The worker's dial-time guard decides what may be fetched; this is for
// friendly errors only.
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
	u.Fragment, u.RawFragment = "", ""
	u.Host = strings.ToLower(u.Host)
	return u.String(), ""
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
