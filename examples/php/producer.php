<?php
// Push COUNT jobs to TOPIC, each due DELAY_MS from now, and print each job's id on its own line.
//
//     DQ_URL=http://127.0.0.1:6789 DQ_TOKEN=... php producer.php orders.close 10 30000
//
// PHP 8.1+ with curl. Each job gets an id made here, so a push whose answer was lost (a timeout, a
// dropped connection, a 503) can be sent again safely: dq never stores the same id twice, and a 409
// `conflict` on such a retry means the first try was stored.

declare(strict_types=1);

require __DIR__ . '/dq.php';

/** Pushes $job (which has an id), retrying what may not have been stored with the same id. */
function push(array $job, int $tries = 5): void
{
    for ($attempt = 1; ; $attempt++) {
        try {
            dq_api('POST', '/v1/jobs', $job);
            return;
        } catch (DqError $e) {
            if ($e->dqCode === 'conflict' && $attempt > 1) {
                return; // stored by an earlier try whose answer was lost
            }
            if ($e->getCode() !== 503 || $attempt === $tries) {
                throw $e;
            }
        } catch (RuntimeException $e) {
            if ($attempt === $tries) {
                throw $e; // no answer: the push may or may not have been stored
            }
        }
        usleep(200000 * 2 ** $attempt);
    }
}

if ($argc < 2) {
    fwrite(STDERR, "usage: php producer.php TOPIC [COUNT] [DELAY_MS]\n");
    exit(2);
}
[$topic, $count, $delayMs] = [$argv[1], (int) ($argv[2] ?? 1), (int) ($argv[3] ?? 0)];
for ($n = 0; $n < $count; $n++) {
    $id = bin2hex(random_bytes(16));
    push(['id' => $id, 'topic' => $topic, 'body' => ['n' => $n], 'delay_ms' => $delayMs]);
    echo $id, "\n";
}
