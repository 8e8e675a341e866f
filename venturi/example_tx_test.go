package venturi_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/venturi-dev/venturi"
)

// ---- Transactional enqueue ----

// WelcomeEmail greets a new account.
type WelcomeEmail struct {
	Email string `json:"email"`
}

// Kind names the task.
func (WelcomeEmail) Kind() string { return "welcome_email" }

// EnqueueTx enqueues in the caller's transaction: the job exists if and only if the
// transaction commits, and no worker sees it before.
func ExampleQueue_EnqueueTx() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()
	mustExec(pool, `CREATE TABLE account (email text PRIMARY KEY)`)
	q := venturi.NewQueue(pool, venturi.QueueConfig{})

	// signUp creates an account and its welcome email in one transaction.
	signUp := func(email string, commit bool) venturi.Result {
		tx, err := pool.Begin(ctx)
		if err != nil {
			log.Fatal(err)
		}
		defer tx.Rollback(ctx) // a no-op after Commit
		if _, err := tx.Exec(ctx, `INSERT INTO account (email) VALUES ($1)`, email); err != nil {
			log.Fatal(err)
		}
		res, err := q.EnqueueTx(ctx, tx, WelcomeEmail{Email: email})
		if err != nil {
			log.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				log.Fatal(err)
			}
		}
		return res
	}
	committed := signUp("ada@example.com", true)
	rolledBack := signUp("bob@example.com", false)

	job, err := q.Job(ctx, committed.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("committed:", job.State)
	_, err = q.Job(ctx, rolledBack.ID)
	fmt.Println("rolled back, job not found:", errors.Is(err, venturi.ErrNotFound))
	// Output:
	// committed: available
	// rolled back, job not found: true
}

// ---- Transactional completion ----

// Credit adds to an account's balance exactly once, however often its job runs.
type Credit struct {
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

// Ledger is the credit worker's state.
type Ledger struct {
	DB *pgxpool.Pool
}

// Kind names the task.
func (Credit) Kind() string { return "credit" }

// Handle writes the credit and the job's completion in one transaction.
func (c Credit) Handle(ctx context.Context, run *venturi.Run[struct{}], l Ledger) (venturi.Outcome, error) {
	tx, err := l.DB.Begin(ctx)
	if err != nil {
		return venturi.Outcome{}, err
	}
	defer tx.Rollback(ctx) // a no-op after Commit
	if _, err := tx.Exec(ctx, `UPDATE balance SET cents = cents + $2 WHERE account = $1`, c.Account, c.Cents); err != nil {
		return venturi.Outcome{}, err
	}
	// The outcome is written in tx, fenced by the run's token: if the run lost its job
	// (ErrLeaseLost), the credit rolls back with it.
	out, err := run.CompleteTx(ctx, tx, venturi.CompletedWith(fmt.Sprintf("credited %d cents", c.Cents)))
	if err != nil {
		return venturi.Outcome{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return venturi.Outcome{}, err
	}
	return out, nil
}

// CompleteTx commits the handler's own write atomically with the job's outcome: a
// credit is never applied without its job completing, nor completed without applying.
func ExampleRun_CompleteTx() {
	ctx := context.Background()
	pool, cleanup := exampleDB()
	defer cleanup()
	mustExec(pool, `CREATE TABLE balance (account text PRIMARY KEY, cents bigint NOT NULL)`)
	mustExec(pool, `INSERT INTO balance VALUES ('ada', 0)`)

	w, err := venturi.NewWorker(pool, Ledger{DB: pool}, venturi.Config{
		PollInterval: 10 * time.Millisecond,
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	venturi.MustRegister[Credit](w)
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(context.Background())

	q := venturi.NewQueue(pool, venturi.QueueConfig{})
	res, err := q.Enqueue(ctx, Credit{Account: "ada", Cents: 1500})
	if err != nil {
		log.Fatal(err)
	}
	job := awaitFinished(q, res.ID)
	var cents int64
	if err := pool.QueryRow(ctx, `SELECT cents FROM balance WHERE account = 'ada'`).Scan(&cents); err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.State, "balance:", cents)
	printJournal(job)
	// Output:
	// completed balance: 1500
	//   run 1 completed: credited 1500 cents
}
