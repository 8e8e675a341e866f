package dashboard_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
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
