package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// scrapeValue scrapes url (a /metrics endpoint) and returns the value of the series whose
// name and labels are exactly series, or -1 when it is absent.
func scrapeValue(url, series string) (float64, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, "", fmt.Errorf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return -1, string(b), nil
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	return v, string(b), err
}

// TestMetricsAfterAFetch: after a bookmark's fetch, the worker's /metrics (its own
// listener, unauthenticated) counts the completed fetch run, and the API's counts the
// enqueue and shows the queue gauges from venturi's stats table.
func TestMetricsAfterAFetch(t *testing.T) {
	finished := `venturi_jobs_finished_total{kind="fetch_bookmark",outcome="completed",queue="default"}`
	before, _, err := scrapeValue(sys.workerMetrics, finished) // processes restart between scenarios: counters too
	if err != nil {
		t.Fatal(err)
	}
	b := create(t, sys.pageURL+"/page/metrics")
	waitBookmark(t, b.ID, "fetched", fetchDeadline)
	eventually(t, 10*time.Second, "the worker's /metrics to count the fetch", func() (bool, string) {
		v, body, err := scrapeValue(sys.workerMetrics, finished)
		if err != nil {
			return false, err.Error()
		}
		return v >= max(before, 0)+1, fmt.Sprintf("%s = %v (before: %v)\n%s", finished, v, before, body)
	})
	eventually(t, 30*time.Second, "the API's /metrics to count the enqueue and show the queue depth", func() (bool, string) {
		enq, body, err := scrapeValue(sys.apiMetrics, `venturi_jobs_enqueued_total{action="inserted",kind="fetch_bookmark",queue="default"}`)
		if err != nil {
			return false, err.Error()
		}
		depth, _, err := scrapeValue(sys.apiMetrics, `venturi_queue_depth{queue="default",state="completed"}`)
		if err != nil {
			return false, err.Error()
		}
		return enq >= 1 && depth >= 1, fmt.Sprintf("enqueued %v, completed depth %v\n%s", enq, depth, body)
	})
}
