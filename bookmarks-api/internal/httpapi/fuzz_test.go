package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
)

// createSeeds are request bodies for FuzzCreateBookmark (the committed corpus in
// testdata/fuzz/FuzzCreateBookmark holds more, with odd Content-Types).
var createSeeds = []string{
	`{"url":"https://example.com/","title":"Example","tags":["go","db"]}`,
	`{"url":"https://Example.COM/a?b=c#frag","title":"  spaced  "}`,
	`{"url":`, `not json`, ``, `null`, `[]`, `"string"`, `5`, `{"url":5}`, `{"url":1e999}`, `{"url":{"a":1}}`,
	`{"url":"https://a/","tags":[1,2]}`, `{"url":"https://a/","title":123456789012345678901234567890}`,
	`{"url":"https://a/","title":{"nested":{"deeper":[1,[2,[3,{"x":null}]]]}}}`,
	strings.Repeat("[", 5000) + strings.Repeat("]", 5000),
	`{"url":"https://a/","title":"` + "a\xffb\xc0" + `"}`, `{"url":"https://a/","title":"a\u0000b"}`,
	`{"url":"https://a/","title":"\ud800\udfff\ud800"}`, `{"url":"https://a/","title":"标题 🚀 ñ"}`,
	"{\"url\":\"https://a/\",\"title\":\"a\x00b\"}", "\x00\x00\x00", "\xef\xbb\xbf{\"url\":\"https://a/\"}",
	`{"url":"https://bücher.example/straße"}`, `{"url":"https://u:p@a/"}`, `{"url":"https://u@a/"}`,
	`{"url":"file:///etc/passwd"}`, `{"url":"gopher://127.0.0.1:70/_GET"}`, `{"url":"javascript:alert(1)"}`,
	`{"url":"http://[::1]/"}`, `{"url":"http://2130706433/"}`, `{"url":"https://a:99999/"}`, `{"url":"https://a:0/"}`,
	`{"url":"https://a/` + strings.Repeat("é", 1020) + `"}`, `{"url":"https://a/` + strings.Repeat("x", 2040) + `"}`,
	`{"url":"https://a/"} {"url":"https://b/"}`, `{"url":"https://a/","url":"ftp://b/"}`, `{"URL":"https://a/"}`,
	`{"url":"https://a/","tags":["` + strings.Repeat(`a","`, 25) + `b"]}`, `{"url":"https://a/","tags":["A.b_c-d","a.B_C-D"]}`,
	`{"url":"https://a/","tags":null,"title":null}`, `{"url":"\thttps://a/\n"}`, `{"url":"https://a/\u2028"}`,
	`{"url":"http://[fe80::1%25eth0]/"}`, `{"url":"http://a b/"}`, `{"url":"HTTPS://A/"}`, `{"url":"https:a"}`,
	`{"url":"//a/"}`, `{"url":"https://%41/"}`,
}

// FuzzCreateBookmark sends POST /bookmarks with any body and any Content-Type through the
// whole Echo stack (middleware, body limit, handler) against a real database. Properties:
// never a 5xx; the status is one of 201, 400, 413, 415, 422; every answer is JSON with a
// request ID; an error has a code and message; 415 only for a Content-Type that is not
// JSON, and a JSON Content-Type with a body within the limit is never 413 or 415; a 201
// echoes a bookmark whose URL, title and tags pass validation unchanged.
func FuzzCreateBookmark(f *testing.F) {
	for _, s := range createSeeds {
		f.Add([]byte(s), "application/json")
	}
	f.Add([]byte(`{"url":"https://a/"}`), "text/plain")
	f.Add([]byte(`url=https%3A%2F%2Fa%2F`), "application/x-www-form-urlencoded")
	f.Add([]byte(`{"url":"https://a/"}`), "")
	f.Add([]byte(`{"url":"https://a/"}`), "application/json; charset=utf-16")
	f.Add([]byte(`{"url":"https://a/"}`), "APPLICATION/JSON; CHARSET=UTF-8")
	f.Add([]byte(`{"url":"https://a/"}`), "application/merge-patch+json")
	f.Add([]byte(`{"url":"https://a/"}`), "application/json; charset")
	f.Add([]byte(`{"url":"https://a/"}`), "multipart/form-data; boundary=x")
	f.Add([]byte(`{"url":"https://a/"}`), "application/json\x00")
	b := setup(f)
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		req := httptest.NewRequest("POST", "/bookmarks", bytes.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		rec := b.serve(b.auth(req))
		code := rec.Code
		switch code {
		case 201, 400, 413, 415, 422:
		default:
			t.Fatalf("status %d for body %q, Content-Type %q: %s", code, body, contentType, rec.Body.String())
		}
		if rec.Header().Get(echo.HeaderXRequestID) == "" {
			t.Fatal("no request ID")
		}
		jsonCT := isJSONContentType(contentType)
		if code == 415 && jsonCT {
			t.Fatalf("415 for the JSON Content-Type %q", contentType)
		}
		if jsonCT && len(body) <= 64<<10 && (code == 413 || code == 415) {
			t.Fatalf("%d for a JSON body of %d bytes", code, len(body))
		}
		if code != 201 {
			var p Problem
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Error.Code == "" || p.Error.Message == "" || p.Error.RequestID == "" {
				t.Fatalf("status %d: body %q is not a problem (%v)", code, rec.Body.String(), err)
			}
			return
		}
		if !jsonCT {
			t.Fatalf("201 for Content-Type %q", contentType)
		}
		var req2 CreateBookmarkRequest
		if err := json.Unmarshal(body, &req2); err != nil {
			t.Fatalf("201 for a body encoding/json refuses (%v): %q", err, body)
		}
		var bm Bookmark
		if err := json.Unmarshal(rec.Body.Bytes(), &bm); err != nil {
			t.Fatalf("201 body %q: %v", rec.Body.String(), err)
		}
		if u, msg := checkURL(bm.URL); msg != "" || u != bm.URL {
			t.Fatalf("stored URL %q does not validate as itself: %q %s", bm.URL, u, msg)
		}
		if ti, msg := checkTitle(bm.Title); msg != "" || ti != bm.Title {
			t.Fatalf("stored title %q does not validate as itself: %s", bm.Title, msg)
		}
		if tags, msg := checkTags(bm.Tags); msg != "" || len(tags) != len(bm.Tags) {
			t.Fatalf("stored tags %q do not validate: %s", bm.Tags, msg)
		}
		if bm.FetchJob == nil || bm.FetchJob.Kind != "fetch_bookmark" {
			t.Fatalf("no fetch job: %+v", bm)
		}
	})
}

