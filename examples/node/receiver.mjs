#!/usr/bin/env node
// A callback receiver for push delivery: checks `X-DQ-Signature` and takes each job once.
//
//     DQ_SECRETS=s3cr3t PORT=8080 node receiver.mjs
//
// Register a topic whose callback it is:
//     PUT /v1/topics/orders.close {"callback": {"url": "http://127.0.0.1:8080/hook", "secret": "s3cr3t"}}
//
// No packages. DQ_SECRETS holds the keys it accepts, comma-separated (during a rotation, the new and the
// old one). A request is taken when its signature, computed over the raw bytes received, matches one of
// them (compared in constant time) and its timestamp is within 300 s of this machine's clock: then 200
// with a JSON body (dq counts an empty answer, even a 204, as a failure and retries). A missing or bad
// signature is 401. Delivery is at least once: a job id seen before is answered 200 and not handled
// again (here in memory; use your database).

import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";

const SECRETS = (process.env.DQ_SECRETS ?? "").split(",").filter(Boolean);
const HOST = process.env.HOST ?? "127.0.0.1";
const PORT = Number(process.env.PORT ?? "8080");
const REPLAY_WINDOW_S = 300;
const MAX_BODY = 1 << 20;

/** True when `header` (t=<unix s>,v1=<hex>[,v1=<hex>]) signs `body` (a Buffer) with one of `keys`. */
export function verify(header, body, keys, nowS = Date.now() / 1000) {
  const fields = header.split(",").filter((p) => p.includes("=")).map((p) => [p.slice(0, p.indexOf("=")), p.slice(p.indexOf("=") + 1)]);
  const ts = fields.filter(([k]) => k === "t").map(([, v]) => v);
  const sigs = fields.filter(([k]) => k === "v1").map(([, v]) => Buffer.from(v));
  if (ts.length !== 1 || !/^\d+$/.test(ts[0]) || !sigs.length) return false;
  if (Math.abs(nowS - Number(ts[0])) > REPLAY_WINDOW_S) return false;
  let ok = false;
  for (const key of keys) {
    const expected = Buffer.from(createHmac("sha256", key).update(`${ts[0]}.`).update(body).digest("hex"));
    for (const sig of sigs) {
      // timingSafeEqual needs equal lengths; a length (64 hex digits) is no secret.
      if (sig.length === expected.length && timingSafeEqual(sig, expected)) ok = true;
    }
  }
  return ok;
}

/** Your work goes here (throw to have dq retry the job). This one prints the job. */
async function handle(job) {
  console.log(JSON.stringify({ id: job.id, topic: job.topic, attempt: job.attempt, body: job.body }));
}

const seen = new Set();

function answer(res, status, body) {
  const data = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(data) });
  res.end(data);
}

const server = createServer(async (req, res) => {
  if (req.method !== "POST") return answer(res, 405, { error: "POST only" });
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > MAX_BODY) return answer(res, 413, { error: "too large" });
    chunks.push(chunk);
  }
  const body = Buffer.concat(chunks); // the raw bytes: the signature is over them, not over parsed JSON
  if (!verify(req.headers["x-dq-signature"] ?? "", body, SECRETS)) return answer(res, 401, { error: "bad signature" });
  const job = JSON.parse(body);
  if (!seen.has(job.id)) {
    try {
      await handle(job);
    } catch (e) {
      return answer(res, 500, { error: e.message }); // dq retries after the topic's backoff
    }
    seen.add(job.id);
  }
  answer(res, 200, { ok: true });
});

if (!SECRETS.length) {
  console.error("set DQ_SECRETS to the topic's secret (comma-separated during a rotation)");
  process.exit(2);
}
// Stop: take no new connection, close the idle keep-alive ones (dq-consumer keeps its connections open),
// let requests in progress finish, and close whatever is still open after 5 s.
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => {
    server.close();
    server.closeIdleConnections();
    setTimeout(() => server.closeAllConnections(), 5000).unref();
  });
}
server.listen(PORT, HOST, () => console.error(`listening on http://${HOST}:${server.address().port}`));
