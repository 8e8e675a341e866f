// A producer in another language: a Node service enqueues venturi jobs with the pg
// package, through venturi's SQL API (venturi/README.md, "Enqueue from SQL"), and a Go
// worker runs them. It needs nothing of venturi but its schema.
//
//   DATABASE_URL=postgres://... VENTURI_SCHEMA=venturi node produce.js
//
// It enqueues welcome emails one at a time (in a transaction, as a service would with its
// own writes: one key twice, so the pending job is replaced, as the kind says) and in one
// call, shows a refused enqueue's error, then waits until the worker has run every job,
// reading their state with venturi_job_status. Each step prints one JSON line.

'use strict';

const { Client } = require('pg');

const print = (line) => process.stdout.write(JSON.stringify(line) + '\n');

async function main() {
  const schema = process.env.VENTURI_SCHEMA || 'public';
  const client = new Client({
    connectionString: process.env.DATABASE_URL,
    // venturi's functions live in its schema: put it on the search_path (or call them
    // qualified, venturi.venturi_enqueue).
    options: `-c search_path=${schema}`,
  });
  await client.connect();
  try {
    const { rows: [{ version }] } = await client.query('SELECT venturi_sql_api_version() AS version');
    if (version !== 1) {
      throw new Error(`this producer speaks venturi's SQL API 1, the schema has ${version}`);
    }

    // A job in the transaction of the service's own writes: it exists if they commit, and
    // no worker sees it before. The same key again while it is pending (the user fixed
    // their address): the kind has no merge method, so the pending job's payload is
    // replaced and its ID stays.
    await client.query('BEGIN');
    const { rows: [ada] } = await client.query(
      `SELECT id, action FROM venturi_enqueue('send_email', $1, dedup_key => $2, meta => $3)`,
      [{ to: 'ada@example.com', subject: 'Welcome' }, 'welcome/ada', { source: 'node' }]);
    print({ step: 'one', id: ada.id, action: ada.action });
    const { rows: [again] } = await client.query(
      `SELECT id, action FROM venturi_enqueue('send_email', $1, dedup_key => $2)`,
      [{ to: 'ada@example.org', subject: 'Welcome' }, 'welcome/ada']);
    print({ step: 'again', id: again.id, action: again.action });
    await client.query('COMMIT');

    // Many jobs in one call: a JSON array of venturi_enqueue's arguments.
    const jobs = ['bob', 'cy', 'dee'].map((name, i) => ({
      kind: 'send_email',
      payload: { to: `${name}@example.com`, subject: 'Welcome' },
      priority: 10 - i,
    }));
    const { rows: many } = await client.query(
      'SELECT ord, id, action FROM venturi_enqueue_many($1)', [JSON.stringify(jobs)]);
    for (const r of many) {
      print({ step: 'many', ord: r.ord, id: r.id, action: r.action });
    }

    // A refused enqueue: the SQLSTATE, the field (the error's column) and the message.
    try {
      await client.query(`SELECT venturi_enqueue('send_email', '{}', priority => 5000)`);
      throw new Error('an out-of-range priority was accepted');
    } catch (err) {
      if (!err.code) {
        throw err;
      }
      print({ step: 'refused', code: err.code, column: err.column, message: err.message });
    }

    // Wait until the worker has run them all, reading their state from SQL.
    const ids = [ada.id, ...many.map((r) => r.id)];
    const deadline = Date.now() + Number(process.env.PRODUCER_WAIT_MS || 30000);
    for (const id of ids) {
      for (;;) {
        const { rows: [job] } = await client.query(
          'SELECT state, runs, last_note FROM venturi_job_status($1)', [id]);
        if (job.state === 'completed' || job.state === 'dead') {
          print({ step: 'done', id, state: job.state, runs: job.runs, note: job.last_note });
          break;
        }
        if (Date.now() > deadline) {
          throw new Error(`job ${id} is still ${job.state}`);
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  process.stderr.write(`produce.js: ${err.stack || err}\n`);
  process.exit(1);
});
