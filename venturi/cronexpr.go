package venturi

import "github.com/venturi-dev/venturi/internal/cronexpr"

// ErrInvalidCron is returned (wrapped, with the reason) for a cron expression that does
// not parse or never fires.
var ErrInvalidCron = cronexpr.ErrInvalid
