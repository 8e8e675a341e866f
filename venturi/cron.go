package venturi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/cronexpr"
	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// MissedPolicy says what a schedule does with fires that no worker enqueued in time (all
// workers were down, or the schedule was due while the database was unreachable). A fire
// is missed when the first worker to see it is more than the schedule's Grace after its
// time; fires within Grace are on time and always enqueued, one job each.
type MissedPolicy int

const (
	// MissedOnce, the default, enqueues one job for all the fires missed since the last
	// one, at the latest missed fire time: a daily job down for three days runs once.
	MissedOnce MissedPolicy = iota
	// MissedSkip enqueues nothing for missed fires; the schedule resumes with its next
	// on-time fire.
	MissedSkip
	// MissedBackfill enqueues one job per missed fire, the latest Schedule.Backfill of
	// them, and skips older ones.
	MissedBackfill
)

// String returns the policy's name as stored: once, skip or backfill.
func (p MissedPolicy) String() string {
	switch p {
	case MissedOnce:
		return "once"
	case MissedSkip:
		return "skip"
	case MissedBackfill:
		return "backfill"
	}
	return fmt.Sprintf("MissedPolicy(%d)", int(p))
}

func missedPolicyOf(s string) MissedPolicy {
	switch s {
	case "skip":
		return MissedSkip
	case "backfill":
		return MissedBackfill
	}
	return MissedOnce
}

const (
	// DefaultCronGrace is how late a fire may be enqueued and still count as on time.
	DefaultCronGrace = time.Minute
	// MinCronGrace is the smallest Schedule.Grace: a fire is always enqueued a little after
	// its time (the firing worker's probe interval, the transaction), so a smaller grace
	// would count on-time fires as missed.
	MinCronGrace = time.Second
	// MaxCronBackfill is the largest Schedule.Backfill.
	MaxCronBackfill = 1000
	// MaxScheduleNameBytes bounds a schedule's name.
	MaxScheduleNameBytes = 256
	// cronBatch is the most fires one transaction enqueues; a longer catch-up continues
	// in the next transaction.
	cronBatch = 1000
	// cronCountLimit bounds how many missed fire times a catch-up counts (for the skipped
	// and coalesced counters): beyond it the counts say "at least".
	cronCountLimit = 100000
	// cronLockedRetry is how soon a worker looks again at a schedule that another worker
	// is firing right now.
	cronLockedRetry = 20 * time.Millisecond
)

// ErrNoSchedule is returned for a schedule name that does not exist.
var ErrNoSchedule = errors.New("venturi: no such schedule")

// Schedule is a durable cron schedule: every time its cron expression matches, in its
// time zone, by the database clock, one job of Task is enqueued. Register it with
// [Queue.Schedule] from any number of processes; workers of any binary fire it.
type Schedule struct {
	// Name identifies the schedule (1 to 256 bytes). Registering a name again updates
	// the schedule.
	Name string
	// Cron is the expression: five fields (minute hour day-of-month month day-of-week),
	// or six with a leading seconds field, or @yearly, @annually, @monthly, @weekly,
	// @daily, @midnight or @hourly. Fields take *, values, ranges a-b, steps */n, a-b/n
	// and a/n, lists, and month and weekday names (JAN, mon). When both day fields are
	// restricted, a day matching either one matches (as in Vixie cron).
	Cron string
	// TimeZone is the IANA name the expression is read in ("Europe/Berlin"); empty is
	// UTC. Workers load it with time.LoadLocation, so they need the zone database
	// (import time/tzdata in binaries that run where there is none).
	TimeZone string
	// Task is what each fire enqueues: its kind, queue, priority, encoded payload, dedup
	// key, partition and slot are recorded when the schedule is registered. With a dedup
	// key, a fire keeps the pending job of its kind and key instead of adding one (its
	// Merge method is not called: the firing worker may not know the type).
	Task Task
	// Queue overrides the task's queue, as [OnQueue] does.
	Queue string
	// Missed is the missed-run policy; the zero value is MissedOnce.
	Missed MissedPolicy
	// Backfill is, with MissedBackfill, the most missed fires enqueued after an outage
	// (1 to MaxCronBackfill).
	Backfill int
	// Grace is how late a fire may be enqueued and still be on time: zero means
	// DefaultCronGrace; otherwise at least MinCronGrace.
	Grace time.Duration
}

// ScheduleResult is what registering a schedule did.
type ScheduleResult struct {
	Created  bool      // the schedule did not exist
	Changed  bool      // it existed with another definition, now replaced
	NextFire time.Time // its next fire
}

