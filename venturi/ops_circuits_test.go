package venturi_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/venturi-dev/venturi"
)

// TestListCircuitsPagesThroughEveryBreaker: with more breakers than a page (and rate
// windows in the same table), ListCircuits returns each breaker once, by kind and then
// partition, in pages of the limit whose Next ends on the last; a cursor it did not write
// is ErrInvalidListCursor, never a database error.
func TestListCircuitsPagesThroughEveryBreaker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, q := newQueue(t)
	const hosts = 120
	for _, stmt := range []string{
		`INSERT INTO venturi_kind (kind, brk_failures, brk_by_part, rate_n) VALUES ('fetch', 3, true, 5), ('mail', 2, false, 0)`,
		`INSERT INTO venturi_gate (key, kind, part, fails)
		 SELECT 'b' || chr(31) || 'fetch' || chr(31) || p, 'fetch', p, i % 4
		 FROM (SELECT i, 'h' || lpad(i::text, 3, '0') AS p FROM generate_series(1, ` + fmt.Sprint(hosts) + `) i) s`,
		`INSERT INTO venturi_gate (key, kind, part)
		 SELECT 'r' || chr(31) || 'fetch' || chr(31) || p, 'fetch', p
		 FROM (SELECT 'h' || lpad(i::text, 3, '0') AS p FROM generate_series(1, ` + fmt.Sprint(hosts) + `) i) s`,
		`INSERT INTO venturi_gate (key, kind, part, fails) VALUES ('b' || chr(31) || 'mail', 'mail', NULL, 1)`,
	} {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	all, err := q.Circuits(ctx)
	if err != nil || len(all) != hosts+1 {
		t.Fatalf("Circuits: %d, %v", len(all), err)
	}
	var got []string
	cursor, pages := "", 0
	for {
		page, err := q.ListCircuits(ctx, cursor, 50)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		if page.Next != "" && len(page.Circuits) != 50 {
			t.Fatalf("page %d: %d breakers and a next page", pages, len(page.Circuits))
		}
		for _, c := range page.Circuits {
			got = append(got, fmt.Sprintf("%s/%s %d of %d", c.Kind, c.Partition, c.Failures, c.Threshold))
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	var want []string
	for _, c := range all {
		want = append(want, fmt.Sprintf("%s/%s %d of %d", c.Kind, c.Partition, c.Failures, c.Threshold))
	}
	if pages != 3 || strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("%d pages:\n%s\nwant the breakers of Circuits:\n%s", pages, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.HasPrefix(got[0], "fetch/h001 1 of 3") || got[len(got)-1] != "mail/ 1 of 2" {
		t.Fatalf("first %q, last %q", got[0], got[len(got)-1])
	}
	// The default page and the bound.
	if page, err := q.ListCircuits(ctx, "", 0); err != nil || len(page.Circuits) != 50 || page.Next == "" {
		t.Fatalf("the default page: %d, %q, %v", len(page.Circuits), page.Next, err)
	}
	if page, err := q.ListCircuits(ctx, "", venturi.MaxListPage+1); err != nil || len(page.Circuits) != hosts+1 || page.Next != "" {
		t.Fatalf("a page over MaxListPage: %d, %q, %v", len(page.Circuits), page.Next, err)
	}
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, c := range []string{"garbage!", enc("r\x1ffetch\x1fh001"), enc("b\x1ffetch\x1fh\x00"), enc("b\x1f\xff"), enc("b\x1f"),
		enc("b\x1f" + strings.Repeat("k", 1000))} {
		if _, err := q.ListCircuits(ctx, c, 10); !errors.Is(err, venturi.ErrInvalidListCursor) {
			t.Errorf("cursor %.40q: %v; want ErrInvalidListCursor", c, err)
		}
	}
}
