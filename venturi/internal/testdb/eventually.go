package testdb

import (
	"testing"
	"time"
)

// Eventually polls cond every 20ms until it holds, failing tb after 30 seconds with what
// it waited for: the services' tests wait on a condition, never a fixed time.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}
