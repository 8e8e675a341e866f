// Package venturitest helps the users of venturi test their tasks: run a handler once
// without a worker, assert that code enqueued a task, and work a worker's queue to the
// end in the test's goroutine.
//
// # Running a handler
//
// [RunHandler] (for a task with a Handle method) and [RunFunc] (for a handler function
// registered with venturi.RegisterFunc) call the handler once, in the caller's goroutine,
// with a [venturi.Run] built from [RunOptions]: the run count, the failures and journal of
// earlier runs, the carry they left, a shutdown in progress. No database and no worker are
// involved, so a handler whose dependencies are fakes runs in a plain unit test:
//
//	res := venturitest.RunFunc(ctx, handleFetch, tasks.FetchBookmark{URL: "gopher://x"}, app,
//		venturitest.RunOptions[tasks.FetchCarry]{})
//	if !res.IsPermanent() {
//		t.Fatalf("a bad URL must kill the job, got %s: %s", res.Event(), res.Note())
//	}
//
// The task goes through the JSON round trip of an enqueue and a claim before the handler
// sees it, and so does the carry: a field that does not survive encoding is missing in
// the test as it would be in production. A panic becomes an error, as in the worker.
// The [Result] reports the outcome or error, the journal event the worker would record,
// a RetryIn delay, the carry and attachment the run left, and whether the handler
// committed its outcome with Run.CompleteTx (which succeeds without writing anything,
// unless [RunOptions].CompleteTxErr makes it fail). [RunOptions].Waited and
// [RunOptions].Signals make the run one that follows a venturi.WaitForSignal, with the
// signals that arrived ([SignalOf] builds one); [Result].Consumed reports those the handler
// read. A workflow's node runs in its workflow with [RunOptions].Workflow and Node, the
// outputs of the other nodes in [RunOptions].Outputs (what Run.Output and
// Run.UpstreamOutputs read) and a batch's counts in [RunOptions].Batch (Run.Batch);
// [Result].Output and [Result].Spawned report what the run would store and attach.
//
// # Asserting enqueues
//
// [RequireEnqueued] finds a pending job of a task type whose decoded payload satisfies a
// predicate on the typed payload, and fails the test with a list of that kind's jobs when
// none does; [RequireEnqueuedTx] looks inside a transaction, seeing what it has not
// committed yet. [RequireNotEnqueued] is the converse. Options wait for a job enqueued
// elsewhere ([WithWait]) and choose the states that count ([WithStates], [WithAnyState]).
// River's rivertest matches on the kind alone and Oban's helpers on a subset of the
// arguments; a Go predicate on the payload says exactly what the test means:
//
//	venturitest.RequireEnqueued(t, pool, func(r tasks.RebuildTagIndex) bool {
//		return slices.Contains(r.Tags, "go")
//	})
//
// # Draining a worker
//
// [Drain] claims and runs the available jobs of a worker that was never started, one at a
// time in the caller's goroutine, until none is left, and reports every run: a test of a
// chain of jobs (a job that enqueues others, a job that pauses and resumes) ends
// deterministically, without polling for a final state.
//
// # How it reaches venturi's internals
//
// A [venturi.Run] has unexported fields so that no handler can forge one, and a
// [venturi.Worker] keeps its claim-run-finish loop to itself; Go lets no other package build
// the first or step the second. venturitest uses venturi's exported API and its internal
// packages directly (internal/dbsqlc for its reads, internal/jsonb to refuse what an
// enqueue refuses) and crosses into package venturi only for what the language forces,
// through venturi/internal/testhook: building and reading a Run, draining a Worker, and
// converting a job's row into a [venturi.Job]. Package venturi fills those functions in at
// init, typed where Go allows (a generic *Run[C] crosses as any, asserted on arrival). The
// alternatives were an exported constructor of runs (a handler could then forge one) or a
// copy of the worker's run loop here (River's rivertest copies its worker wrapper for the
// same reason); one narrow bridge keeps a single implementation and venturi's exported API
// the same with or without this package.
package venturitest
