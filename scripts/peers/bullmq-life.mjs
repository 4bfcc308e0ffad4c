// BullMQ's side of a job's whole life, for scripts/profile-life.sh bullmq: the same work as dq's push path
// there. N jobs are added in batches of 500 (addBulk), each delayed so that they come due at RATE a second
// from 1.5 s after the start; one Worker with concurrency 64 and a handler that does nothing completes
// them (removed on completion). Prints {"jobs", "seconds"} once the last one completed.
import { Queue, Worker } from 'bullmq';

const [port, n, rate] = process.argv.slice(2).map(Number);
const connection = { host: '127.0.0.1', port };
const name = `life-${process.pid}`;
const queue = new Queue(name, { connection });
let done = 0;
const start = performance.now();
const finished = new Promise((resolve, reject) => {
  const worker = new Worker(name, async () => {}, { connection, concurrency: 64 });
  worker.on('completed', () => {
    done += 1;
    if (done === n) resolve(worker);
  });
  worker.on('failed', (job, err) => reject(err));
});
for (let i = 0; i < n; i += 500) {
  const size = Math.min(500, n - i);
  const now = performance.now() - start;
  await queue.addBulk(Array.from({ length: size }, (_, k) => ({
    name: 'j',
    data: { i: i + k },
    opts: { delay: Math.max(0, Math.round(1500 + ((i + k) * 1000) / rate - now)), removeOnComplete: true, removeOnFail: true },
  })));
}
const worker = await finished;
console.log(JSON.stringify({ jobs: n, seconds: (performance.now() - start) / 1000 }));
await worker.close();
await queue.obliterate({ force: true });
await queue.close();
process.exit(0);
