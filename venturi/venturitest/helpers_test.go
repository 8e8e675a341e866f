package venturitest_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
	"github.com/venturi-dev/venturi/internal/testdb"
)

// newPool returns a pool on a fresh, migrated schema.
func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := testdb.Pool(t, testdb.Schema(t), 10)
	if _, err := venturi.Migrate(context.Background(), pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return pool
}

// recorder is a testing.TB that records failures instead of failing the test, to check
// the helpers' failure messages. Its Fatal ends the goroutine, as testing's does.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) {
	r.Errorf("%s", fmt.Sprint(args...))
	runtime.Goexit()
}

// failures runs f against a recorder in its own goroutine (Fatal ends it) and returns the
// recorded failures.
func failures(t *testing.T, f func(tb testing.TB)) []string {
	t.Helper()
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.failed
}
