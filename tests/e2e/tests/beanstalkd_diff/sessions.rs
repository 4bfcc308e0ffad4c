//! The sessions: every command of protocol.txt, its success and error paths. Each runs on a fresh server,
//! so job ids start at 1. Steps that wait on the server's clock (delays, TTRs, pauses) let it do the
//! waiting (`reserve-with-timeout`) and read the reply with the step's generous deadline.

use super::script::Session;

/// The partitions of the dq the sessions over tubes in several partitions run against: the installation
/// default, where greenstalk's `static` and `dynamic` (and `mail`) have home partitions of their own, in
/// the opposite order of the puts (a test in beanstalkd_diff.rs checks it).
pub const ACROSS_PARTITIONS: u16 = 256;

/// greenstalk's and beanstalkd's default priority.
const PRI: u32 = 65_536;

/// All sessions, in the order they run.
pub fn all() -> Vec<Session> {
    vec![
        put_reserve_delete(),
        priorities_across_tubes(),
        bad_commands(),
        bodies(),
        bury_kick_peek(),
        reserve_job(),
        release_and_touch(),
        delays(),
        ttr_and_deadline_soon(),
        connections(),
        tube_names(),
        pause_tube(),
        time_left(),
        watch_multiple_as_greenstalk(),
        priorities_across_partitions(),
        put_order_across_partitions(),
    ]
}

fn put_reserve_delete() -> Session {
    Session::new("put, peek, reserve, delete", 2)
        .put(0, 0, 0, 60, "hello")
        .put(0, 100, 0, 60, "")
        .cmd(0, "peek 1")
        .cmd(0, "peek 2")
        .cmd(0, "peek 3")
        .cmd(0, "peek-ready")
        .cmd(1, "reserve")
        .cmd(1, "reserve-with-timeout 0")
        .cmd(1, "reserve-with-timeout 0")
        // Job 1 is connection 1's: connection 0 can neither finish, release, bury nor touch it.
        .cmd(0, "delete 1")
        .cmd(0, "release 1 0 0")
        .cmd(0, "bury 1 0")
        .cmd(0, "touch 1")
        .cmd(0, "stats-job 1")
        .differs("job-stats")
        .cmd(1, "touch 1")
        .cmd(1, "delete 1")
        .cmd(1, "delete 1")
        .cmd(0, "peek 1")
        .cmd(1, "delete 2")
        .cmd(0, "peek-ready")
        .cmd(0, "delete 99")
        .cmd(0, "stats-job 99")
        .cmd(0, "stats-tube default")
        // Two commands in one write: two replies, in order.
        .send(0, "use pipelined\r\nlist-tube-used\r\n")
        .read(0)
        .cmd(0, "list-tubes")
        .cmd(0, "stats")
        .differs("server-stats")
}

fn priorities_across_tubes() -> Session {
    Session::new("priorities, then ids, across watched tubes", 2)
        .cmd(0, "use a")
        .put(0, 5, 0, 60, "a1")
        .put(0, 1, 0, 60, "a2")
        .cmd(0, "use b")
        .put(0, 1, 0, 60, "b1")
        .put(0, 0, 0, 60, "b2")
        .put(0, 5, 0, 60, "b3")
        .put(0, 4_294_967_295, 0, 60, "b4")
        .cmd(0, "put 4294967296 0 60 1")
        .cmd(0, "use default")
        .put(0, 0, 0, 60, "d1")
        .cmd(1, "watch a")
        .cmd(1, "watch b")
        .cmd(1, "watch a")
        .cmd(1, "ignore default")
        .cmd(1, "ignore nosuch")
        .cmd(1, "list-tubes-watched")
        .cmd(1, "list-tube-used")
        .cmd(0, "list-tubes")
        .cmd(0, "stats-tube a")
        .cmd(0, "stats-tube b")
        .cmd(1, "reserve")
        .cmd(1, "reserve")
        .cmd(1, "reserve")
        .cmd(1, "reserve")
        .cmd(1, "reserve")
        .cmd(1, "reserve")
        .cmd(1, "stats-job 6")
        .differs("job-stats")
        // Job 7 waits in default, which connection 1 no longer watches.
        .cmd(1, "reserve-with-timeout 0")
        .cmd(0, "stats-tube b")
        .cmd(0, "stats")
        .differs("server-stats")
}

