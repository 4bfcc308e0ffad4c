<?php
// A pull worker: reserve jobs of TOPIC... (highest priority first), handle them, ack or nack them.
//
//     DQ_URL=http://127.0.0.1:6789 DQ_TOKEN=... php worker.php orders.close orders.remind
//
// PHP 8.1+ with curl (and pcntl for a clean stop). It reserves up to DQ_COUNT jobs (10) with a long poll
// of DQ_WAIT_MS (20000), handles them one by one, acks the ones that succeeded in one request (ack many)
// and nacks each one that failed with its error (dq retries it after its backoff, or moves it to the dead
// list after its last attempt). PHP has no threads, so the jobs of a batch still waiting are touched
// between two jobs once half of their reservation has passed: a single job longer than its TTR should
// call touch itself (see touch_due()). SIGINT or SIGTERM: it stops reserving, finishes the batch it holds
// (the long poll in flight ends within DQ_WAIT_MS) and exits 0; a second signal exits at once, and what it
// held comes back after its TTR.

declare(strict_types=1);

require __DIR__ . '/dq.php';

const MAX_ERROR_BYTES = 4000;

function logline(string $line): void
{
    fwrite(STDERR, $line . "\n");
}

function job_path(array $job, string $verb): string
{
    return '/v1/jobs/' . rawurlencode($job['id']) . "/$verb";
}

/** When to touch a job whose reservation ends at $deadlineMs (Unix ms, Redis's clock): half-way. */
function touch_at(int $deadlineMs): float
{
    $now = microtime(true) * 1000;
    return $now + max($deadlineMs - $now, 0) / 2;
}

/** Touches each job of $held whose time has come; drops those that are finished or no longer ours. */
function touch_due(array &$held): void
{
    foreach ($held as $id => [$job, $at]) {
        if ($at > microtime(true) * 1000) {
            continue;
        }
        try {
            $answer = dq_api('POST', job_path($job, 'touch'), ['receipt' => $job['receipt']]);
            $held[$id] = [$job, touch_at($answer['deadline'])];
        } catch (DqError $e) {
            logline("touch $id: {$e->getMessage()}");
            if (in_array($e->getCode(), [404, 409], true)) {
                unset($held[$id]);
            }
        } catch (RuntimeException $e) {
            logline("touch $id: {$e->getMessage()}"); // tried again later
        }
    }
}

/**
 * Your work goes here. Throw to fail the job. This one prints the job; a body with "sleep_ms" takes that
 * long, and a body with "fail" fails with that message.
 */
function handle(array $job): void
{
    $body = $job['body'];
    if (is_array($body)) {
        if (!empty($body['sleep_ms'])) {
            usleep((int) $body['sleep_ms'] * 1000);
        }
        if (!empty($body['fail'])) {
            throw new RuntimeException((string) $body['fail']);
        }
    }
    echo json_encode(['id' => $job['id'], 'topic' => $job['topic'], 'attempt' => $job['attempt'], 'body' => $body]), "\n";
}

/** Acks $jobs in one request, sending again the entries whose outcome dq could not give. */
function ack_many(array $jobs): void
{
    for ($attempt = 1; $attempt <= 3 && $jobs; $attempt++) {
        $acks = array_map(fn ($j) => ['id' => $j['id'], 'receipt' => $j['receipt']], $jobs);
        try {
            $results = dq_api('POST', '/v1/jobs/ack', ['acks' => $acks])['results'];
        } catch (DqError $e) {
            logline("ack many: {$e->getMessage()}");
            if ($e->getCode() !== 503) {
                return;
            }
            usleep(200000 * 2 ** $attempt);
            continue;
        } catch (RuntimeException $e) {
            logline("ack many, try $attempt: {$e->getMessage()}");
            usleep(200000 * 2 ** $attempt);
            continue;
        }
        $again = [];
        foreach ($results as $i => $result) {
            $err = $result['error'] ?? null;
            if ($err && $err['code'] === 'unavailable') {
                $again[] = $jobs[$i];
            } elseif ($err) { // stale_receipt: the reservation ended and the job is someone else's now
                logline("ack {$jobs[$i]['id']}: {$err['code']}: {$err['message']}");
            }
        }
        $jobs = $again;
        if ($jobs) {
            usleep(200000 * 2 ** $attempt);
        }
    }
    if ($jobs) {
        logline('gave up acking ' . count($jobs) . ' jobs: they come back after their TTR');
    }
}

/** Fails $job: dq retries it after its backoff, or moves it to the dead list after its last attempt. */
function nack(array $job, string $error): void
{
    try {
        dq_api('POST', job_path($job, 'nack'), ['receipt' => $job['receipt'], 'error' => substr($error, 0, MAX_ERROR_BYTES)]);
    } catch (RuntimeException $e) {
        logline("nack {$job['id']}: {$e->getMessage()} (it comes back after its TTR)");
    }
}

$topics = array_slice($argv, 1);
if (!$topics) {
    fwrite(STDERR, "usage: php worker.php TOPIC [TOPIC...]\n");
    exit(2);
}
$count = (int) (getenv('DQ_COUNT') ?: 10);
$waitMs = (int) (getenv('DQ_WAIT_MS') ?: 20000);
$stopping = false;
if (function_exists('pcntl_async_signals')) {
    pcntl_async_signals(true);
    foreach ([SIGINT, SIGTERM] as $sig) {
        pcntl_signal($sig, function (int $sig) use (&$stopping) {
            if ($stopping) {
                exit(128 + $sig);
            }
            logline("signal $sig: finishing the jobs held, then stopping");
            $stopping = true;
        });
    }
}
$pause = 0.5;
while (!$stopping) {
    try {
        $jobs = dq_api('POST', '/v1/reserve', ['topics' => $topics, 'count' => $count, 'timeout_ms' => $waitMs], $waitMs + 10000)['jobs'];
    } catch (DqError $e) {
        if (in_array($e->getCode(), [400, 401, 403], true)) {
            fwrite(STDERR, "reserve: {$e->getMessage()}\n"); // a mistake to fix, not to retry
            exit(1);
        }
        logline("reserve: {$e->getMessage()}; again in $pause s");
        usleep((int) ($pause * 1e6));
        $pause = min($pause * 2, 10);
        continue;
    } catch (RuntimeException $e) {
        logline("reserve: {$e->getMessage()}; again in $pause s");
        usleep((int) ($pause * 1e6));
        $pause = min($pause * 2, 10);
        continue;
    }
    $pause = 0.5;
    $held = [];
    foreach ($jobs as $job) {
        $held[$job['id']] = [$job, touch_at($job['deadline'])];
    }
    $succeeded = [];
    foreach ($jobs as $job) {
        touch_due($held);
        if (!isset($held[$job['id']])) {
            continue; // lost while the jobs before it ran: someone else has it
        }
        try {
            handle($job);
            $succeeded[] = $job;
        } catch (Throwable $e) {
            unset($held[$job['id']]);
            nack($job, get_class($e) . ': ' . $e->getMessage());
        }
    }
    ack_many($succeeded);
}
logline('stopped');
