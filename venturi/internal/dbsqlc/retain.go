package dbsqlc

import "time"

// RetainUs is a retention as the statements that move or delete ended jobs take it
// (FinishRuns' and SweepEnded's retain_*_us): microseconds, or -1 when nothing is kept (a
// negative retention: venturi.Discard).
func RetainUs(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Microseconds()
}
