package venturi

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/jsonb"
)

// plan is a validated, encoded task.
type plan struct {
	task     Task
	id       ulid.ULID
	kind     string
	queue    string
	key      string
	priority Priority
	payload  []byte
	opts     enqueueOpts
	part     pgtype.Text // the partition (or slot key) of a gated job; NULL: plain, unless its kind has limits
	slot     Slot        // Key empty: none
	events   bool        // the job opts in to the durable event stream
	meta     []byte      // the job's metadata (nil: none)
}

// dueNow reports whether p is due as soon as it commits (no At or After).
func (p *plan) dueNow() bool { return p.opts.at == nil && p.opts.delay <= 0 }

// prepare is the package's prepare with the queue's own settings (StreamEvents).
func (q *Queue) prepare(task Task, opts []EnqueueOption) (*plan, error) {
	p, err := prepare(task, opts)
	if err != nil {
		return nil, err
	}
	p.events = p.events || q.streamEvents
	return p, nil
}

func prepare(task Task, opts []EnqueueOption) (*plan, error) {
	if _, ok := task.(Supervised); ok {
		return nil, fmt.Errorf("%w: %T", ErrSingleton, task)
	}
	return prepareTask(task, opts)
}

// prepareTask is prepare without the refusal of singleton kinds (EnsureSingleton's).
func prepareTask(task Task, opts []EnqueueOption) (*plan, error) {
	if task == nil || (reflect.ValueOf(task).Kind() == reflect.Pointer && reflect.ValueOf(task).IsNil()) {
		return nil, errors.New("venturi: nil task")
	}
	p := &plan{task: task, id: ulid.Make(), kind: task.Kind(), queue: DefaultQueue, priority: PriorityNormal}
	for _, o := range opts {
		if o != nil {
			o.applyEnqueue(&p.opts)
		}
	}
	if p.opts.id != (ulid.ULID{}) {
		p.id = p.opts.id
	}
	if p.kind == "" {
		return nil, ErrEmptyKind
	}
	if len(p.kind) > 128 || !utf8.ValidString(p.kind) {
		return nil, ErrKindTooLong
	}
	if t, ok := task.(Queuer); ok {
		p.queue = t.Queue()
	}
	if p.opts.queue != "" {
		p.queue = p.opts.queue
	}
	if !validQueue(p.queue) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidQueue, p.queue)
	}
	if t, ok := task.(Slotter); ok {
		p.slot = t.Slot()
		if p.slot.Key != "" {
			if !validText(p.slot.Key, MaxSlotKeyBytes) || p.slot.Limit < 0 || p.slot.Policy < SlotQueue || p.slot.Policy > SlotDropIfRunning {
				return nil, ErrInvalidSlot
			}
			p.slot.Limit = max(p.slot.Limit, 1)
			p.part = pgtype.Text{String: p.slot.Key, Valid: true}
		}
	}
	if t, ok := task.(Partitioner); ok {
		if part := t.Partition(); part != "" {
			if !validText(part, MaxPartitionBytes) {
				return nil, ErrInvalidPartition
			}
			p.part = pgtype.Text{String: part, Valid: true}
		}
	}
	if t, ok := task.(Prioritizer); ok {
		p.priority = t.Priority().clamp()
	}
	if t, ok := task.(Deduplicator); ok {
		p.key = string(t.DedupKey())
		if len(p.key) > MaxDedupKeyBytes {
			return nil, ErrDedupKeyTooLong
		}
		if !utf8.ValidString(p.key) || containsNUL(p.key) {
			return nil, fmt.Errorf("%w: dedup key is not valid UTF-8 text", ErrInvalidPayload)
		}
	}
	if t, ok := task.(EventStreamer); ok && t.StreamEvents() {
		p.events = true
	}
	p.events = p.events || p.opts.events
	var err error
	if p.meta, err = encodeMeta(p.opts.meta); err != nil {
		return nil, err
	}
	if p.payload, err = encodeJSON(task); err != nil {
		return nil, err
	}
	return p, nil
}

// encodeMeta validates and encodes metadata (nil for none).
func encodeMeta(m Meta) ([]byte, error) {
	if len(m) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%w: metadata: %w", ErrInvalidPayload, err)
	}
	if len(b) > MaxMetaBytes {
		return nil, ErrMetaTooLarge
	}
	if jsonb.HasEscapedNUL(b) {
		return nil, fmt.Errorf("%w: metadata contains NUL", ErrInvalidPayload)
	}
	return b, nil
}

// encodeJSON marshals v (a payload, a step's result, a signal's payload) for a jsonb
// column, refusing what PostgreSQL would reject.
func encodeJSON(v any) ([]byte, error) { return encodeValue(v, ErrInvalidPayload, ErrPayloadTooLarge) }

// encodeCarry is encodeJSON for a run's carry: its errors name the carry.
func encodeCarry(v any) ([]byte, error) { return encodeValue(v, ErrInvalidCarry, ErrCarryTooLarge) }

// encodeValue marshals v for a jsonb column; invalid and tooLarge are the errors that name
// what v is.
func encodeValue(v any, invalid, tooLarge error) ([]byte, error) {
	return jsonb.Marshal(v, MaxPayloadBytes, invalid, tooLarge)
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// slotParams returns p's slot columns (NULL when it takes no slot).
func (p *plan) slotParams() (key pgtype.Text, limit pgtype.Int4, policy pgtype.Int2) {
	if p.slot.Key == "" {
		return
	}
	return pgtype.Text{String: p.slot.Key, Valid: true}, pgtype.Int4{Int32: int32(p.slot.Limit), Valid: true},
		pgtype.Int2{Int16: int16(p.slot.Policy), Valid: true}
}
