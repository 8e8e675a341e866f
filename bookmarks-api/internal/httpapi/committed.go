package httpapi

import (
	"time"

	"github.com/labstack/echo/v4"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// committedJob is a job as its enqueue in the create's transaction left it at commit: due
// at once (available, run_at the transaction's time), never run, its journal empty, in
// the task's queue and partition. A create answers with it when the job cannot be read
// back.
func committedJob(id ulid.ULID, task venturi.Task, runAt time.Time) *Job {
	j := &Job{ID: id.String(), Kind: task.Kind(), State: string(venturi.StateAvailable), RunAt: runAt,
		Journal: []JournalEntry{}, Queue: venturi.DefaultQueue}
	if q, ok := task.(venturi.Queuer); ok && q.Queue() != "" {
		j.Queue = q.Queue()
	}
	if p, ok := task.(venturi.Partitioner); ok {
		j.Partition = p.Partition()
	}
	return j
}

// answerCommitted ends a create whose transaction has committed: err is what answering
// with the resource as read after the commit returned. If that failed (the database is
// slow or gone, the request's time is spent) and nothing has been written yet, the
// answer is status with atCommit, the resource as the transaction wrote it, and the
// failure is logged: the create succeeded, and an error would make the client retry and
// create again.
func (a *API) answerCommitted(c echo.Context, status int, atCommit any, err error) error {
	if err == nil || c.Response().Committed {
		return err
	}
	a.log.WarnContext(c.Request().Context(), "a committed create could not be read back: answered with what its transaction wrote",
		"err", err, "method", c.Request().Method, "path", c.Path(), "request_id", c.Response().Header().Get(echo.HeaderXRequestID))
	return c.JSON(status, atCommit)
}