// ScheduleInfo is a schedule's definition and state, as stored.
type ScheduleInfo struct {
	Name      string
	Cron      string
	TimeZone  string
	Kind      string
	Queue     string
	Priority  Priority
	Payload   json.RawMessage
	DedupKey  DedupKey
	Missed    MissedPolicy
	Backfill  int
	Grace     time.Duration
	Paused    bool
	PausedAt  time.Time // zero unless paused
	NextFire  time.Time // the earliest fire not yet handled
	LastFire  time.Time // the latest fire that enqueued a job; zero if none
	LastJob   ulid.ULID // that job (or the pending job it was merged into)
	LastRunAt time.Time // when a worker last fired the schedule (database time)
	Fires     int64     // fires that enqueued or merged into a job
	Skipped   int64     // fire times skipped by the missed-run policy
	Coalesced int64     // missed fire times folded into another fire (MissedOnce)
	CreatedAt time.Time
	UpdatedAt time.Time // when the definition last changed
}

// Fire is one fire of a schedule in its ledger.
type Fire struct {
	At         time.Time // the fire time
	JobID      ulid.ULID // the job it enqueued, or the pending job it was kept into
	Action     Action    // ActionInserted or ActionKept
	Covers     int       // fire times it stands for: 1, or more when it coalesced missed ones
	Skipped    int       // fire times before it that the policy skipped
	EnqueuedAt time.Time // database time
}

// cronDef is a validated Schedule.
type cronDef struct {
	name, spec, tz string
	cron           *cronexpr.Spec
	loc            *time.Location
	p              *plan
	missed         MissedPolicy
	backfill       int
	grace          time.Duration
}

func (s Schedule) validate() (*cronDef, error) {
	if s.Name == "" || len(s.Name) > MaxScheduleNameBytes || !validText(s.Name, MaxScheduleNameBytes) {
		return nil, fmt.Errorf("venturi: schedule name must be 1 to %d bytes of text", MaxScheduleNameBytes)
	}
	c, tz, loc, err := s.timeRule()
	if err != nil {
		return nil, err
	}
	var opts []EnqueueOption
	if s.Queue != "" {
		opts = append(opts, OnQueue(s.Queue))
	}
	p, err := prepare(s.Task, opts)
	if err != nil {
		return nil, err
	}
	d := &cronDef{name: s.Name, spec: s.Cron, tz: tz, cron: c, loc: loc, p: p, missed: s.Missed, grace: s.Grace}
	switch s.Missed {
	case MissedOnce, MissedSkip:
	case MissedBackfill:
		if s.Backfill < 1 || s.Backfill > MaxCronBackfill {
			return nil, fmt.Errorf("venturi: Schedule.Backfill must be 1 to %d with MissedBackfill", MaxCronBackfill)
		}
		d.backfill = s.Backfill
	default:
		return nil, fmt.Errorf("venturi: unknown missed-run policy %d", int(s.Missed))
	}
	switch {
	case s.Grace == 0:
		d.grace = DefaultCronGrace
	case s.Grace < MinCronGrace:
		return nil, fmt.Errorf("venturi: Schedule.Grace must be 0 (the default, %v) or at least %v, got %v",
			DefaultCronGrace, MinCronGrace, s.Grace)
	}
	return d, nil
}

// timeRule parses the schedule's expression and loads its time zone (empty: UTC).
func (s Schedule) timeRule() (*cronexpr.Spec, string, *time.Location, error) {
	c, err := cronexpr.Parse(s.Cron)
	if err != nil {
		return nil, "", nil, err
	}
	tz := s.TimeZone
	if tz == "" {
		tz = "UTC"
	}
	if tz == "Local" {
		return nil, "", nil, errors.New("venturi: schedule time zone Local differs between hosts; name a zone")
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, "", nil, fmt.Errorf("venturi: schedule time zone: %w", err)
	}
	return c, tz, loc, nil
}

// NextFires returns the schedule's first n fire times after after (n at most 1,000), as
// the workers compute them: its expression read in its time zone, with the DST rules of
// the README ("Durable cron"). It checks only Cron and TimeZone, so a service can check a
// configured expression before it registers the schedule; an invalid one gives the error
// [Queue.Schedule] would ([ErrInvalidCron], or the time zone's). An expression that stops
// matching (a year's last fire) returns fewer times.
func (s Schedule) NextFires(after time.Time, n int) ([]time.Time, error) {
	c, _, loc, err := s.timeRule()
	if err != nil {
		return nil, err
	}
	if n < 0 || n > 1000 {
		return nil, fmt.Errorf("venturi: NextFires: n must be 0 to 1000, got %d", n)
	}
	out := make([]time.Time, 0, n)
	for t := after; len(out) < n; {
		if t = c.Next(t, loc); t.IsZero() {
			break
		}
		out = append(out, t.In(loc))
	}
	return out, nil
}

