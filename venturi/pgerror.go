package venturi

import "github.com/venturi-dev/venturi/internal/pgerr"

// IsTransient reports whether err says that a statement could not run to completion
// (the connection broke, the server is shutting down or short of resources, the
// transaction hit a deadlock or serialization failure, a statement timed out) rather
// than that the server refused the statement's data. The same call may succeed when
// retried; a refusal (a constraint, an invalid value, a value too large) will not.
//
// Every path of the worker classifies errors with it: a transient failure to store a
// run's result is retried with the same result until the run's lease would expire,
// never stored degraded. A producer can use it to tell "try again" from "bad input",
// for example to answer 503 rather than 400.
func IsTransient(err error) bool { return pgerr.IsTransient(err) }
