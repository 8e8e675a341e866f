// worker.mjs: graphile-worker as the bench's third peer (scenarios 4, 5, 8 and 16; see
// bench/README.md, "graphile-worker"). The Go bench starts it as it starts `bench worker`
// for venturi and River.
//
//   node worker.mjs migrate
//       runs graphile-worker's own migrations (runMigrations) into the schema, then exits.
//   node worker.mjs work -task bench_noop|bench_pickup|bench_sustain -concurrency N -max-pool-size N \
//       -poll-interval MS -local-queue-size N -complete-job-batch-delay MS
//       [-sleep-ms MS]
//       runs a worker (run()) with exactly that configuration; every flag is required, so
//       the configuration is the one the bench passes, never a default of this script.
//       The one optional flag, -sleep-ms (default 0), is the workload rather than
//       graphile-worker's configuration: bench_noop awaits a timer of that many ms
//       (simulated I/O, scenario 16; `bench worker -sleep` for venturi and River).
//
// Environment (the URL never goes on the command line, where ps shows its password):
//   BENCH_DATABASE_URL       the database
//   GRAPHILE_BENCH_SCHEMA    graphile-worker's schema (the bench uses graphile_bench)
//   GRAPHILE_BENCH_MODULES   the folder whose node_modules holds graphile-worker (the bench
//                            installs it into bench/.graphile with npm ci)
//   PGAPPNAME                read by node-postgres: the bench marks the worker's connections
//                            to find their server processes' CPU time
//
// `work` writes one line per event on stdout:
//   ready <unix ns>          just before run(): the bench times the drain from here
//   listening                once the pool's LISTEN connection is up (new-job notifications)
//   start <seq> <mono ns>    bench_pickup only: the handler's first line, on CLOCK_MONOTONIC
//                            (process.hrtime), which the bench's producer reads too
//   sample off=… rtt=… neg=… enq=… due=…
//                            bench_sustain only, one per "sample" line on stdin: the
//                            latency histograms of the handler starts since the previous
//                            one, in `bench worker -sustained`'s format (bench/hist.go)
//   done <runs>              on exit: how many times a task function ran
// and stops cleanly (runner.stop(), which also flushes batched completions) on SIGTERM,
// SIGINT or when its stdin closes. Logs (warnings and errors only) go to stderr.
import { createRequire } from "node:module";
import { EventEmitter } from "node:events";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";

const env = (name) => {
  const v = process.env[name];
  if (!v) fail(`${name} is not set`);
  return v;
};

function fail(msg) {
  process.stderr.write(`graphile worker.mjs: ${msg}\n`);
  process.exit(2);
}

const connectionString = env("BENCH_DATABASE_URL");
const schema = env("GRAPHILE_BENCH_SCHEMA");
const require = createRequire(join(env("GRAPHILE_BENCH_MODULES"), "package.json"));
const { run, runMigrations, Logger } = require("graphile-worker");

const logger = new Logger((scope) => (level, message) => {
  if (level === "error" || level === "warning") {
    process.stderr.write(`graphile-worker ${level}: ${message}\n`);
  }
});

// flags parses "-name value" pairs; every name in want must be given.
function flags(args, want) {
  const out = {};
  for (let i = 0; i < args.length; i += 2) {
    const name = args[i].replace(/^--?/, "");
    if (!want.includes(name) || i + 1 >= args.length) fail(`bad flag ${args[i]}`);
    out[name] = args[i + 1];
  }
  for (const w of want) if (!(w in out)) fail(`-${w} is required`);
  return out;
}

// optional takes the "-name value" pairs of the optional flags (name -> default) out of
// args; it returns their values and the other arguments, for flags().
function optional(args, defaults) {
  const out = { ...defaults };
  const rest = [];
  for (let i = 0; i < args.length; i += 2) {
    const name = args[i].replace(/^--?/, "");
    if (name in defaults && i + 1 < args.length) out[name] = args[i + 1];
    else rest.push(...args.slice(i, i + 2));
  }
  return [out, rest];
}

function int(s, name) {
  const n = Number(s);
  if (!Number.isInteger(n)) fail(`-${name}: ${s} is not an integer`);
  return n;
}

const say = (line) => process.stdout.write(line + "\n"); // synchronous on a pipe (Linux)

