// noisylab's protocol (docs/your-queue.md) on BullMQ, with BullMQ's
// defaults: an enqueue endpoint that adds each job to a BullMQ queue, and a
// BullMQ worker (concurrency N) whose processor reports the job's start,
// holds for its hold, and reports its end.
//
//   npm ci --prefix src/shims/bullmq
//   node src/shims/bullmq/shim.js --redis redis://127.0.0.1:6379 --workers 20 --port 8000
//   noisylab run lab/article.toml --strategy "Shared FIFO" --backend http://127.0.0.1:8000/jobs
//
// It prints the URL it listens on once its worker is ready. With
// --until-stdin-closes it exits when its standard input closes.

const http = require('node:http');
const { Queue, Worker } = require('bullmq');

const args = { redis: 'redis://127.0.0.1:6379', workers: '20', port: '8000', queue: 'noisylab' };
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  if (a === '--until-stdin-closes') args.untilStdinCloses = true;
  else if (a.startsWith('--') && a.slice(2) in args) args[a.slice(2)] = process.argv[++i];
  else throw new Error(`unknown argument ${a}: --redis URL --workers N --port P --queue NAME --until-stdin-closes`);
}
const redis = new URL(args.redis);
const connection = { host: redis.hostname, port: Number(redis.port || 6379), db: Number(redis.pathname.slice(1) || 0) };

// The handler's two calls.
async function report(job, event) {
  const body = JSON.stringify({ run: job.run, job: job.job, attempt: job.attempt, secret: job.secret });
  const res = await fetch(`${job.report}/${event}`, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
  await res.arrayBuffer();
}

// Hold for `ms` by the monotonic clock. A timer alone can end early: it
// counts from the event loop's clock as of its last turn, which may be
// older than the instant the timer was set.
async function hold(ms) {
  const until = performance.now() + ms;
  for (let left = ms; left > 0; left = until - performance.now()) {
    await new Promise((done) => setTimeout(done, left));
  }
}

const queue = new Queue(args.queue, { connection });
const worker = new Worker(args.queue, async (job) => {
  await report(job.data, 'start');
  await hold(job.data.hold_ms);
  await report(job.data, 'end');
}, { connection, concurrency: Number(args.workers) });

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', async () => {
    let status = 202;
    try {
      await queue.add('job', JSON.parse(Buffer.concat(chunks)));
    } catch (e) {
      status = e instanceof SyntaxError ? 400 : 503;
    }
    res.writeHead(status, { 'content-length': 0 });
    res.end();
  });
});
server.keepAliveTimeout = 60000;

(async () => {
  await worker.waitUntilReady();
  await queue.waitUntilReady();
  server.listen(Number(args.port), '127.0.0.1', () => {
    console.log(`listening on http://127.0.0.1:${server.address().port}/jobs`);
  });
  if (args.untilStdinCloses) {
    process.stdin.on('end', () => process.exit(0));
    process.stdin.resume();
  }
})();
