package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/dashboard"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// Mount the dashboard at /ops behind the host's authentication, read-only: Access names
// the signed-in user (for the audit log) and grants no action, so the pages show no form
// and a POST is refused.
func Example() {
	ctx := context.Background()
	pool, cleanup, err := testdb.Open(ctx, 5) // a fresh schema of TEST_DATABASE_URL
	if err != nil {
		log.Fatal(err)
	}
	defer cleanup()
	if _, err := venturi.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})

	dash, err := dashboard.New(q, dashboard.Config{
		Prefix: "/ops",
		Access: func(r *http.Request) dashboard.Access {
			user, _, _ := r.BasicAuth() // the host authenticated it (requireLogin below)
			return dashboard.Access{Actor: user, Grants: dashboard.NoActions}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", requireLogin(dash))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	get, _ := http.NewRequest(http.MethodGet, srv.URL+"/ops/", nil)
	get.SetBasicAuth("alice", "secret")
	resp, err := http.DefaultClient.Do(get)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println("GET /ops/:", resp.StatusCode, strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'"))

	post, _ := http.NewRequest(http.MethodPost, srv.URL+"/ops/queues/pause", strings.NewReader(url.Values{"queue": {"default"}}.Encode()))
	post.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	post.SetBasicAuth("alice", "secret")
	resp, err = http.DefaultClient.Do(post)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println("POST /ops/queues/pause:", resp.StatusCode)

	resp, err = http.Get(srv.URL + "/ops/")
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println("GET /ops/ without credentials:", resp.StatusCode)
	// Output:
	// GET /ops/: 200 true
	// POST /ops/queues/pause: 403
	// GET /ops/ without credentials: 401
}

// requireLogin stands for the host's authentication: here one user and password.
func requireLogin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "alice" || p != "secret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="ops"`)
			http.Error(w, "sign in", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Users of one name, told apart: Access.Subject (here the user's ID) binds the forms'
// tokens and names the user in the audit log beside the name. Behind a proxy that
// terminates TLS, Config.PublicOrigin is the origin browsers use, scheme included: a form
// posted from the http:// origin of the same host is refused.
func Example_subject() {
	ctx := context.Background()
	pool, cleanup, err := testdb.Open(ctx, 5) // a fresh schema of TEST_DATABASE_URL
	if err != nil {
		log.Fatal(err)
	}
	defer cleanup()
	if _, err := venturi.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	ids := map[string]string{"key-1": "u-1", "key-2": "u-2"} // two users named "ops"
	dash, err := dashboard.New(q, dashboard.Config{
		Prefix:       "/ops",
		PublicOrigin: "https://ops.example.com",
		Access: func(r *http.Request) dashboard.Access {
			_, key, _ := r.BasicAuth() // the host authenticated it
			return dashboard.Access{Actor: "ops", Subject: ids[key], Grants: dashboard.PauseQueues}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewTLSServer(dash) // the proxy's side is left out: browsers see ops.example.com
	defer srv.Close()
	browser := srv.Client()
	browser.Jar, _ = cookiejar.New(nil)
	browser.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	send := func(method, path, key, body string, hdr ...string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth("ops", key)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := browser.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	_, page := send(http.MethodGet, "/ops/queues", "key-1", "")
	token := regexp.MustCompile(`name="csrf-token" content="([^"]+)"`).FindStringSubmatch(page)[1]
	form := url.Values{"queue": {"media"}, "csrf": {token}}.Encode()

	status, _ := send(http.MethodPost, "/ops/queues/pause", "key-2", form, "Origin", "https://ops.example.com")
	fmt.Println("user u-2 with u-1's form:", status)
	status, _ = send(http.MethodPost, "/ops/queues/pause", "key-1", form, "Origin", "http://ops.example.com")
	fmt.Println("user u-1 from http://ops.example.com:", status)
	status, _ = send(http.MethodPost, "/ops/queues/pause", "key-1", form, "Origin", "https://ops.example.com")
	fmt.Println("user u-1 from https://ops.example.com:", status)

	entries, err := q.AuditLog(ctx, 0, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries {
		fmt.Println("audit:", e.Actor, e.Action, e.Target)
	}
	// Output:
	// user u-2 with u-1's form: 403
	// user u-1 from http://ops.example.com: 403
	// user u-1 from https://ops.example.com: 303
	// audit: ops (u-1) queue.pause media
}
