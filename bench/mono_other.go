//go:build !linux

package main

// monoNow is Linux only: setupGraphile does not run graphile-worker elsewhere, the only
// user of this clock. (The bench reads /proc too.)
func monoNow() int64 { return 0 }
