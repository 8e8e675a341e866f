package venturi

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
	"github.com/venturi-dev/venturi/internal/listener"
)

// delayedPrefix marks the NOTIFY payload of a delayed job ("@kind"): a worker that wakes
// for it claims once and learns when the job is due, but does not keep looking for work
// as it does after a due job's notification (whose commit may have sent none, see
// Config.PollInterval). Workers that do not know the prefix ignore such payloads, as
// they ignored delayed jobs before.
const delayedPrefix = listener.DelayedPrefix

// notifyPayload is the NOTIFY payload for a job of kind, due now or later. Due and
// delayed jobs are debounced apart, so a delayed enqueue never suppresses the
// notification of a due one.
func notifyPayload(kind string, dueNow bool) string {
	if dueNow {
		return kind
	}
	return delayedPrefix + kind
}

// queueNotify adds a debounced NOTIFY for p to b, delivered at commit. Delayed jobs
// notify too: an idle worker that wakes learns when the next scheduled job is due and
// sleeps until then.
func (q *Queue) queueNotify(b *pgx.Batch, p *plan) {
	q.queueNotifyPayload(b, notifyPayload(p.kind, p.dueNow()))
}

func (q *Queue) queueNotifyPayload(b *pgx.Batch, payload string) {
	if !q.poll && q.notify.allow(payload) {
		dbsqlc.QueueNotify(b, dbsqlc.NotifyParams{Channel: q.channel, Payload: payload})
	}
}

// notifyNow sends a debounced NOTIFY in db's transaction.
func (q *Queue) notifyNow(ctx context.Context, db dbsqlc.DBTX, kind string, dueNow bool) error {
	payload := notifyPayload(kind, dueNow)
	if q.poll || !q.notify.allow(payload) {
		return nil
	}
	if err := q.q.Notify(ctx, db, dbsqlc.NotifyParams{Channel: q.channel, Payload: payload}); err != nil {
		return fmt.Errorf("venturi: notify workers (the enqueue's transaction is aborted): %w", err)
	}
	return nil
}

type notifyLimiter struct {
	mu    sync.Mutex
	every time.Duration
	last  map[string]time.Time
}

func (l *notifyLimiter) allow(kind string) bool {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.last[kind]; ok && now.Sub(t) < l.every {
		return false
	}
	l.last[kind] = now
	return true
}

// published delivers the event of a committed enqueue to the Queue's subscribers.
func (q *Queue) published(task Task, res Result, opts []EnqueueOption) {
	if !q.hub.active() {
		return
	}
	var o enqueueOpts
	for _, opt := range opts {
		if opt != nil {
			opt.applyEnqueue(&o)
		}
	}
	e := JobEvent{Event: EventEnqueued, JobID: res.ID, Kind: task.Kind(), Queue: DefaultQueue, At: time.Now(), Meta: o.meta}
	if t, ok := task.(Queuer); ok {
		e.Queue = t.Queue()
	}
	if o.queue != "" {
		e.Queue = o.queue
	}
	switch res.Action {
	case ActionInserted, ActionIndependent:
	default:
		e.Event, e.Note, e.Meta = EventMerged, res.Action.mergeName(), nil
	}
	q.hub.publish(e)
}
