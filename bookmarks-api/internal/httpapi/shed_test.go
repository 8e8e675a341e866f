package httpapi

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
)

// TestShedLoad: with every place taken, a request is refused with 503, Retry-After and
// the problem body after InFlightWait, the health checks still answer, and a place that
// frees up admits the next request.
func TestShedLoad(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.HTTPErrorHandler = errorHandler(slog.New(slog.DiscardHandler))
	e.Use(shedLoad(2))
	var entered atomic.Int32
	release := make(chan struct{})
	e.GET("/slow", func(c echo.Context) error {
		entered.Add(1)
		<-release
		return c.NoContent(http.StatusNoContent)
	})
	e.GET("/fast", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	e.GET("/healthz", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	serve := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}

	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rec := serve("/slow"); rec.Code != http.StatusNoContent {
				t.Errorf("admitted request: status %d", rec.Code)
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for entered.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the two slow requests never started")
		}
		time.Sleep(time.Millisecond)
	}

	rec := serve("/fast")
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get(echo.HeaderRetryAfter) != "1" {
		t.Fatalf("request over the limit: status %d, Retry-After %q; want 503 and 1", rec.Code, rec.Header().Get(echo.HeaderRetryAfter))
	}
	var p Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Error.Code != "overloaded" {
		t.Fatalf("shed request's body %s (%v)", rec.Body.String(), err)
	}
	if rec := serve("/healthz"); rec.Code != http.StatusOK {
		t.Fatalf("health check under load: status %d", rec.Code)
	}

	close(release)
	wg.Wait()
	if rec := serve("/fast"); rec.Code != http.StatusNoContent {
		t.Fatalf("after the load: status %d", rec.Code)
	}
}

// TestShedLoadOff: a limit <= 0 admits everything.
func TestShedLoadOff(t *testing.T) {
	t.Parallel()
	e := echo.New()
	e.Use(shedLoad(NoInFlightLimit))
	release := make(chan struct{})
	var entered atomic.Int32
	e.GET("/slow", func(c echo.Context) error { entered.Add(1); <-release; return c.NoContent(http.StatusNoContent) })
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/slow", nil))
			if rec.Code != http.StatusNoContent {
				t.Errorf("status %d", rec.Code)
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for entered.Load() < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of 20 requests started with the limit off", entered.Load())
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
}