fn bad_commands() -> Session {
    let long_line = format!("use {}\r\n", "a".repeat(300));
    Session::new("bad commands", 1)
        .cmd(0, "put")
        .cmd(0, "put 0 0 60")
        .cmd(0, "put a 0 60 1")
        .cmd(0, "put -1 0 60 1")
        .cmd(0, "put 0 0 60 1 extra")
        .cmd(0, "put 0 0 60 1 ")
        .cmd(0, "put 0 4294967296 60 1")
        .cmd(0, "put 0 0 4294967296 1")
        .cmd(0, "put 0 0 60 x")
        .cmd(0, "peek")
        .cmd(0, "peek x")
        .cmd(0, "peek 1 2")
        .cmd(0, "peek -1")
        .cmd(0, "peek 18446744073709551615")
        .cmd(0, "peek 18446744073709551616")
        .cmd(0, "peek-ready x")
        .cmd(0, "peek-delayed x")
        .cmd(0, "peek-buried x")
        .cmd(0, "reserve x")
        .cmd(0, "reserve-with-timeout")
        // beanstalkd 1.12 reads the timeout with strtol and checks only for overflow: "x" is 0.
        .cmd(0, "reserve-with-timeout x")
        .cmd(0, "reserve-job")
        .cmd(0, "reserve-job x")
        .cmd(0, "delete")
        .cmd(0, "delete x")
        .cmd(0, "delete 1 2")
        .cmd(0, "release 1")
        .cmd(0, "release 1 0")
        .cmd(0, "release x 0 0")
        .cmd(0, "bury 1")
        .cmd(0, "bury 1 x")
        .cmd(0, "touch")
        .cmd(0, "touch x")
        .cmd(0, "kick")
        .cmd(0, "kick x")
        .cmd(0, "kick-job")
        .cmd(0, "kick-job x")
        .cmd(0, "stats x")
        .cmd(0, "stats-job")
        .cmd(0, "stats-job x")
        .cmd(0, "stats-tube")
        .cmd(0, "stats-tube -x")
        .cmd(0, "stats-tube nosuch")
        .cmd(0, "list-tubes x")
        .cmd(0, "list-tube-used x")
        .cmd(0, "list-tubes-watched x")
        .cmd(0, "use")
        .cmd(0, "use ")
        .cmd(0, "use -a")
        .cmd(0, "use a b")
        .cmd(0, "use a*b")
        .cmd(0, "use a\u{e4}")
        .cmd(0, "watch")
        .cmd(0, "watch -a")
        .cmd(0, "ignore -a")
        .cmd(0, "ignore default")
        .cmd(0, "pause-tube")
        .cmd(0, "pause-tube default")
        .cmd(0, "pause-tube default x")
        .cmd(0, "pause-tube -x 1")
        .cmd(0, "pause-tube nosuch 1")
        .cmd(0, "PUT 0 0 60 1")
        .cmd(0, "hello")
        .cmd(0, "")
        .send(0, b"peek \x001\r\n")
        // A line longer than beanstalkd's 224-byte buffer: BAD_FORMAT, and the connection goes on.
        .send(0, long_line)
        .cmd(0, "list-tube-used")
        .cmd(0, "list-tubes-watched")
        .cmd(0, "stats")
        .differs("server-stats")
}

