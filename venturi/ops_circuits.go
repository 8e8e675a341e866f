package venturi

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// CircuitPage is one page of [Queue.ListCircuits].
type CircuitPage struct {
	Circuits []Circuit
	// Next is the cursor of the next page; empty on the last page.
	Next string
}

// maxCircuitKeyBytes bounds a breaker's key in a cursor: the type letter, a kind (at most
// 128 bytes), a partition (at most MaxPartitionBytes) and two separators.
const maxCircuitKeyBytes = 1 + 1 + 128 + 1 + MaxPartitionBytes

// ListCircuits returns the circuit breakers that have seen a claim, one page at a time:
// up to limit (default 50, at most MaxListPage) breakers after cursor (empty for the first
// page; CircuitPage.Next for the next), by kind and then partition, a kind-wide breaker
// before its kind's partitions (the order of the breakers' keys under the database's
// collation). Each page reads one range of the breakers' primary key, so its cost does not
// grow with their number; [Queue.Circuits] reads them all at once. A cursor is a position,
// not a snapshot: a breaker created behind it appears on a later page. A cursor that
// ListCircuits did not write is [ErrInvalidListCursor].
func (q *Queue) ListCircuits(ctx context.Context, cursor string, limit int) (CircuitPage, error) {
	after, err := decodeCircuitCursor(cursor)
	if err != nil {
		return CircuitPage{}, err
	}
	if limit <= 0 {
		limit = defaultListPage
	}
	limit = min(limit, MaxListPage)
	rows, err := q.q.ListCircuitsAfter(ctx, q.pool, dbsqlc.ListCircuitsAfterParams{After: after, Max: int32(limit + 1)})
	if err != nil {
		return CircuitPage{}, err
	}
	var page CircuitPage
	if len(rows) > limit {
		rows = rows[:limit]
		page.Next = base64.RawURLEncoding.EncodeToString([]byte(rows[limit-1].Key))
	}
	page.Circuits = make([]Circuit, len(rows))
	for i, r := range rows {
		page.Circuits[i] = circuitOf(r.Kind, r.Part.String, r.Fails, r.Threshold, r.OpenUntil, r.ProbeUntil, r.UpdatedAt)
	}
	return page, nil
}

// decodeCircuitCursor reads a ListCircuits cursor: the key of the last breaker of the
// previous page ("" for the first page). The key goes to the database as text, so it must
// be a breaker's key of valid UTF-8 without NUL.
func decodeCircuitCursor(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	if len(s) > base64.RawURLEncoding.EncodedLen(maxCircuitKeyBytes) {
		return "", fmt.Errorf("%w: too long for a circuit breaker cursor", ErrInvalidListCursor)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	key := string(b)
	if err != nil || !strings.HasPrefix(key, "b\x1f") || len(key) < 3 || !utf8.ValidString(key) || containsNUL(key) {
		return "", fmt.Errorf("%w: not a circuit breaker cursor", ErrInvalidListCursor)
	}
	return key, nil
}