// Schedule registers s, or updates the schedule of its name. It is idempotent and safe to
// call from every process at every start: registering an unchanged definition changes
// nothing, and concurrent registrations are serialized on the schedule's row (the last
// one wins when they differ). A changed definition takes effect from the schedule's next
// fire: when the expression or time zone changed, the next fire is recomputed from the
// later of now and the last fire; otherwise the pending next fire stays and enqueues the
// new task. Jobs already enqueued are not touched. Registering does not resume a paused
// schedule.
func (q *Queue) Schedule(ctx context.Context, s Schedule) (ScheduleResult, error) {
	d, err := s.validate()
	if err != nil {
		return ScheduleResult{}, err
	}
	p := d.p
	sk, sl, sp := p.slotParams()
	var res ScheduleResult
	err = pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		for range 3 {
			row, err := q.q.CronLock(ctx, tx, dbsqlc.CronLockParams{Name: d.name, Payload: string(p.payload)})
			if errors.Is(err, pgx.ErrNoRows) {
				now, err := q.q.CronNow(ctx, tx)
				if err != nil {
					return err
				}
				next := d.cron.NextOrNever(now, d.loc)
				n, err := q.q.CronInsert(ctx, tx, dbsqlc.CronInsertParams{
					Name: d.name, Spec: d.spec, TimeZone: d.tz, Kind: p.kind, Queue: p.queue, Priority: int16(p.priority),
					Payload: string(p.payload), DedupKey: p.key, Part: p.part, SlotKey: sk, SlotLimit: sl, SlotPolicy: sp,
					Missed: d.missed.String(), Backfill: int32(d.backfill), GraceUs: delayOf(d.grace), NextFire: next,
				})
				if err != nil {
					return err
				}
				if n == 1 {
					res = ScheduleResult{Created: true, NextFire: next}
					return nil
				}
				continue // a concurrent registration created it: lock it and compare
			}
			if err != nil {
				return err
			}
			timeRule := row.Spec != d.spec || row.TimeZone != d.tz
			if !timeRule && row.SamePayload && row.Kind == p.kind && row.Queue == p.queue &&
				row.Priority == int16(p.priority) && row.DedupKey == p.key && row.Part == p.part &&
				row.SlotKey == sk && row.SlotLimit == sl && row.SlotPolicy == sp &&
				row.Missed == d.missed.String() && int(row.Backfill) == d.backfill && row.GraceUs == delayOf(d.grace) {
				res = ScheduleResult{NextFire: row.NextFire}
				return nil
			}
			next, pending := row.NextFire, row.SkippedPending
			if timeRule {
				from := row.Now
				if row.LastFire != nil && row.LastFire.After(from) {
					from = *row.LastFire
				}
				next, pending = d.cron.NextOrNever(from, d.loc), 0
			}
			err = q.q.CronUpdate(ctx, tx, dbsqlc.CronUpdateParams{
				Name: d.name, Spec: d.spec, TimeZone: d.tz, Kind: p.kind, Queue: p.queue, Priority: int16(p.priority),
				Payload: string(p.payload), DedupKey: p.key, Part: p.part, SlotKey: sk, SlotLimit: sl, SlotPolicy: sp,
				Missed: d.missed.String(), Backfill: int32(d.backfill), GraceUs: delayOf(d.grace), NextFire: next,
				SkippedPending: pending,
			})
			if err != nil {
				return err
			}
			res = ScheduleResult{Changed: true, NextFire: next}
			return nil
		}
		return errors.New("venturi: schedule registration kept conflicting; try again")
	})
	if err != nil {
		return ScheduleResult{}, fmt.Errorf("venturi: schedule %q: %w", s.Name, err)
	}
	return res, nil
}

// PauseSchedule pauses a schedule: no worker fires it until ResumeSchedule. Pausing a
// paused schedule does nothing.
func (q *Queue) PauseSchedule(ctx context.Context, name string) error {
	return q.setSchedulePaused(ctx, name, true)
}

// ResumeSchedule resumes a paused schedule. The fire times that passed while it was
// paused are not missed fires: its next fire is the first one after now. Resuming a
// schedule that is not paused does nothing.
func (q *Queue) ResumeSchedule(ctx context.Context, name string) error {
	return q.setSchedulePaused(ctx, name, false)
}

