package venturi_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/oklog/ulid/v2"

	"github.com/venturi-dev/venturi"
)

// ---- Enqueue from SQL: a transactional outbox ----

// SendReceipt mails an order's receipt. A trigger on the orders table enqueues it, in the
// transaction that writes the order.
type SendReceipt struct {
	Order int64  `json:"order"`
	Email string `json:"email"`
}

// Kind names the task; the trigger names the same kind.
func (SendReceipt) Kind() string { return "send_receipt" }

// DedupKey gives each order at most one pending receipt. Without a merge method a
// collision replaces it, from SQL as from Go: the receipt goes to the latest email.
func (r SendReceipt) DedupKey() venturi.DedupKey { return venturi.KeyOf("order", r.Order) }

// Handle mails the receipt.
func (r SendReceipt) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.CompletedWith(fmt.Sprintf("receipt for order %d sent to %s", r.Order, r.Email)), nil
}

// A trigger enqueues a job with venturi_enqueue in the transaction that changes the row:
// the job exists if and only if the change commits (a transactional outbox, without a
// relay process), and a Go worker runs it.
func Example_outboxTrigger() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()
	// The trigger function; from another schema, call it qualified: venturi.venturi_enqueue.
	mustExec(pool, `CREATE TABLE orders (id bigint PRIMARY KEY, email text NOT NULL)`)
	mustExec(pool, `CREATE FUNCTION orders_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    PERFORM venturi_enqueue('send_receipt', jsonb_build_object('order', NEW.id, 'email', NEW.email),
		                            dedup_key => 'order/' || NEW.id);
		    RETURN NEW;
		END $$`)
	mustExec(pool, `CREATE TRIGGER orders_outbox AFTER INSERT OR UPDATE OF email ON orders
		FOR EACH ROW EXECUTE FUNCTION orders_outbox()`)

	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[SendReceipt](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	order := func(id int64, commit bool, emails ...string) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			log.Fatal(err)
		}
		defer tx.Rollback(ctx) // a no-op after Commit
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, email) VALUES ($1, $2)`, id, emails[0]); err != nil {
			log.Fatal(err)
		}
		for _, e := range emails[1:] { // each change enqueues again: the pending receipt is replaced
			if _, err := tx.Exec(ctx, `UPDATE orders SET email = $2 WHERE id = $1`, id, e); err != nil {
				log.Fatal(err)
			}
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				log.Fatal(err)
			}
		}
	}
	order(1, false, "bob@example.com")
	order(2, true, "ada@example.com", "ada@example.org")

	var rolledBack int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM venturi_job_all WHERE dedup_key = 'order/1'`).Scan(&rolledBack); err != nil {
		log.Fatal(err)
	}
	fmt.Println("order 1 rolled back, receipts:", rolledBack)
	var id pgtype.UUID
	if err := pool.QueryRow(ctx, `SELECT id FROM venturi_job_all WHERE dedup_key = 'order/2'`).Scan(&id); err != nil {
		log.Fatal(err)
	}
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	awaitJob(q, ulid.ULID(id.Bytes), "completed", func(j *venturi.Job) bool { return j.State == venturi.StateCompleted })
	// Any client reads the job back in SQL.
	var state, note string
	var entries int64
	if err := pool.QueryRow(ctx, `SELECT state, journal_len, last_note FROM venturi_job_status($1)`, id).
		Scan(&state, &entries, &note); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("order 2: %s, %d journal entries, %q\n", state, entries, note)
	// Output:
	// order 1 rolled back, receipts: 0
	// order 2: completed, 2 journal entries, "receipt for order 2 sent to ada@example.org"
}

// ---- A merge rule, applied in SQL ----

// RefreshFeed refetches a feed. Its rule keeps the pending refresh: an enqueue while one
// waits adds nothing, from Go or from SQL.
type RefreshFeed struct {
	Feed string `json:"feed"`
}

// Kind names the task.
func (RefreshFeed) Kind() string { return "refresh_feed" }