// Scenario 8's recorder, as bench/hist.go's sustainRec: a handler's start on the database
// clock (this process's wall clock plus the offset measured against clock_timestamp() at
// start-up, from the probe with the shortest round trip), less the job's enqueue time (e)
// or, for a delayed job, its due time (d), both microseconds on the database clock, into
// log-linear histograms: exact below 64 µs, then 64 buckets per power of two.
const HIST_SUB = 64;
const HIST_MAX = 2 ** 40 - 1;
function histIndex(v) {
  if (v < HIST_SUB) return Math.max(v, 0);
  v = Math.min(v, HIST_MAX);
  const hi = Math.floor(v / 2 ** 32);
  const len = hi > 0 ? 64 - Math.clz32(hi) : 32 - Math.clz32(v); // bits.Len64
  const s = len - 7; // floor(v / 2^s) is in [64, 128)
  return HIST_SUB * (1 + s) + Math.floor(v / 2 ** s) - HIST_SUB;
}
class Hist {
  constructor() {
    this.counts = new Map();
  }
  add(us) {
    const i = histIndex(us);
    this.counts.set(i, (this.counts.get(i) ?? 0) + 1);
  }
  encode() {
    if (this.counts.size === 0) return "-";
    return [...this.counts.entries()]
      .sort((a, b) => a[0] - b[0])
      .map(([i, c]) => `${i}:${c}`)
      .join(",");
  }
}
async function sustainRecorder() {
  const pg = require("pg");
  const client = new pg.Client({ connectionString });
  await client.connect();
  let offsetUs = 0;
  let rttUs = Number.MAX_SAFE_INTEGER;
  const wallUs = () => Math.round((performance.timeOrigin + performance.now()) * 1000);
  for (let i = 0; i < 16; i++) {
    const t0 = wallUs();
    const { rows } = await client.query("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint::text AS us");
    const rtt = wallUs() - t0;
    if (rtt < rttUs) {
      rttUs = rtt;
      offsetUs = Number(rows[0].us) - (t0 + Math.round(rtt / 2));
    }
  }
  await client.end();
  let enq = new Hist();
  let due = new Hist();
  let neg = 0;
  return {
    start(payload) {
      const now = wallUs() + offsetUs;
      const from = payload.d ? payload.d : payload.e;
      if (now < from) neg++;
      (payload.d ? due : enq).add(now - from);
    },
    take() {
      const line = `sample off=${offsetUs} rtt=${rttUs} neg=${neg} enq=${enq.encode()} due=${due.encode()}`;
      enq = new Hist();
      due = new Hist();
      neg = 0;
      return line;
    },
  };
}

async function work(argv) {
  const [opt, args] = optional(argv, { "sleep-ms": "0" });
  const f = flags(args, ["task", "concurrency", "max-pool-size", "poll-interval", "local-queue-size", "complete-job-batch-delay"]);
  const sleepMs = int(opt["sleep-ms"], "sleep-ms");
  if (sleepMs < 0) fail(`-sleep-ms: ${sleepMs} is negative`);
  let runs = 0;
  const rec = f.task === "bench_sustain" ? await sustainRecorder() : null;
  const tasks = {
    // The no-op job of scenario 4; with -sleep-ms, the I/O-bound job of scenario 16 (a
    // timer, as Go's handlers sleep on one).
    bench_noop:
      sleepMs > 0
        ? async () => {
            runs++;
            await sleep(sleepMs);
          }
        : () => {
            runs++;
          },
    // Scenario 5: the handler's start on the clock the producer reads.
    bench_pickup: (payload) => {
      const t = process.hrtime.bigint();
      runs++;
      say(`start ${payload.seq} ${t}`);
    },
    // Scenario 8: the handler's start, recorded (sustainRecorder).
    bench_sustain: (payload) => {
      runs++;
      rec.start(payload);
    },
  };
  if (!(f.task in tasks)) fail(`unknown -task ${f.task}`);
  const events = new EventEmitter();
  let listening = false;
  events.on("pool:listen:success", () => {
    if (!listening) {
      listening = true;
      say("listening");
    }
  });
  const localQueueSize = int(f["local-queue-size"], "local-queue-size");
  const worker = {
    connectionString,
    schema,
    logger,
    events,
    concurrentJobs: int(f.concurrency, "concurrency"),
    maxPoolSize: int(f["max-pool-size"], "max-pool-size"),
    pollInterval: int(f["poll-interval"], "poll-interval"),
    completeJobBatchDelay: int(f["complete-job-batch-delay"], "complete-job-batch-delay"),
    failJobBatchDelay: -1, // the default: no job fails here
  };
  if (localQueueSize > 0) worker.localQueue = { size: localQueueSize };
  const nowNs = () => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1000)) * 1000n;
  say(`ready ${nowNs()}`);
  const runner = await run({
    preset: { worker },
    taskList: { [f.task]: tasks[f.task] },
    parsedCronItems: [], // no crontab (otherwise it looks for ./crontab)
    noHandleSignals: true, // stopped below
  });
  let stopping = null;
  const stop = () => {
    stopping ??= runner.stop().then(
      () => {
        say(`done ${runs}`);
        process.exit(0);
      },
      (err) => {
        process.stderr.write(`graphile worker.mjs: stop: ${err}\n`);
        say(`done ${runs}`);
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
  process.stdin.on("end", stop);
  process.stdin.on("error", stop);
  if (rec) {
    createInterface({ input: process.stdin }).on("line", (l) => {
      if (l === "sample") say(rec.take());
    });
  } else {
    process.stdin.resume();
  }
  await runner.promise;
}

const [cmd, ...rest] = process.argv.slice(2);
try {
  if (cmd === "migrate") {
    if (rest.length) fail("migrate takes no flags");
    await runMigrations({ connectionString, schema, logger });
  } else if (cmd === "work") {
    await work(rest);
  } else {
    fail("usage: node worker.mjs migrate | work -task … (see the top of this file)");
  }
} catch (err) {
  process.stderr.write(`graphile worker.mjs: ${err?.stack ?? err}\n`);
  process.exit(1);
}
