package venturi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi/internal/dbsqlc"
)

// Bounds of a listing.
const (
	// ListTimeout bounds each statement of [Queue.ListJobs] (and of a bulk action's walk
	// and dry run), so that a statement that reads more than it should (a dry run's count
	// of a note or payload match over a large table, a plan gone wrong) fails with
	// [ErrListTimeout] instead of running on. A listing's page reads at most
	// [ListSearchWindow] jobs for such a match and does not come near it.
	ListTimeout = 5 * time.Second
	// ListClockSkew is how far a job's ID (a ULID: its producer's clock) may be from its
	// created_at (the database's) for a created-time filter to find it: such a filter also
	// bounds the ID by the time give or take ListClockSkew, so that the primary key
	// narrows the scan.
	ListClockSkew = 5 * time.Minute
	// ListSearchWindow is how many jobs one page of [Queue.ListJobs] reads at most to find
	// the matches of a predicate that no index serves (a note, payload or attachment
	// match): a page whose window ends before it is full ends there, JobPage.Partial set,
	// and its Next cursor resumes the search after the window. So every page costs about
	// the same whatever the table's size and however rare the matches: 4-6 ms per
	// thousand jobs read for a note or payload match on the 2-core development machine
	// (bench/RESULTS.md, scenario 14). A bulk action's walk reads windows of this size
	// too, so its statements stay short.
	ListSearchWindow = 5_000
	// defaultListPage is ListJobs' page without a limit.
	defaultListPage = 50
)

// ErrListTimeout is returned by [Queue.ListJobs] and the bulk actions when a statement
// ran past [ListTimeout].
var ErrListTimeout = fmt.Errorf("venturi: the job listing ran past its %v statement timeout: narrow the filter with a state, kind, queue, id or time range (they use indexes; a count of a note or payload match reads every job)", ListTimeout)

// ErrInvalidListCursor is returned for a cursor that the listing did not write: one that
// [Queue.ListJobs] did not write or wrote for a filter of another order, or one that
// [Queue.ListCircuits] did not write.
var ErrInvalidListCursor = errors.New("venturi: invalid list cursor")

// listOrder is how ListJobs orders a filter's jobs: the index it walks.
type listOrder string

const (
	orderID        listOrder = "id"        // newest created first (primary key)
	orderRunAt     listOrder = "run_at"    // scheduled, waiting: due time
	orderLease     listOrder = "lease"     // running: lease expiry
	orderFinished  listOrder = "finished"  // completed, dead, cancelled: newest finished first
	orderAvailable listOrder = "available" // claim order, queue by queue (the segments below)
	orderPlain     listOrder = "plain"     // a queue's available plain jobs
	orderGated     listOrder = "gated"     // a queue's available gated jobs, by partition
)

// orderOf returns the order a filter lists in.
func orderOf(f *JobFilter) listOrder {
	if len(f.States) != 1 {
		return orderID
	}
	switch f.States[0] {
	case StateAvailable:
		return orderAvailable
	case StateScheduled, StateWaiting:
		return orderRunAt
	case StateRunning:
		return orderLease
	case StateBlocked:
		return orderID
	}
	return orderFinished
}

// listCursor is the position after a page's last job, as an opaque string.
type listCursor struct {
	Order listOrder `json:"o"`
	State State     `json:"s,omitempty"`
	TS    time.Time `json:"t,omitzero"`
	ID    ulid.ULID `json:"i"`
	// Available jobs: the job's queue, partition (nil: plain) and priority.
	Queue string  `json:"q,omitempty"`
	Part  *string `json:"p,omitempty"`
	Prio  int16   `json:"r,omitempty"`
}

func (c *listCursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor reads a cursor for filter f; an empty one is the first page (nil).
func decodeCursor(s string, f *JobFilter) (*listCursor, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(s) > 4096 {
		return nil, ErrInvalidListCursor
	}
	var c listCursor
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, ErrInvalidListCursor
	}
	want := orderOf(f)
	if c.Order != want || (want != orderID && c.State != f.States[0]) {
		return nil, fmt.Errorf("%w: it belongs to a listing in another order (%s)", ErrInvalidListCursor, c.Order)
	}
	// The texts go to the database as parameters: they must be text it takes.
	if want == orderAvailable && (!validQueue(c.Queue) || (c.Part != nil && !validText(*c.Part, MaxPartitionBytes))) {
		return nil, fmt.Errorf("%w: bad queue or partition", ErrInvalidListCursor)
	}
	return &c, nil
}

// listRow is one job of a listing, as every order returns it.
type listRow = dbsqlc.ListJobsRow

