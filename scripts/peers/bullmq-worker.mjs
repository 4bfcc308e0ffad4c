// BullMQ's side of scripts/peers-worker.sh: fills a queue with N jobs (addBulk, 500 at a time, removed
// when completed), then one Worker with concurrency C and a handler that does nothing drains it.
// Prints {"jobs", "seconds", "per_s"} for the drain.
import { Queue, Worker } from 'bullmq';

const [port, n, concurrency] = process.argv.slice(2).map(Number);
const connection = { host: '127.0.0.1', port };
const queue = new Queue('peers-bench', { connection });
await queue.obliterate({ force: true });
for (let i = 0; i < n; i += 500) {
  const size = Math.min(500, n - i);
  await queue.addBulk(Array.from({ length: size }, (_, k) => ({
    name: 'j', data: { i: i + k }, opts: { removeOnComplete: true, removeOnFail: true },
  })));
}
let done = 0;
const start = performance.now();
const worker = new Worker('peers-bench', async () => {}, { connection, concurrency });
worker.on('completed', async () => {
  done += 1;
  if (done === n) {
    const seconds = (performance.now() - start) / 1000;
    console.log(JSON.stringify({ jobs: n, seconds, per_s: n / seconds }));
    await worker.close();
    await queue.close();
    process.exit(0);
  }
});
worker.on('failed', (job, err) => { console.error('failed', err); process.exit(1); });