// FuzzURLValidation: checkURL never panics, and accepts only what the worker would try
// and the database would store: an absolute http or https URL with a host, a port (if any)
// from 1 to 65535, no userinfo, no control characters, valid UTF-8, at most maxURLLen bytes,
// no fragment; and its normal form is a fixed point (validating it again changes nothing).
func FuzzURLValidation(f *testing.F) {
	for _, s := range []string{
		"https://example.com/", "http://a", "HTTP://A:80/x?y#z", "https://u:p@a/", "https://u@a/", "https://:@a/",
		"file:///etc/passwd", "gopher://a:70/_x", "javascript:alert(1)", "data:text/html,x", "ftp://a/",
		"http://[::1]/", "http://[::ffff:127.0.0.1]/", "http://2130706433/", "http://0x7f.1/", "http://[fe80::1%25eth0]/",
		"https://a:99999/", "https://a:0/", "https://a:-1/", "https://a:/", "https://a:08/", "//a/", "https:a", "https:///x",
		"https://a/" + strings.Repeat("é", 1020), "https://a/" + strings.Repeat("x", 2038), "https://a/ b",
		"https://a/\x00", "https://a/\x7f", "https://a/\xff", "https://a/\u2028", " \thttps://a/\n ", "",
		"https://bücher.example/", "https://%41/", "https://a%2fb/", "https://[::1", "https://a]/", "https://a/%zz",
		"https://a/?" + strings.Repeat("%", 100), "http://a@b@c/", "http://a\\b/", "https://a/#" + strings.Repeat("f", 3000),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		out, msg := checkURL(raw)
		if msg != "" {
			if out != "" {
				t.Fatalf("refused %q (%s) but returned %q", raw, msg, out)
			}
			return
		}
		if len(out) > maxURLLen || out == "" {
			t.Fatalf("accepted %q as %d bytes", raw, len(out))
		}
		if !utf8.ValidString(out) || strings.IndexFunc(out, unicode.IsControl) >= 0 {
			t.Fatalf("accepted %q as %q, with control characters or invalid UTF-8", raw, out)
		}
		u, err := url.Parse(out)
		switch {
		case err != nil:
			t.Fatalf("accepted %q as %q, which does not parse: %v", raw, out, err)
		case u.Scheme != "http" && u.Scheme != "https":
			t.Fatalf("accepted %q: scheme %q", raw, u.Scheme)
		case u.Host == "" || u.Hostname() == "" || u.Opaque != "":
			t.Fatalf("accepted %q: no host in %q", raw, out)
		case u.User != nil:
			t.Fatalf("accepted %q: userinfo %q", raw, u.User)
		case u.Fragment != "":
			t.Fatalf("accepted %q: fragment %q", raw, u.Fragment)
		}
		if again, msg := checkURL(out); msg != "" || again != out {
			t.Fatalf("the normal form %q of %q validates as %q (%s)", out, raw, again, msg)
		}
	})
}

// FuzzTypeErrorPath decodes any body into the import request (the deepest shape the API
// takes) and, on a type error, checks the path typeErrorPath names against encoding/json's
// own Field: with the indexes taken out they agree (items[3].url and items.url), and the
// path is one the validation messages could use (no empty segment).
func FuzzTypeErrorPath(f *testing.F) {
	for _, s := range []string{
		`{"items":[{"url":"https://a/"},{"url":5}]}`, `{"items":[{"url":"a","title":[1]}]}`, `{"items":[1,2]}`,
		`{"items":{"a":1}}`, `{"tags":["a",{"b":[1,2,{"c":3}]}]}`, `{"page_size":"x"}`, `{"page_size":1e999}`,
		` { "it\u0065ms" : [ { } , { "url" : true } ] } `, `{"items":[{"url":"a","url":5}]}`, `[]`, `5`, `"x"`,
		`{"unknown":[1,{"x":2}],"items":[{"title":{}}]}`, `{"items":[{"URL":5}]}`, `{"items":[[{"url":1}]]}`,
	} {
		f.Add([]byte(s))
	}
	indexes := regexp.MustCompile(`\[\d+\]`)
	f.Fuzz(func(t *testing.T, body []byte) {
		var req CreateImportRequest
		var te *json.UnmarshalTypeError
		if !errors.As(json.Unmarshal(body, &req), &te) {
			return
		}
		path := typeErrorPath(body, te)
		if got := indexes.ReplaceAllString(path, ""); got != te.Field {
			t.Fatalf("body %q: path %q, but encoding/json says the field is %q", body, path, te.Field)
		}
		if strings.HasPrefix(path, ".") || strings.Contains(path, "..") || strings.HasSuffix(path, ".") {
			t.Fatalf("body %q: path %q has an empty segment", body, path)
		}
	})
}
