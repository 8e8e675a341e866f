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