fn bodies() -> Session {
    let max: Vec<u8> = (0..65_535u32).map(|i| (i % 256) as u8).collect();
    let too_big = vec![b'x'; 65_536];
    Session::new("bodies: binary, empty, 65535 bytes, too big, CR LF", 2)
        .put(0, 0, 0, 60, b"a\0b\0")
        .put(0, 0, 0, 60, b"\xff\xfe\xc3\x28")
        .put(0, 0, 0, 60, "line1\r\nline2\r\n")
        .put(0, 0, 0, 60, "")
        .put(0, 0, 0, 60, &max)
        .put(0, 0, 0, 60, &too_big)
        .cmd(0, "list-tube-used")
        // The body is not followed by CR LF: EXPECTED_CRLF.
        .send(0, "put 0 0 60 5\r\nhelloXY")
        // Shorter than it says: the last 2 of its 5 bytes are no CR LF, then "\r\n" is an empty command.
        .send(0, "put 0 0 60 3\r\nhello\r\n")
        .read(0)
        // A body in two writes.
        .start_raw(0, "put 0 0 60 10\r\nhello")
        .send(0, "world\r\n")
        .start_raw(0, "put 0 0 60 10\r\nhello\r\n")
        .send(0, "world")
        .cmd(0, "peek 1")
        .cmd(0, "peek 2")
        .cmd(0, "peek 3")
        .cmd(0, "peek 4")
        .cmd(0, "peek 5")
        .cmd(0, "peek 6")
        .cmd(0, "stats-tube default")
        .cmd(1, "reserve")
        .cmd(1, "reserve")
        .cmd(1, "reserve")
        .cmd(1, "reserve")
        .cmd(1, "reserve")
        .cmd(1, "reserve")
        .cmd(1, "reserve-with-timeout 0")
}

fn bury_kick_peek() -> Session {
    Session::new("bury, kick, kick-job, peek-buried, peek-delayed", 2)
        .put(0, 10, 0, 60, "j1")
        .put(0, 20, 0, 60, "j2")
        .put(0, 30, 100, 60, "j3")
        .put(0, 40, 200, 60, "j4")
        .cmd(0, "peek-delayed")
        .cmd(0, "peek-buried")
        .cmd(0, "stats-job 3")
        .differs("job-stats")
        .cmd(1, "reserve")
        .cmd(1, "bury 1 7")
        .cmd(1, "reserve")
        .cmd(1, "bury 2 8")
        .cmd(1, "bury 2 8")
        .cmd(0, "peek-buried")
        .cmd(0, "stats-job 1")
        .differs("job-stats")
        .cmd(0, "stats-tube default")
        // kick takes buried jobs while there are any, delayed ones only then.
        .cmd(0, "kick 1")
        .cmd(0, "peek-buried")
        .cmd(0, "kick 10")
        .cmd(0, "peek-buried")
        .cmd(0, "kick 1")
        .cmd(0, "peek-delayed")
        .cmd(0, "kick-job 4")
        .cmd(0, "kick-job 4")
        .cmd(0, "kick-job 99")
        .cmd(0, "kick 5")
        .cmd(0, "peek-delayed")
        .cmd(0, "peek-ready")
        .cmd(0, "stats-job 1")
        .differs("job-stats")
        .cmd(0, "stats-job 3")
        .differs("job-stats")
        .cmd(1, "reserve")
        .cmd(1, "bury 1 0")
        .cmd(0, "kick-job 1")
        .cmd(0, "stats-job 1")
        .differs("job-stats")
        // peek-* look at the tube in use.
        .cmd(0, "use other")
        .cmd(0, "peek-ready")
        .cmd(0, "kick 10")
        .cmd(0, "stats")
        .differs("server-stats")
}

fn reserve_job() -> Session {
    Session::new("reserve-job", 2)
        .put(0, 0, 100, 60, "delayed")
        .cmd(1, "reserve-job 1")
        .cmd(1, "release 1 0 0")
        .cmd(1, "reserve-job 1")
        .cmd(1, "bury 1 1")
        .cmd(1, "reserve-job 1")
        .cmd(0, "reserve-job 1")
        .cmd(0, "stats-job 1")
        .differs("job-stats")
        .cmd(1, "delete 1")
        .cmd(1, "reserve-job 1")
        .cmd(1, "reserve-job 0")
}

fn release_and_touch() -> Session {
    Session::new("release with priority and delay, touch", 2)
        .put(0, 50, 0, 60, "r1")
        .cmd(1, "reserve")
        .cmd(1, "release 1 10 0")
        .cmd(0, "stats-job 1")
        .differs("job-stats")
        .cmd(1, "reserve")
        .cmd(1, "release 1 20 100")
        .cmd(0, "stats-job 1")
        .differs("job-stats")
        .cmd(0, "peek-delayed")
        .cmd(1, "reserve-with-timeout 0")
        .cmd(0, "kick-job 1")
        .cmd(1, "reserve")
        .cmd(1, "touch 1")
        .cmd(0, "touch 1")
        .cmd(1, "release 2 0 0")
        .cmd(0, "release 1 0 0")
        .cmd(1, "release 1 0 1")
        .cmd(1, "reserve-with-timeout 5")
        .cmd(1, "stats-job 1")
        .differs("job-stats")
        .cmd(1, "delete 1")
        .cmd(1, "touch 1")
}

