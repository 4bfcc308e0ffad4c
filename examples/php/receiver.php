<?php
// A callback receiver for push delivery: checks `X-DQ-Signature` and takes each job once.
//
//     DQ_SECRETS=s3cr3t php -S 127.0.0.1:8080 receiver.php
//
// (or behind any web server running PHP). Register a topic whose callback it is:
//     PUT /v1/topics/orders.close {"callback": {"url": "http://127.0.0.1:8080/hook", "secret": "s3cr3t"}}
//
// No extension needed. DQ_SECRETS holds the keys it accepts, comma-separated (during a rotation, the new
// and the old one). A request is taken when its signature, computed over the raw bytes received, matches
// one of them (compared in constant time) and its timestamp is within 300 s of this machine's clock: then
// 200 with a JSON body (dq counts an empty answer, even a 204, as a failure and retries). A missing or bad
// signature is 401. Delivery is at least once: dedupe on the job id (X-DQ-Job-Id) in your database.

declare(strict_types=1);

const REPLAY_WINDOW_S = 300;

/** True when $header (t=<unix s>,v1=<hex>[,v1=<hex>]) signs $body with one of $keys. */
function dq_verify(string $header, string $body, array $keys, ?int $now = null): bool
{
    $ts = [];
    $sigs = [];
    foreach (explode(',', $header) as $part) {
        $kv = explode('=', $part, 2);
        if (count($kv) !== 2) {
            continue;
        }
        if ($kv[0] === 't') {
            $ts[] = $kv[1];
        } elseif ($kv[0] === 'v1') {
            $sigs[] = $kv[1];
        }
    }
    if (count($ts) !== 1 || !ctype_digit($ts[0]) || !$sigs) {
        return false;
    }
    if (abs(($now ?? time()) - (int) $ts[0]) > REPLAY_WINDOW_S) {
        return false;
    }
    $ok = false;
    foreach ($keys as $key) {
        $expected = hash_hmac('sha256', $ts[0] . '.' . $body, $key);
        foreach ($sigs as $sig) {
            $ok = hash_equals($expected, $sig) || $ok; // constant time, and every comparison is made
        }
    }
    return $ok;
}

/** Your work goes here (throw to have dq retry the job). This one logs the job. */
function handle(array $job): void
{
    error_log(json_encode(['id' => $job['id'], 'topic' => $job['topic'], 'attempt' => $job['attempt'], 'body' => $job['body']]));
}

function answer(int $status, array $body): void
{
    http_response_code($status);
    header('Content-Type: application/json');
    echo json_encode($body);
}

if ($_SERVER['REQUEST_METHOD'] !== 'POST') {
    answer(405, ['error' => 'POST only']);
    return;
}
$keys = array_values(array_filter(explode(',', getenv('DQ_SECRETS') ?: '')));
$body = file_get_contents('php://input'); // the raw bytes: the signature is over them, not over parsed JSON
if (!$keys || !dq_verify($_SERVER['HTTP_X_DQ_SIGNATURE'] ?? '', (string) $body, $keys)) {
    answer(401, ['error' => 'bad signature']);
    return;
}
try {
    handle(json_decode((string) $body, true, 512, JSON_THROW_ON_ERROR));
} catch (Throwable $e) {
    answer(500, ['error' => $e->getMessage()]); // dq retries after the topic's backoff
    return;
}
answer(200, ['ok' => true]);
