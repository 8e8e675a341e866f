package main

import (
	"syscall"
	"unsafe"
)

// monoNow reads CLOCK_MONOTONIC in nanoseconds: the clock of Go's monotonic readings and
// of Node's process.hrtime, so that times taken in the bench and in a worker.mjs process
// compare (scenario 5 with graphile-worker).
func monoNow() int64 {
	var ts syscall.Timespec
	if _, _, e := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		panic("clock_gettime(CLOCK_MONOTONIC): " + e.Error())
	}
	return ts.Nano()
}