fn delays() -> Session {
    Session::new("delays", 1)
        .put(0, 0, 1, 60, "late")
        .put(0, 0, 2, 60, "later")
        .cmd(0, "peek-delayed")
        .cmd(0, "peek-ready")
        .cmd(0, "stats-tube default")
        .cmd(0, "reserve-with-timeout 0")
        .cmd(0, "reserve-with-timeout 5")
        .cmd(0, "stats-job 1")
        .differs("job-stats")
        .cmd(0, "reserve-with-timeout 5")
        .cmd(0, "stats-tube default")
}

fn ttr_and_deadline_soon() -> Session {
    Session::new("TTR expiry, DEADLINE_SOON", 2)
        .put(0, 0, 0, 1, "t1")
        // A TTR of 0 is taken as 1 s.
        .put(0, 0, 0, 0, "t0")
        .cmd(0, "stats-job 2")
        .differs("job-stats")
        .cmd(0, "delete 2")
        .cmd(1, "reserve")
        // Holding a job within a second of its deadline, with nothing ready: at once.
        .cmd(1, "reserve")
        // The TTR runs out: the job is ready again, for another connection. beanstalkd 1.12 loses the
        // expiry when its tick lands in the microsecond of the deadline (its clock counts microseconds),
        // until the holder's connection does something: so the holder asks until it sees the job gone.
        .start(0, "reserve-with-timeout 10")
        .until(1, "stats-job 1", &["state: reserved", "reserves: 2\ntimeouts: 1"])
        .differs("job-stats")
        .read(0)
        .cmd(1, "delete 1")
        .cmd(0, "delete 1")
        // Waiting while a reservation comes within a second of its deadline.
        .put(0, 0, 0, 2, "t2")
        .cmd(1, "reserve")
        .cmd(1, "reserve-with-timeout 5")
        .cmd(1, "touch 3")
        .cmd(1, "delete 3")
}

fn connections() -> Session {
    Session::new("connections: reservations, counters, close, quit", 4)
        .put(0, 0, 0, 60, "a")
        .put(0, 0, 0, 60, "b")
        .cmd(1, "reserve")
        .cmd(2, "reserve")
        .cmd(3, "stats")
        .differs("server-stats")
        .cmd(3, "stats-tube default")
        .cmd(2, "delete 1")
        // Closing a connection gives its reservations back.
        .close(1)
        .cmd(2, "reserve-with-timeout 5")
        .cmd(3, "stats-job 1")
        .differs("job-stats")
        .cmd(3, "stats")
        .differs("server-stats")
        .cmd(2, "quit")
        .until(
            3,
            "stats-tube default",
            &["current-jobs-reserved: 0", "current-using: 2\ncurrent-watching: 2"],
        )
        .cmd(3, "stats-job 2")
        .differs("job-stats")
        .cmd(0, "delete 1")
        .cmd(0, "delete 2")
        // A reserve waits for a put on another connection.
        .start(0, "reserve")
        .until(3, "stats-tube default", &["current-waiting: 1"])
        .put(3, 0, 0, 60, "c")
        .read(0)
        .cmd(3, "stats-tube default")
        .cmd(0, "delete 3")
        // A connection that closes while it waits waits no more.
        .start(0, "reserve-with-timeout 60")
        .until(3, "stats-tube default", &["current-waiting: 1"])
        .close(0)
        .until(
            3,
            "stats-tube default",
            &["current-using: 1\ncurrent-watching: 1\ncurrent-waiting: 0"],
        )
        .put(3, 0, 0, 60, "d")
        .cmd(3, "peek-ready")
}