// cursorAfter is the position after row r in order o.
func cursorAfter(o listOrder, state State, r *listRow) *listCursor {
	c := &listCursor{Order: o, State: state, ID: ulidOf(r.ID)}
	switch o {
	case orderRunAt:
		c.TS = r.RunAt
	case orderLease:
		if r.LeaseExpiresAt != nil {
			c.TS = *r.LeaseExpiresAt
		}
	case orderFinished:
		if r.FinishedAt != nil {
			c.TS = *r.FinishedAt
		}
	case orderAvailable:
		c.TS, c.Queue, c.Prio = r.RunAt, r.Queue, r.Priority
		if r.Part.Valid {
			p := r.Part.String
			c.Part = &p
		}
	}
	if o == orderID {
		c.State = ""
	}
	return c
}

// listParams is the filter part of a ListJobs statement.
func listParams(f *JobFilter, summary bool) dbsqlc.ListJobsParams {
	skew := delayOf(ListClockSkew)
	p := dbsqlc.ListJobsParams{Kinds: f.Kinds, Queues: f.Queues,
		SkewUs: skew, MinusSkewUs: -skew, WithinUs: delayOf(f.CreatedWithin), WithinSkewUs: delayOf(f.CreatedWithin) + skew,
		Summary: summary, State: dbsqlc.VenturiJobStateAvailable} // State: a valid value where no branch reads it
	// A dedup key with kinds may use the dedup index (kind, key); alone it is searched.
	if len(f.Kinds) > 0 {
		p.DedupKey = string(f.DedupKey)
	} else {
		p.KeySearch = string(f.DedupKey)
	}
	for _, id := range f.IDs {
		p.Ids = append(p.Ids, uuidOf(id))
	}
	if f.Workflow != (ulid.ULID{}) {
		p.HasWorkflow, p.WorkflowID = true, uuidOf(f.Workflow)
	}
	for _, s := range f.States {
		p.States = append(p.States, string(s))
	}
	if !f.CreatedAfter.IsZero() {
		p.HasAfter, p.After = true, f.CreatedAfter
	}
	if !f.CreatedBefore.IsZero() {
		p.HasBefore, p.Before = true, f.CreatedBefore
	}
	if f.Note != "" {
		p.NotePattern = "%" + likeEscaper.Replace(f.Note) + "%"
	}
	for _, m := range f.Payload {
		p.PayloadPaths = append(p.PayloadPaths, strings.Join(m.Path, string(pathSep)))
		p.PayloadValues = append(p.PayloadValues, m.Value)
	}
	for _, m := range f.Attachment {
		p.AttachmentPaths = append(p.AttachmentPaths, strings.Join(m.Path, string(pathSep)))
		p.AttachmentValues = append(p.AttachmentValues, m.Value)
	}
	// Arrays the statement tests with cardinality must not be NULL.
	for _, s := range []*[]string{&p.States, &p.Kinds, &p.Queues, &p.PayloadPaths, &p.PayloadValues, &p.AttachmentPaths, &p.AttachmentValues} {
		if *s == nil {
			*s = []string{}
		}
	}
	if p.Ids == nil {
		p.Ids = []pgtype.UUID{}
	}
	return p
}

// likeEscaper escapes the wildcards of an ILIKE pattern.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// ListJobs returns the jobs that match f, one page at a time: limit (default 50, at most
// MaxListPage) jobs after cursor (empty for the first page; JobPage.Next for the next).
// A filter on one state lists in that state's own order, from its index (available: claim
// order; scheduled and waiting: due time; running: lease expiry; completed, dead and
// cancelled: newest finished first); any other filter lists newest created first.
//
// Available jobs list queue by queue (by name), and within a queue: its plain jobs in
// claim order (priority, highest first, due time and ID), then its gated jobs partition
// by partition, each by priority, due time and ID. (The gated claim takes a queue's
// partitions in turn, each in the order its jobs became available: see "Fairness" in the
// README.) A cursor is a position in the order, not a
// snapshot: jobs inserted behind it appear on later pages, jobs inserted before it do not,
// and no job that stays where it is appears twice or is skipped. Each statement is bounded
// by [ListTimeout] ([ErrListTimeout]); a filter that an index serves (a state, a kind with
// a state, IDs, a created-time range) reads about one page of rows per page. A workflow's
// jobs are read by its workflow index and its nodes' job IDs: a page costs about 2 µs per
// finished job of the workflow (a batch of 50,000 members: 110 ms). A summary's LastNote
// is cut at 1,024 characters ([Queue.Job] has the whole note).
//
// A note, payload or attachment match, and a dedup key without a kind, are not served by
// an index: a page reads at most
// [ListSearchWindow] jobs of the listing's order (after the indexed predicates) to find
// its matches, and ends early when the window does (JobPage.Partial; JobPage.Next
// searches on). A page may then hold fewer than limit jobs, or none, with more to come.
func (q *Queue) ListJobs(ctx context.Context, f JobFilter, cursor string, limit int) (JobPage, error) {
	if err := f.validate(); err != nil {
		return JobPage{}, err
	}
	if limit <= 0 {
		limit = defaultListPage
	}
	limit = min(limit, MaxListPage)
	cur, err := decodeCursor(cursor, &f)
	if err != nil {
		return JobPage{}, err
	}
	var rows []*listRow
	var edge *listRow
	err = q.readTx(ctx, func(tx pgx.Tx) error {
		rows, edge, err = q.listAfter(ctx, tx, &f, cur, limit+1, true)
		return err
	})
	if err != nil {
		return JobPage{}, err
	}
	var page JobPage
	st := State("")
	if len(f.States) == 1 {
		st = f.States[0]
	}
	switch {
	case len(rows) > limit:
		rows = rows[:limit]
		page.Next = cursorAfter(orderOf(&f), st, rows[limit-1]).encode()
	case edge != nil: // the search window ended first: the next page searches on after it
		page.Next, page.Partial = cursorAfter(orderOf(&f), st, edge).encode(), true
	}
	page.Jobs = make([]JobSummary, len(rows))
	for i, r := range rows {
		page.Jobs[i] = summaryOf(r)
	}
	return page, nil
}

