package httpapi

// Bad inputs to POST /bookmarks and the answer to each (TestBadInput, TestBadInputHugeBody).
// A body that is not the JSON object the endpoint takes, wrong types included, is 400; a
// well-formed body with an unacceptable field is 422; the API judges the form of a URL, not
// its address, which the worker's dial-time guard alone decides.
//
//	row                                              answer
//	malformed JSON {"url":                           400 bad_request
//	trailing data {"url":"https://a/"} {}            400 bad_request
//	wrong type {"url": 5}                            400 bad_request: a type mismatch means the
//	                                                 body is not the JSON the endpoint takes
//	                                                 (422 is kept for values of the right type)
//	wrong type {"url": {"a": 1}}, {"tags": [1]}      400 bad_request
//	huge number {"title": 1e999}                     400 bad_request
//	deeply nested arrays (5000 levels)               400 bad_request
//	50 MB body, streamed, no Content-Length          413 body_too_large, after reading at most
//	                                                 the 64 KiB limit plus one buffer (asserted:
//	                                                 under 1 MiB read of the 50 MB)
//	50 MB body with Content-Length: 52428800         413 body_too_large, nothing read
//	Content-Type text/plain, form, or missing        415 unsupported_media_type (also keeps out
//	                                                 cross-site "simple" browser requests)
//	Content-Type application/json; charset=utf-16    415
//	invalid UTF-8 in the title ("a\xffb")            201, sanitized: each invalid byte becomes
//	                                                 U+FFFD (encoding/json's decoding), stored
//	                                                 and returned as "a\uFFFDb"
//	lone surrogate escape "\ud800" in the title      201, sanitized to U+FFFD
//	NUL in the title ("a\u0000b")                    422 title (PostgreSQL text cannot hold NUL)
//	URL with credentials https://u:p@a/, https://u@a/  422 url
//	file:///etc/passwd                               422 url
//	gopher://127.0.0.1:70/_GET                       422 url
//	javascript:alert(1)                              422 url
//	port out of range https://a:99999/, :0           422 url
//	URL within 2048 bytes whose normal form is not   422 url (was a 500: the percent-encoded form
//	  (https://a/ + 1020 × "é")                      broke the database's length check)
//	space in the query https://a/?q=a b              201, stored as https://a/?q=a%20b (was stored
//	                                                 raw: the normal form did not validate as
//	                                                 itself; found by FuzzURLValidation)
//	IPv6 loopback http://[::1]/                      201, accepted: the worker's guard refuses it
//	                                                 at dial time (bookmarks-worker/internal/
//	                                                 fetch/bad_input_test.go tests the guard's
//	                                                 check; internal/handlers/bad_input_test.go
//	                                                 the bookmark failed with "blocked_address")
//	decimal IP http://2130706433/ (127.0.0.1)        201, accepted: the worker refuses it before
//	                                                 any lookup, and the guard refuses 127.0.0.1
//	                                                 (same worker tests)
//	unknown task kind in venturi_job                 not reachable through the API, which only
//	                                                 enqueues known kinds; the row stays pending
//	                                                 and unclaimed: venturi's
//	                                                 TestUnknownKindIsNeverClaimed, and at app
//	                                                 level bookmarks-worker/internal/handlers/
//	                                                 bad_input_test.go
//	carry that no longer decodes                     not reachable through the API (carries are
//	                                                 written by the worker); the job ends dead
//	                                                 with "decode carry": venturi's
//	                                                 TestUndecodablePayloadOrCarryGoesDead, and
//	                                                 at app level the same worker file

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const ctJSON = "application/json"
	for _, tt := range []struct {
		name, contentType, body string
		status                  int
		field                   string // for 422: the field with a message
		title                   string // for 201: the stored title
		url                     string // for 201, if set: the stored URL
	}{
		{"malformed JSON", ctJSON, `{"url":`, 400, "", "", ""},
		{"trailing data", ctJSON, `{"url":"https://a/"} {}`, 400, "", "", ""},
		{"wrong type: url is a number", ctJSON, `{"url": 5}`, 400, "", "", ""},
		{"wrong type: url is an object", ctJSON, `{"url": {"a": 1}}`, 400, "", "", ""},
		{"wrong type: tags of numbers", ctJSON, `{"url":"https://a/","tags":[1]}`, 400, "", "", ""},
		{"huge number", ctJSON, `{"url":"https://a/","title":1e999}`, 400, "", "", ""},
		{"deep nesting", ctJSON, strings.Repeat("[", 5000) + strings.Repeat("]", 5000), 400, "", "", ""},
		{"text/plain", "text/plain", `{"url":"https://a/"}`, 415, "", "", ""},
		{"form", "application/x-www-form-urlencoded", `url=https%3A%2F%2Fa%2F`, 415, "", "", ""},
		{"no Content-Type", "", `{"url":"https://a/"}`, 415, "", "", ""},
		{"UTF-16 charset", "application/json; charset=utf-16", `{"url":"https://a/"}`, 415, "", "", ""},
		{"JSON with charset", "application/json; charset=UTF-8", `{"url":"https://a/"}`, 201, "", "", ""},
		{"invalid UTF-8 in the title", ctJSON, "{\"url\":\"https://a/\",\"title\":\"a\xffb\"}", 201, "", "a\uFFFDb", ""},
		{"lone surrogate in the title", ctJSON, `{"url":"https://a/","title":"a\ud800b"}`, 201, "", "a\uFFFDb", ""},
		{"NUL in the title", ctJSON, `{"url":"https://a/","title":"a\u0000b"}`, 422, "title", "", ""},
		{"credentials", ctJSON, `{"url":"https://u:p@a/"}`, 422, "url", "", ""},
		{"user name", ctJSON, `{"url":"https://u@a/"}`, 422, "url", "", ""},
		{"file URL", ctJSON, `{"url":"file:///etc/passwd"}`, 422, "url", "", ""},
		{"gopher URL", ctJSON, `{"url":"gopher://127.0.0.1:70/_GET"}`, 422, "url", "", ""},
		{"javascript URL", ctJSON, `{"url":"javascript:alert(1)"}`, 422, "url", "", ""},
		{"port out of range", ctJSON, `{"url":"https://a:99999/"}`, 422, "url", "", ""},
		{"port zero", ctJSON, `{"url":"https://a:0/"}`, 422, "url", "", ""},
		{"too long once normalized", ctJSON, `{"url":"https://a/` + strings.Repeat("é", 1020) + `"}`, 422, "url", "", ""},
		{"IPv6 loopback", ctJSON, `{"url":"http://[::1]/"}`, 201, "", "", ""},
		{"decimal IP", ctJSON, `{"url":"http://2130706433/"}`, 201, "", "", ""},
		{"space in the query", ctJSON, `{"url":"https://a/?q=a b "}`, 201, "", "", "https://a/?q=a%20b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", "/bookmarks", strings.NewReader(tt.body))
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			rec := b.serve(b.auth(req))
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d; body %s", rec.Code, tt.status, rec.Body.String())
			}
			var out map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatalf("body %q is not JSON", rec.Body.String())
			}
			if tt.status == 201 {
				if out["title"] != tt.title {
					t.Fatalf("title = %q, want %q", out["title"], tt.title)
				}
				if tt.url != "" && out["url"] != tt.url {
					t.Fatalf("url = %q, want %q", out["url"], tt.url)
				}
				return
			}
			detail := out["error"].(map[string]any)
			if detail["code"] == "" || detail["message"] == "" || detail["request_id"] == "" {
				t.Fatalf("problem = %v", detail)
			}
			if tt.field != "" {
				if fields, _ := detail["fields"].(map[string]any); fields[tt.field] == nil {
					t.Fatalf("no message for field %s: %v", tt.field, detail)
				}
			}
		})
	}
}

