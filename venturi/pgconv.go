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