// readTx runs fn in a read-only transaction whose statements are bounded by ListTimeout,
// planned for their parameters, without parallel workers or JIT (ListSettings): the
// operations API's reads (listings, dry-run counts, stats).
func (q *Queue) readTx(ctx context.Context, fn func(pgx.Tx) error) error {
	err := pgx.BeginTxFunc(ctx, q.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		if err := q.q.ListSettings(ctx, tx, statementTimeoutMs(ListTimeout)); err != nil {
			return err
		}
		return fn(tx)
	})
	return listError(err)
}

// listError turns a statement timeout into ErrListTimeout.
func listError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "57014" { // query_canceled: the statement timeout
		return ErrListTimeout
	}
	return err
}

// listAfter reads up to n jobs of f after cur in f's order. When f searches (see
// searchWindow) and the search window ended before n matches, edge is the window's last
// job (not a match): the position the walk resumes after.
func (q *Queue) listAfter(ctx context.Context, tx pgx.Tx, f *JobFilter, cur *listCursor, n int, summary bool) (rows []*listRow, edge *listRow, err error) {
	p := listParams(f, summary)
	p.Max, p.Scan = int32(n), int32(searchWindow(&p, n))
	o := orderOf(f)
	if o == orderAvailable {
		return q.listAvailable(ctx, tx, f, p, cur, n)
	}
	p.OrderBy = string(o)
	if len(f.States) == 1 {
		p.State = dbsqlc.VenturiJobState(f.States[0])
	}
	if cur != nil {
		p.HasCursor, p.CTs, p.CID = true, cur.TS, uuidOf(cur.ID)
	}
	rows, err = q.q.ListJobs(ctx, tx, p)
	if err != nil {
		return nil, nil, err
	}
	rows, edge = splitEdge(o, rows)
	return rows, edge, nil
}

// searchWindow is how many jobs a statement of listing p reads for n matches: n, or
// ListSearchWindow when listParams gave p a predicate that no index serves (a note,
// payload or attachment match, a dedup key without a kind: KeySearch).
func searchWindow(p *dbsqlc.ListJobsParams, n int) int {
	if p.NotePattern == "" && len(p.PayloadPaths) == 0 && len(p.AttachmentPaths) == 0 && p.KeySearch == "" {
		return n
	}
	return max(n, ListSearchWindow)
}

// splitEdge sorts one statement's rows in order o (the statement returns its branch's
// order; keep it whatever the plan) and takes out the search window's last job, which is
// not a match and comes after every match.
func splitEdge(o listOrder, rows []*listRow) ([]*listRow, *listRow) {
	slices.SortStableFunc(rows, func(a, b *listRow) int { return compareRows(o, a, b) })
	if n := len(rows); n > 0 && !rows[n-1].Hit {
		return rows[:n-1], rows[n-1]
	}
	return rows, nil
}

