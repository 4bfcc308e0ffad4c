#!/usr/bin/env node
// A pull worker: reserve jobs of TOPIC... (highest priority first), handle them, ack or nack them.
//
//     DQ_URL=http://127.0.0.1:6789 DQ_TOKEN=... node worker.mjs orders.close orders.remind
//
// Node 18+ (fetch), no packages. It reserves up to DQ_COUNT jobs (10) with a long poll of DQ_WAIT_MS
// (20000), handles them one by one, acks the ones that succeeded in one request (ack many) and nacks each
// one that failed with its error (dq retries it after its backoff, or moves it to the dead list after its
// last attempt). While a job runs, a heartbeat touches every job of the batch still held before half of
// its reservation has passed, so a long job is not handed to another worker (this uses the `deadline` dq
// sends, on Redis's clock: keep this machine's clock in sync). SIGINT or SIGTERM: it stops reserving,
// finishes the batch it holds (the long poll in flight ends within DQ_WAIT_MS) and exits 0; a second
// signal exits at once, and what it held comes back after its TTR.

const DQ_URL = (process.env.DQ_URL ?? "http://127.0.0.1:6789").replace(/\/+$/, "");
const DQ_TOKEN = process.env.DQ_TOKEN ?? "";
const COUNT = Number(process.env.DQ_COUNT ?? "10");
const WAIT_MS = Number(process.env.DQ_WAIT_MS ?? "20000");

/** dq answered with an error: `status` is the HTTP status, `code` dq's error code. */
class ApiError extends Error {
  constructor(status, code, message) {
    super(`HTTP ${status} ${code}: ${message}`);
    this.status = status;
    this.code = code;
  }
}

/** One call to dq-server: the JSON answer (null for an empty one, e.g. 204), or an ApiError. */
async function api(method, path, body, timeoutMs = 10_000) {
  const headers = {};
  if (body !== undefined) headers["content-type"] = "application/json"; // dq refuses a body declared otherwise
  if (DQ_TOKEN) headers.authorization = `Bearer ${DQ_TOKEN}`;
  const resp = await fetch(DQ_URL + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await resp.text();
  if (!resp.ok) {
    let err = { code: "http_error", message: resp.statusText };
    try {
      err = JSON.parse(text).error ?? err;
    } catch {}
    throw new ApiError(resp.status, err.code, err.message);
  }
  return text.trim() ? JSON.parse(text) : null;
}

const jobPath = (job, verb) => `/v1/jobs/${encodeURIComponent(job.id)}/${verb}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (...args) => console.error(...args);

/** Your work goes here. Throw to fail the job. This one prints the job; a body with "sleep_ms" takes
 * that long, and a body with "fail" fails with that message. */
async function handle(job) {
  const body = job.body;
  if (body && typeof body === "object") {
    if (body.sleep_ms) await sleep(body.sleep_ms);
    if (body.fail) throw new Error(String(body.fail));
  }
  console.log(JSON.stringify({ id: job.id, topic: job.topic, attempt: job.attempt, body }));
}

/** The jobs this worker holds: id -> { job, touchAt (local Unix ms) }, touched by the heartbeat. */
const held = new Map();
const touchAt = (deadline) => Date.now() + Math.max(deadline - Date.now(), 0) / 2;

async function heartbeat() {
  const now = Date.now();
  for (const [id, entry] of held) {
    if (entry.touchAt > now || entry.touching) continue;
    entry.touching = true;
    try {
      const answer = await api("POST", jobPath(entry.job, "touch"), { receipt: entry.job.receipt });
      entry.touchAt = touchAt(answer.deadline);
    } catch (e) {
      if (e instanceof ApiError && (e.status === 404 || e.status === 409)) held.delete(id); // finished, or not ours
      log(`touch ${id}: ${e.message}`); // otherwise tried again on the next beat
    } finally {
      entry.touching = false;
    }
  }
}

/** Acks `jobs` in one request, sending again the entries whose outcome dq could not give. */
async function ackMany(jobs, tries = 3) {
  for (let attempt = 1; attempt <= tries && jobs.length; attempt++) {
    let results;
    try {
      ({ results } = await api("POST", "/v1/jobs/ack", { acks: jobs.map((j) => ({ id: j.id, receipt: j.receipt })) }));
    } catch (e) {
      if (e instanceof ApiError && e.status !== 503) throw e;
      log(`ack many (${jobs.length} jobs), try ${attempt}: ${e.message}`);
      await sleep(200 * 2 ** attempt);
      continue;
    }
    const again = [];
    results.forEach((result, i) => {
      if (result.error?.code === "unavailable") again.push(jobs[i]);
      // stale_receipt: the reservation ended and the job is someone else's now
      else if (result.error) log(`ack ${jobs[i].id}: ${result.error.code}: ${result.error.message}`);
    });
    jobs = again;
    if (jobs.length) await sleep(200 * 2 ** attempt);
  }
  if (jobs.length) log(`gave up acking ${jobs.length} jobs: they come back after their TTR`);
}

/** Fails `job`: dq retries it after its backoff, or moves it to the dead list after its last attempt. */
async function nack(job, error) {
  try {
    await api("POST", jobPath(job, "nack"), { receipt: job.receipt, error: error.slice(0, 4000) });
  } catch (e) {
    log(`nack ${job.id}: ${e.message} (it comes back after its TTR)`);
  }
}

const topics = process.argv.slice(2);
if (!topics.length) {
  console.error("usage: worker.mjs TOPIC [TOPIC...]");
  process.exit(2);
}
let stopping = false;
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => {
    if (stopping) process.exit(128 + (sig === "SIGINT" ? 2 : 15));
    log(`${sig}: finishing the jobs held, then stopping`);
    stopping = true;
  });
}
const beat = setInterval(heartbeat, 200);
let pause = 500;
while (!stopping) {
  let jobs;
  try {
    ({ jobs } = await api("POST", "/v1/reserve", { topics, count: COUNT, timeout_ms: WAIT_MS }, WAIT_MS + 10_000));
  } catch (e) {
    if (e instanceof ApiError && [400, 401, 403].includes(e.status)) {
      console.error(`reserve: ${e.message}`); // a mistake to fix, not to retry
      process.exit(1);
    }
    log(`reserve: ${e.message}; again in ${pause} ms`);
    await sleep(pause);
    pause = Math.min(pause * 2, 10_000);
    continue;
  }
  pause = 500;
  for (const job of jobs) held.set(job.id, { job, touchAt: touchAt(job.deadline) });
  const succeeded = [];
  for (const job of jobs) {
    try {
      await handle(job);
      succeeded.push(job);
    } catch (e) {
      held.delete(job.id);
      await nack(job, `${e.name}: ${e.message}`);
    }
  }
  for (const job of succeeded) held.delete(job.id);
  await ackMany(succeeded);
}
clearInterval(beat);
log("stopped");
