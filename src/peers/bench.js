// The queues a team would otherwise pick, measured the way `make bench`
// measures noisylab's own, on the server the bench started:
//
//   node bench.js bullmq redis://HOST:PORT JOBS PICKUPS
//   node bench.js graphile-worker postgres://USER@HOST:PORT/DB JOBS PICKUPS
//
// Each with its own defaults and concurrency 20 in one process:
// - add: JOBS no-op jobs added at once (BullMQ's addBulk, graphile-worker's
//   addJobs: one call each), jobs a second;
// - drain: then a worker started and timed until every one has run, jobs a
//   second;
// - pickup: an idle worker, PICKUPS jobs added 10 ms apart, each timed from
//   just before its add to the start of its handler (one process, one
//   clock): p50 and p99 in milliseconds.
// Prints one JSON line.
"use strict";

const [peer, url, jobsArg, pickupsArg] = process.argv.slice(2);
const JOBS = Number(jobsArg || 20000);
const PICKUPS = Number(pickupsArg || 200);
const CONCURRENCY = 20;

const now = () => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

// Resolves once `n` handler calls have been counted by `done`.
function counter(n) {
  let left = n;
  let finish;
  const all = new Promise((r) => (finish = r));
  return {
    all,
    done() {
      left -= 1;
      if (left === 0) finish();
    },
  };
}

// PICKUPS jobs added 10 ms apart, each stamped just before its add.
async function pickups(add) {
  for (let i = 0; i < PICKUPS; i++) {
    await add(now());
    await sleep(10);
  }
}

async function bullmq() {
  const { Queue, Worker } = require("bullmq");
  const version = require("bullmq/package.json").version;
  const u = new URL(url);
  const connection = { host: u.hostname, port: Number(u.port), maxRetriesPerRequest: null };
  const q = new Queue("drain", { connection });
  const specs = Array.from({ length: JOBS }, (_, i) => ({ name: "noop", data: { i } }));
  let t = now();
  await q.addBulk(specs);
  const add = JOBS / ((now() - t) / 1e3);
  const c = counter(JOBS);
  t = now();
  const w = new Worker("drain", async () => c.done(), { connection, concurrency: CONCURRENCY });
  await c.all;
  const drain = JOBS / ((now() - t) / 1e3);
  await w.close();
  await q.close();

  const waits = [];
  const p = new Queue("pickup", { connection });
  const c2 = counter(PICKUPS);
  const w2 = new Worker(
    "pickup",
    async (job) => {
      waits.push(now() - job.data.at);
      c2.done();
    },
    { connection, concurrency: CONCURRENCY },
  );
  await w2.waitUntilReady();
  await sleep(200);
  await pickups((at) => p.add("noop", { at }));
  await c2.all;
  await w2.close();
  await p.close();
  return { peer: `BullMQ ${version}`, add, drain, waits };
}

async function graphile() {
  const gw = require("graphile-worker");
  const version = require("graphile-worker/package.json").version;
  const waits = [];
  let c = counter(JOBS);
  const taskList = {
    noop: async () => c.done(),
    pickup: async (payload) => {
      waits.push(now() - payload.at);
      c.done();
    },
  };
  // Its log (a line a job) silenced: printing it would be the bench.
  const logger = new gw.Logger(() => () => {});
  const common = { connectionString: url, concurrency: CONCURRENCY, noHandleSignals: true, taskList, logger };
  await gw.runMigrations(common);
  const utils = await gw.makeWorkerUtils({ connectionString: url, logger });
  const specs = Array.from({ length: JOBS }, (_, i) => ({ identifier: "noop", payload: { i } }));
  let t = now();
  await utils.addJobs(specs);
  const add = JOBS / ((now() - t) / 1e3);
  t = now();
  const runner = await gw.run(common);
  await c.all;
  const drain = JOBS / ((now() - t) / 1e3);

  c = counter(PICKUPS);
  await sleep(200);
  await pickups((at) => utils.addJob("pickup", { at }));
  await c.all;
  await runner.stop();
  await utils.release();
  return { peer: `graphile-worker ${version}`, add, drain, waits };
}

async function main() {
  const run = { bullmq, "graphile-worker": graphile }[peer];
  if (!run) {
    throw new Error(`unknown peer ${JSON.stringify(peer)}: bullmq or graphile-worker`);
  }
  const r = await run();
  const sorted = r.waits.sort((a, b) => a - b);
  const out = {
    peer: r.peer,
    add_per_s: r.add,
    drain_per_s: r.drain,
    pickup_p50_ms: percentile(sorted, 50),
    pickup_p99_ms: percentile(sorted, 99),
  };
  console.log(JSON.stringify(out));
  process.exit(0);
}

main().catch((e) => {
  console.error(`peers: ${e.message}`);
  process.exit(1);
});