// DedupKey gives each feed at most one pending refresh.
func (f RefreshFeed) DedupKey() venturi.DedupKey { return venturi.KeyOf("feed", f.Feed) }

// MergeRule keeps the pending refresh. A rule, unlike a Merge method, does not read the
// jobs: the worker that registers the kind records it, and enqueues from SQL apply it.
func (RefreshFeed) MergeRule() venturi.MergeRule { return venturi.KeepPending() }

// Handle refetches the feed.
func (f RefreshFeed) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.Completed(), nil
}

// A MergeRule decides collisions in the database: enqueues from SQL (a trigger, another
// language) apply it as Go enqueues do. A Merge method would leave the collision to a Go
// process instead ("deferred").
func ExampleMergeRule() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()
	// A worker records its kinds' rules when it starts (this one serves another queue, so
	// the refreshes stay pending for the example).
	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{Queue: "feeds-later", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[RefreshFeed](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	for range 2 {
		var action string
		if err := pool.QueryRow(ctx, `SELECT action FROM venturi_enqueue('refresh_feed', '{"feed": "golang"}',
			dedup_key => 'feed/golang')`).Scan(&action); err != nil {
			log.Fatal(err)
		}
		fmt.Println("from SQL:", action)
	}
	res, err := venturi.NewQueue(pool, venturi.QueueConfig{}).Enqueue(ctx, RefreshFeed{Feed: "golang"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("from Go:", res.Action)
	// Output:
	// from SQL: inserted
	// from SQL: kept
	// from Go: kept
}

// PageViews counts a page's views. Its Merge adds the counts up: Go code, which SQL cannot
// run, so a collision from SQL waits for a worker that registered the kind.
type PageViews struct {
	Page string `json:"page"`
	N    int    `json:"n"`
}

// Kind names the task.
func (PageViews) Kind() string { return "page_views" }

// DedupKey gives each page at most one pending job.
func (v PageViews) DedupKey() venturi.DedupKey { return venturi.DedupKey(v.Page) }

// Merge adds the incoming views to the pending job's.
func (v PageViews) Merge(p venturi.Pending[PageViews, struct{}]) venturi.Merge[PageViews, struct{}] {
	return p.With(PageViews{Page: v.Page, N: p.Payload.N + v.N}, p.Carry)
}

// Handle records the views.
func (v PageViews) Handle(ctx context.Context, run *venturi.Run[struct{}], _ struct{}) (venturi.Outcome, error) {
	return venturi.CompletedWith(fmt.Sprintf("%s: %d views", v.Page, v.N)), nil
}

// Stats lists the enqueues from SQL that wait for a Go merge, by kind: here, while no
// running worker has registered page_views, and after one has merged them.
func ExampleDeferredMergeStats() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()
	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	var id pgtype.UUID
	for range 3 { // the first inserts the job (in a queue nobody serves here); the next two wait
		if err := pool.QueryRow(ctx, `SELECT id FROM venturi_enqueue('page_views', '{"page": "/home", "n": 1}',
			queue => 'views', dedup_key => '/home')`).Scan(&id); err != nil {
			log.Fatal(err)
		}
	}
	s, err := q.Stats(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range s.DeferredMerges {
		fmt.Printf("%s: %d waiting, of %d key, the oldest for less than an hour: %v\n", d.Kind, d.Waiting, d.Keys, d.OldestAge < time.Hour)
	}

	// A worker that registered the kind merges them into the pending job (it serves the
	// default queue only, so the job stays pending for the example).
	w, err := venturi.NewWorker(pool, struct{}{}, venturi.Config{MaintenanceInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[PageViews](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())
	s = awaitStats(q, func(s venturi.Stats) bool { return len(s.DeferredMerges) == 0 })
	j, err := q.Job(ctx, ulid.ULID(id.Bytes))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("waiting: %d kinds; the job's payload: %s\n", len(s.DeferredMerges), j.Payload)
	// Output:
	// page_views: 2 waiting, of 1 key, the oldest for less than an hour: true
	// waiting: 0 kinds; the job's payload: {"n": 3, "page": "/home"}
}
