package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
)

// CSRF protection, the second of two layers (the first is the origin check, origin.go,
// which refuses a POST that the browser says comes from another origin): a signed
// double-submit cookie. The first page a browser loads sets the cookie
// venturi_dashboard_nonce, 32 random bytes (HttpOnly, SameSite=Strict, Path the
// dashboard's prefix, Secure over TLS). Every form carries a token in a hidden field:
// HMAC-SHA256(key, "venturi-dashboard-csrf-subject\x00" + nonce + "\x00" + subject) when
// the Access names a Subject, else HMAC-SHA256(key, "venturi-dashboard-csrf\x00" + nonce +
// "\x00" + actor) (the two labels differ, so no actor's token is a subject's). A POST is
// accepted only when the field matches the cookie under the key: another site can make the
// browser send the cookie but cannot read a page to learn the token, and a token does not
// work for another subject (or, without subjects, another actor) or another handler's key.

// nonceCookie is the cookie that holds the browser's nonce.
const nonceCookie = "venturi_dashboard_nonce"

// csrfField is the hidden form field that carries the token.
const csrfField = "csrf"

type csrf struct {
	key    []byte
	path   string // the cookie's path: the dashboard's prefix + "/"
	secure bool   // the cookie is always Secure: Config.PublicOrigin is https
}

var b64 = base64.RawURLEncoding

// nonce returns the request's nonce, setting a fresh cookie on w when the request has
// none (or a malformed one).
func (c csrf) nonce(w http.ResponseWriter, r *http.Request) []byte {
	if n, ok := requestNonce(r); ok {
		return n
	}
	n := make([]byte, 32)
	_, _ = rand.Read(n) // crypto/rand.Read never fails
	http.SetCookie(w, &http.Cookie{Name: nonceCookie, Value: b64.EncodeToString(n), Path: c.path,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.secure || secureRequest(r)})
	return n
}

func requestNonce(r *http.Request) ([]byte, bool) {
	ck, err := r.Cookie(nonceCookie)
	if err != nil {
		return nil, false
	}
	n, err := b64.DecodeString(ck.Value)
	if err != nil || len(n) != 32 {
		return nil, false
	}
	return n, true
}

// secureRequest reports whether the browser reached the dashboard over TLS, directly or
// through a proxy that says so; the cookie is then marked Secure. (A forged header only
// sets the flag.)
func secureRequest(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

// sign is the token of a nonce for a's identity: its Subject, or its Actor without one.
func (c csrf) sign(nonce []byte, a Access) string {
	m := hmac.New(sha256.New, c.key)
	id := a.Actor
	if a.Subject != "" {
		m.Write([]byte("venturi-dashboard-csrf-subject\x00"))
		id = a.Subject
	} else {
		m.Write([]byte("venturi-dashboard-csrf\x00"))
	}
	m.Write(nonce)
	m.Write([]byte{0})
	m.Write([]byte(id))
	return b64.EncodeToString(m.Sum(nil))
}

// token returns the token the request's forms carry, setting the nonce cookie if needed.
func (c csrf) token(w http.ResponseWriter, r *http.Request, a Access) string {
	return c.sign(c.nonce(w, r), a)
}

// check reports whether a POST carries the token of its nonce cookie and identity.
func (c csrf) check(r *http.Request, a Access) bool {
	n, ok := requestNonce(r)
	if !ok {
		return false
	}
	got := r.PostFormValue(csrfField)
	return got != "" && hmac.Equal([]byte(got), []byte(c.sign(n, a)))
}
