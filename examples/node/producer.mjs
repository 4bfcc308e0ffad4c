#!/usr/bin/env node
// Push COUNT jobs to TOPIC, each due DELAY_MS from now, and print each job's id on its own line.
//
//     DQ_URL=http://127.0.0.1:6789 DQ_TOKEN=... node producer.mjs orders.close 10 30000
//
// Node 18+ (fetch), no packages. Each job gets an id made here, so a push whose answer was lost (a
// timeout, a dropped connection, a 503) can be sent again safely: dq never stores the same id twice, and
// a 409 `conflict` on such a retry means the first try was stored.

import { randomUUID } from "node:crypto";

const DQ_URL = (process.env.DQ_URL ?? "http://127.0.0.1:6789").replace(/\/+$/, "");
const DQ_TOKEN = process.env.DQ_TOKEN ?? "";

/** dq answered with an error: `status` is the HTTP status, `code` dq's error code. */
class ApiError extends Error {
  constructor(status, code, message) {
    super(`HTTP ${status} ${code}: ${message}`);
    this.status = status;
    this.code = code;
  }
}

/** One call to dq-server: the JSON answer (null for an empty one), or an ApiError. */
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

/** Pushes `job` (which has an `id`), retrying what may not have been stored with the same id. */
async function push(job, tries = 5) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await api("POST", "/v1/jobs", job);
    } catch (e) {
      if (e instanceof ApiError) {
        if (e.code === "conflict" && attempt > 1) return { id: job.id, state: "stored by an earlier try" };
        if (e.status !== 503 || attempt === tries) throw e;
      } else if (attempt === tries) {
        throw e; // a network error or a timeout: the push may or may not have been stored
      }
    }
    await new Promise((r) => setTimeout(r, 200 * 2 ** attempt));
  }
}

const [topic, count = "1", delayMs = "0"] = process.argv.slice(2);
if (!topic) {
  console.error("usage: producer.mjs TOPIC [COUNT] [DELAY_MS]");
  process.exit(2);
}
for (let n = 0; n < Number(count); n++) {
  const job = { id: randomUUID(), topic, body: { n }, delay_ms: Number(delayMs) };
  const answer = await push(job);
  console.log(answer.id);
}