// compareRows orders two rows of a listing in order o.
func compareRows(o listOrder, a, b *listRow) int {
	ida, idb := ulidOf(a.ID), ulidOf(b.ID)
	switch o {
	case orderRunAt:
		if c := a.RunAt.Compare(b.RunAt); c != 0 {
			return c
		}
	case orderLease:
		if c := timeOr(a.LeaseExpiresAt).Compare(timeOr(b.LeaseExpiresAt)); c != 0 {
			return c
		}
	case orderFinished:
		if c := timeOr(b.FinishedAt).Compare(timeOr(a.FinishedAt)); c != 0 {
			return c
		}
		return idb.Compare(ida)
	case orderID:
		return idb.Compare(ida)
	case orderGated, orderPlain: // claim order, partition by partition
		if c := strings.Compare(a.Part.String, b.Part.String); o == orderGated && c != 0 {
			return c
		}
		if a.Priority != b.Priority {
			return int(b.Priority) - int(a.Priority)
		}
		if c := a.RunAt.Compare(b.RunAt); c != 0 {
			return c
		}
	}
	return ida.Compare(idb)
}

func timeOr(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// availableStep is one index range of the available order within a queue.
type availableStep struct {
	order listOrder // orderPlain or orderGated
	seg   int32
}

// listAvailable reads up to n available jobs after cur: queue by queue, and within a
// queue the plain jobs in claim order, then the gated ones partition by partition. Each
// step reads one range of a claim index (see ListJobs in internal/dbsqlc/queries/listing.sql); a page takes a few.
// A step whose search window ends first ends the page (edge).
func (q *Queue) listAvailable(ctx context.Context, tx pgx.Tx, f *JobFilter, p dbsqlc.ListJobsParams, cur *listCursor, n int) ([]*listRow, *listRow, error) {
	var out []*listRow
	var queue string
	var steps []availableStep
	switch {
	case cur == nil:
		steps = []availableStep{{orderPlain, 0}, {orderGated, 0}}
	case cur.Part == nil:
		queue = cur.Queue
		steps = []availableStep{{orderPlain, 1}, {orderPlain, 2}, {orderGated, 0}}
		p.CTs, p.CID, p.CPrio = cur.TS, uuidOf(cur.ID), cur.Prio
	default:
		queue = cur.Queue
		steps = []availableStep{{orderGated, 1}, {orderGated, 2}, {orderGated, 3}}
		p.CTs, p.CID, p.CPrio, p.CPart = cur.TS, uuidOf(cur.ID), cur.Prio, *cur.Part
	}
	if cur == nil {
		var err error
		if queue, err = q.nextAvailableQueue(ctx, tx, f, ""); err != nil {
			return nil, nil, err
		}
	}
	for queue != "" && len(out) < n {
		p.CQueue = queue
		for _, s := range steps {
			p.OrderBy, p.Seg, p.Max = string(s.order), s.seg, int32(n-len(out))
			p.Scan = int32(searchWindow(&p, int(p.Max)))
			rows, err := q.q.ListJobs(ctx, tx, p)
			if err != nil {
				return nil, nil, err
			}
			rows, edge := splitEdge(s.order, rows)
			out = append(out, rows...)
			if len(out) >= n {
				return out[:n], nil, nil
			}
			if edge != nil {
				return out, edge, nil
			}
		}
		next, err := q.nextAvailableQueue(ctx, tx, f, queue)
		if err != nil {
			return nil, nil, err
		}
		queue, steps = next, []availableStep{{orderPlain, 0}, {orderGated, 0}}
	}
	return out, nil, nil
}

// nextAvailableQueue is the first queue after the named one that may hold f's available
// jobs: the next of f's queues, or of those with available jobs. "" when none.
func (q *Queue) nextAvailableQueue(ctx context.Context, tx pgx.Tx, f *JobFilter, after string) (string, error) {
	if len(f.Queues) > 0 {
		qs := slices.Sorted(slices.Values(f.Queues))
		for _, name := range qs {
			if name > after {
				return name, nil
			}
		}
		return "", nil
	}
	name, err := q.q.NextAvailableQueue(ctx, tx, after)
	if err != nil {
		return "", err
	}
	return name, nil
}

// summaryOf converts a listing row.
func summaryOf(r *listRow) JobSummary {
	s := JobSummary{ID: ulidOf(r.ID), Kind: r.Kind, Queue: r.Queue, State: State(r.State), Priority: Priority(r.Priority),
		DedupKey: DedupKey(r.DedupKey.String), Partition: r.Part.String, RunAt: r.RunAt, RunCount: int(r.Runs),
		Failures: int(r.Failures), CreatedAt: r.CreatedAt, AttemptedAt: r.AttemptedAt, FinishedAt: r.FinishedAt,
		LastEvent: Event(r.LastEvent), LastNote: r.LastNote, StopRequested: r.StopRequested}
	if s.State == StateRunning {
		s.Owner = r.WorkerID.String
	}
	return s
}