fn tube_names() -> Session {
    let long = "t".repeat(200);
    let too_long = "t".repeat(201);
    let odd = "a+b/c;d$e(f)g_h.i-j";
    Session::new("tube names", 2)
        .cmd(0, &format!("use {odd}"))
        .put(0, 0, 0, 60, "odd")
        .cmd(0, &format!("use {long}"))
        .put(0, 0, 0, 60, "long")
        .cmd(0, &format!("use {too_long}"))
        .cmd(0, "list-tube-used")
        .cmd(1, &format!("watch {odd}"))
        .cmd(1, &format!("watch {long}"))
        .cmd(1, "list-tubes-watched")
        .cmd(0, "list-tubes")
        .cmd(0, &format!("stats-tube {odd}"))
        .cmd(0, &format!("stats-tube {long}"))
        .cmd(1, "reserve")
        .cmd(1, "stats-job 1")
        .differs("job-stats")
        .cmd(1, "delete 1")
        .cmd(1, "reserve")
        .cmd(1, "stats-job 2")
        .differs("job-stats")
        .cmd(1, "delete 2")
        // A tube nobody uses, watches or fills is gone.
        .cmd(0, "use 9lives")
        .cmd(0, "use default")
        .cmd(0, "list-tubes")
        .cmd(0, "stats-tube 9lives")
        .cmd(1, "ignore default")
        .cmd(1, &format!("ignore {odd}"))
        .cmd(1, &format!("ignore {long}"))
        .cmd(0, &format!("stats-tube {long}"))
        .cmd(0, &format!("pause-tube {long} 0"))
}

fn pause_tube() -> Session {
    Session::new("pause-tube", 2)
        .put(0, 0, 0, 60, "p1")
        .cmd(0, "pause-tube default 2")
        .cmd(0, "stats-tube default")
        .differs("tube-pause")
        .cmd(0, "peek-ready")
        .cmd(1, "reserve-with-timeout 0")
        .cmd(1, "reserve-with-timeout 5")
        .cmd(1, "delete 1")
        .put(0, 0, 0, 60, "p2")
        .cmd(0, "pause-tube default 100")
        .cmd(1, "reserve-with-timeout 0")
        // A pause of 0 ends the pause.
        .cmd(0, "pause-tube default 0")
        .cmd(1, "reserve-with-timeout 1")
        .cmd(0, "stats-tube default")
        .differs("tube-pause")
        .cmd(0, "pause-tube nosuch 1")
}

/// `time-left` right after a reserve, a touch, a release with a delay and a put with a delay, and
/// `pause-time-left` right after a pause: beanstalkd rounds the time left down, so a TTR of 60 s shows 59
/// at once. Probed again and again, since a dq that
/// rounds otherwise shows one more only when it answers within the millisecond of the reservation.
fn time_left() -> Session {
    let probes = (0..6).fold(
        Session::new("time-left right after reserve, touch, release and put", 2).put(0, 0, 0, 60, "t1"),
        |s, _| {
            s.cmd(1, "reserve")
                .cmd(1, "stats-job 1")
                .differs("job-age")
                .cmd(1, "touch 1")
                .cmd(1, "stats-job 1")
                .differs("job-age")
                .cmd(1, "release 1 0 100")
                .cmd(1, "stats-job 1")
                .differs("job-age")
                .cmd(0, "kick-job 1")
                .cmd(1, "reserve-job 1")
                .cmd(1, "stats-job 1")
                .differs("job-age")
                .cmd(1, "release 1 0 0")
                .cmd(1, "stats-job 1")
                .differs("job-age")
        },
    );
    (0..6)
        .fold(probes, |s, i| {
            let n = i + 2;
            s.put(0, 0, 30, 60, "delayed")
                .cmd(0, &format!("stats-job {n}"))
                .differs("job-age")
        })
        .put(0, 0, 0, 3600, "t8")
        .cmd(1, "reserve-job 8")
        .cmd(1, "stats-job 8")
        .differs("job-age")
        .cmd(1, "bury 8 0")
        .cmd(1, "stats-job 8")
        .differs("job-age")
        // pause-time-left is cut the same way.
        .cmd(0, "pause-tube default 100")
        .cmd(0, "stats-tube default")
        .cmd(0, "pause-tube default 10")
        .cmd(0, "stats-tube default")
        .cmd(0, "pause-tube default 3600")
        .cmd(0, "stats-tube default")
}

