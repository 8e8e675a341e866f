package venturi

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"
)

// delayOf converts a duration into the microseconds the SQL layer takes.
func delayOf(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return d.Microseconds()
}

func uuidOf(id ulid.ULID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

func ulidOf(u pgtype.UUID) ulid.ULID { return ulid.ULID(u.Bytes) }

// uuidText formats id as PostgreSQL prints a uuid.
func uuidText(id ulid.ULID) string {
	const hexd = "0123456789abcdef"
	b := make([]byte, 0, 36)
	for i, c := range id {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hexd[c>>4], hexd[c&15])
	}
	return string(b)
}