func (q *Queue) setSchedulePaused(ctx context.Context, name string, paused bool) error {
	return pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) error {
		row, err := q.q.CronLock(ctx, tx, dbsqlc.CronLockParams{Name: name, Payload: "null"})
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %q", ErrNoSchedule, name)
		}
		if err != nil {
			return err
		}
		action := AuditCronResume
		if paused {
			action = AuditCronPause
		}
		if _, err := q.audit(ctx, tx, action, name, 0, ""); err != nil || row.Paused == paused {
			return err
		}
		next := row.NextFire
		if !paused {
			c, err := cronexpr.Parse(row.Spec)
			if err != nil {
				return err
			}
			loc, err := time.LoadLocation(row.TimeZone)
			if err != nil {
				return err
			}
			next = c.NextOrNever(row.Now, loc)
		}
		return q.q.CronSetPaused(ctx, tx, dbsqlc.CronSetPausedParams{Name: name, Paused: paused, NextFire: next})
	})
}

// RemoveSchedule deletes a schedule and its ledger; jobs it enqueued stay. It reports
// whether the schedule existed. A worker firing it at that moment finishes first. The
// audit log records it (cron.remove) when the schedule existed, as it records
// PauseSchedule and ResumeSchedule.
func (q *Queue) RemoveSchedule(ctx context.Context, name string) (bool, error) {
	var n int64
	err := pgx.BeginFunc(ctx, q.pool, func(tx pgx.Tx) (err error) {
		if n, err = q.q.CronDelete(ctx, tx, name); err != nil || n == 0 {
			return err
		}
		_, err = q.audit(ctx, tx, AuditCronRemove, name, 0, "")
		return err
	})
	return n > 0, err
}

// Schedules lists every schedule with its state, by name.
func (q *Queue) Schedules(ctx context.Context) ([]ScheduleInfo, error) {
	return q.schedules(ctx, pgtype.Text{})
}

// ScheduleByName returns one schedule's definition and state, or [ErrNoSchedule].
func (q *Queue) ScheduleByName(ctx context.Context, name string) (ScheduleInfo, error) {
	l, err := q.schedules(ctx, pgtype.Text{String: name, Valid: true})
	if err != nil {
		return ScheduleInfo{}, err
	}
	if len(l) == 0 {
		return ScheduleInfo{}, fmt.Errorf("%w: %q", ErrNoSchedule, name)
	}
	return l[0], nil
}

func (q *Queue) schedules(ctx context.Context, name pgtype.Text) ([]ScheduleInfo, error) {
	rows, err := q.q.CronList(ctx, q.pool, name)
	if err != nil {
		return nil, err
	}
	out := make([]ScheduleInfo, 0, len(rows))
	for _, r := range rows {
		si := ScheduleInfo{Name: r.Name, Cron: r.Spec, TimeZone: r.TimeZone, Kind: r.Kind, Queue: r.Queue,
			Priority: Priority(r.Priority), Payload: json.RawMessage(r.Payload), DedupKey: DedupKey(r.DedupKey),
			Missed: missedPolicyOf(r.Missed), Backfill: int(r.Backfill), Grace: time.Duration(r.GraceUs) * time.Microsecond,
			Paused: r.Paused, NextFire: r.NextFire, Fires: r.Fires, Skipped: r.Skipped, Coalesced: r.Coalesced,
			CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
		if r.PausedAt != nil {
			si.PausedAt = *r.PausedAt
		}
		if r.LastFire != nil {
			si.LastFire = *r.LastFire
		}
		if r.LastRunAt != nil {
			si.LastRunAt = *r.LastRunAt
		}
		if r.LastJob.Valid {
			si.LastJob = ulidOf(r.LastJob)
		}
		out = append(out, si)
	}
	return out, nil
}

// ScheduleFires pages back through a schedule's ledger, newest fire first: at most limit
// fires (100 if limit <= 0, at most 1,000) before the fire time before (the zero time:
// from the newest). The ledger is pruned after the workers' Config.RetainCompleted.
func (q *Queue) ScheduleFires(ctx context.Context, name string, before time.Time, limit int) ([]Fire, error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	var b *time.Time
	if !before.IsZero() {
		b = &before
	}
	rows, err := q.q.CronFires(ctx, q.pool, dbsqlc.CronFiresParams{Name: name, Before: b, Max: int32(limit)})
	if err != nil {
		return nil, err
	}
	out := make([]Fire, 0, len(rows))
	for _, r := range rows {
		a := ActionInserted
		if r.Action == "kept" {
			a = ActionKept
		}
		out = append(out, Fire{At: r.FireAt, JobID: ulidOf(r.JobID), Action: a, Covers: int(r.Covers),
			Skipped: int(r.Skipped), EnqueuedAt: r.EnqueuedAt})
	}
	return out, nil
}