/// greenstalk's own `test_initialize_watch_multiple` (tests/test_greenstalk.py), as its client sends it:
/// beanstalkd takes the job of the lowest number among the first jobs of the watched tubes when their
/// priorities are equal, whatever the tubes' partitions.
fn watch_multiple_as_greenstalk() -> Session {
    Session::new(
        "reserve over several tubes: greenstalk's test_initialize_watch_multiple",
        1,
    )
    .on_partitions(ACROSS_PARTITIONS)
    .cmd(0, "watch static")
    .cmd(0, "watch dynamic")
    .cmd(0, "ignore default")
    .cmd(0, "use static")
    .put(0, PRI, 0, 60, "haskell")
    .put(0, PRI, 0, 60, "rust")
    .cmd(0, "use dynamic")
    .put(0, PRI, 0, 60, "python")
    .cmd(0, "reserve-with-timeout 0")
    .cmd(0, "reserve-with-timeout 0")
    .cmd(0, "reserve-with-timeout 0")
    .cmd(0, "reserve-with-timeout 0")
}

/// Priorities first, then numbers, across tubes in different partitions; plain `reserve` (which waits in
/// line with the server's other reserves) and `reserve-with-timeout 0` (one look) alike.
fn priorities_across_partitions() -> Session {
    Session::new("reserve over tubes in several partitions: priorities, then numbers", 2)
        .on_partitions(ACROSS_PARTITIONS)
        .cmd(0, "use static")
        .put(0, 5, 0, 60, "static 5, first")
        .cmd(0, "use dynamic")
        .put(0, 5, 0, 60, "dynamic 5, second")
        .cmd(0, "use static")
        .put(0, 10, 0, 60, "static 10, third")
        .cmd(0, "use dynamic")
        .put(0, 10, 0, 60, "dynamic 10, fourth")
        .put(0, 0, 0, 60, "dynamic 0, fifth")
        .cmd(0, "use static")
        .put(0, 1, 0, 60, "static 1, sixth")
        .cmd(1, "watch dynamic")
        .cmd(1, "watch static")
        .cmd(1, "ignore default")
        .cmd(1, "reserve")
        .cmd(1, "reserve-with-timeout 0")
        .cmd(1, "reserve")
        .cmd(1, "reserve-with-timeout 0")
        .cmd(1, "reserve")
        .cmd(1, "reserve-with-timeout 0")
        .cmd(1, "reserve-with-timeout 0")
}

/// Equal priorities over three tubes in three partitions: jobs come in the order they were put, whatever
/// the order of the watches; a job given back keeps its place (its number).
fn put_order_across_partitions() -> Session {
    Session::new(
        "reserve over tubes in several partitions: equal priorities, in put order",
        3,
    )
    .on_partitions(ACROSS_PARTITIONS)
    .cmd(0, "use mail")
    .put(0, PRI, 0, 60, "mail 1")
    .cmd(0, "use dynamic")
    .put(0, PRI, 0, 60, "dynamic 2")
    .cmd(0, "use static")
    .put(0, PRI, 0, 60, "static 3")
    .put(0, PRI, 0, 60, "static 4")
    .cmd(0, "use mail")
    .put(0, PRI, 0, 60, "mail 5")
    .cmd(0, "use dynamic")
    .put(0, PRI, 0, 60, "dynamic 6")
    .cmd(1, "watch dynamic")
    .cmd(1, "watch static")
    .cmd(1, "watch mail")
    .cmd(1, "ignore default")
    .cmd(2, "watch static")
    .cmd(2, "watch mail")
    .cmd(2, "watch dynamic")
    .cmd(2, "ignore default")
    .cmd(1, "reserve")
    .cmd(2, "reserve-with-timeout 0")
    .cmd(1, "reserve")
    // Connection 1 closes: its jobs are back, in their places (their numbers).
    .close(1)
    .until(
        2,
        "stats-tube mail",
        &["current-jobs-reserved: 0", "current-watching: 1"],
    )
    .until(
        2,
        "stats-tube static",
        &["current-jobs-reserved: 0", "current-watching: 1"],
    )
    .cmd(2, "reserve")
    .cmd(2, "reserve-with-timeout 0")
    .cmd(2, "reserve")
    .cmd(2, "reserve-with-timeout 0")
    .cmd(2, "reserve-with-timeout 0")
    .cmd(2, "reserve-with-timeout 0")
}
