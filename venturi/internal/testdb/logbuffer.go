package testdb

import (
	"bytes"
	"sync"
)

// LogBuffer collects log lines written from several goroutines (a service's logger in a
// test: slog.New(slog.NewTextHandler(buf, nil))), for the test to read with String.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