// countingBody streams n bytes of a JSON string without allocating them, counting what is
// read.
type countingBody struct {
	n, read int64
	prefix  string
	nread   atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	if c.read >= c.n {
		return 0, io.EOF
	}
	k := int64(len(p))
	if rest := c.n - c.read; k > rest {
		k = rest
	}
	for i := range p[:k] {
		off := c.read + int64(i)
		if off < int64(len(c.prefix)) {
			p[i] = c.prefix[off]
		} else {
			p[i] = 'x'
		}
	}
	c.read += k
	c.nread.Store(c.read)
	return int(k), nil
}

// TestBadInputHugeBody streams a 50 MB body: the answer is 413 and the server reads at most
// the limit and a buffer, not the body.
func TestBadInputHugeBody(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const size = 50 << 20
	for _, declared := range []bool{false, true} {
		body := &countingBody{n: size, prefix: `{"url":"https://a/","title":"`}
		req := httptest.NewRequest("POST", "/bookmarks", body)
		req.Header.Set("Content-Type", "application/json")
		req.ContentLength = -1 // streamed (chunked)
		if declared {
			req.ContentLength = size
		}
		rec := b.serve(b.auth(req))
		if rec.Code != 413 || !strings.Contains(rec.Body.String(), "body_too_large") {
			t.Fatalf("declared length %v: status %d, body %s", declared, rec.Code, rec.Body.String())
		}
		read := body.nread.Load()
		if read > 1<<20 {
			t.Fatalf("declared length %v: the server read %d bytes of a %d-byte body", declared, read, size)
		}
		if declared && read != 0 {
			t.Fatalf("a body declared too long was read (%d bytes)", read)
		}
	}
}
