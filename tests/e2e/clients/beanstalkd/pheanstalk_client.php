<?php
// A producer and a worker over the beanstalkd protocol with Pheanstalk 4 (Debian's php-pda-pheanstalk),
// checking every answer.
//
// Usage: php pheanstalk_client.php HOST:PORT (or BEANSTALKD_ADDR=HOST:PORT). Works in a tube of its own,
// which should be empty. Prints "ok" last; exits 1 with a message at the first answer that is not the one expected.

require '/usr/share/php/Pheanstalk/autoload.php';

use Pheanstalk\Exception\ServerException;
use Pheanstalk\JobId;
use Pheanstalk\Pheanstalk;

function check(string $what, $got, $want): void
{
    if ($got !== $want) {
        fwrite(STDERR, "pheanstalk: $what: got " . var_export($got, true) . ", want " . var_export($want, true) . "\n");
        exit(1);
    }
}

[$host, $port] = explode(':', $argv[1] ?? getenv('BEANSTALKD_ADDR'));
$tube = 'clients-php';
$p = Pheanstalk::create($host, (int) $port);
$p->useTube($tube)->watch($tube)->ignore('default');
check('use', $p->listTubeUsed(true), $tube);
check('watch', $p->listTubesWatched(true), [$tube]);

$first = $p->put('first', 10, 0, 30);
$urgent = $p->put('urgent', 1);
$later = $p->put('later', 1024, 60);
check('peek', $p->peek($first)->getData(), 'first');
check('peek-ready', $p->peekReady()->getId(), $urgent->getId());
check('peek-delayed', $p->peekDelayed()->getId(), $later->getId());
check('stats-job of a delayed job', $p->statsJob($later)['state'], 'delayed');

$job = $p->reserveWithTimeout(0);
check('reserve takes the lowest priority', [$job->getId(), $job->getData()], [$urgent->getId(), 'urgent']);
$stats = $p->statsJob($job);
check('stats-job', [$stats['tube'], $stats['state'], (int) $stats['pri'], (int) $stats['ttr']], [$tube, 'reserved', 1, 60]);
$p->touch($job);
$p->release($job, 20);
check('release sets the priority', (int) $p->statsJob($urgent)['pri'], 20);

$job = $p->reserveWithTimeout(0);
check('reserve after release', [$job->getId(), $job->getData()], [$first->getId(), 'first']);
$p->bury($job, 5);
check('peek-buried', $p->peekBuried()->getId(), $first->getId());
check('kick', $p->kick(10), 1);
check('kicked', (int) $p->statsJob($first)['kicks'], 1);
$p->kickJob($later);
check('kick-job', $p->statsJob($later)['state'], 'ready');

foreach ([$first, $urgent, $later] as $want) {
    $job = $p->reserveWithTimeout(0);
    check('reserve in priority order', $job->getId(), $want->getId());
    $p->delete($job);
}
check('reserve on an empty tube', $p->reserveWithTimeout(0), null);
try {
    $p->delete(new JobId($first->getId()));
    check('delete of a deleted job', 'no error', 'NOT_FOUND');
} catch (ServerException $e) {
    check('delete of a deleted job', get_class($e), 'Pheanstalk\Exception\JobNotFoundException');
}
echo "ok\n";
