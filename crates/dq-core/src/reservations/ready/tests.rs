//! The ready index: priority, clears, the line of waiters and claims.

use super::*;

fn t(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn priority_order_then_clear_unless_marked_since() {
    let ix = ReadyIndex::default();
    ix.set_listening(true);
    assert_eq!(ix.unsynced(&t(&["a", "b"])), t(&["a", "b"]));
    let e = ix.epoch();
    ix.synced("a", e, &[3]);
    ix.synced("b", e, &[5, 3]);
    assert!(ix.unsynced(&t(&["a", "b"])).is_empty());
    let c = ix.candidates(&t(&["a", "b"]), &[], 10).list;
    assert_eq!(
        c,
        [(3, false), (5, false)],
        "a's partitions first, then b's not yet listed"
    );
    // A reserve begins; a wake-up for b in 5 arrives before its empty answer: 5 stays for b.
    let before = ix.epoch();
    ix.mark("b", 5);
    ix.clear(&t(&["a", "b"]), 5, before);
    ix.clear(&t(&["a", "b"]), 3, before);
    assert_eq!(ix.candidates(&t(&["a", "b"]), &[], 10).list, [(5, false)]);
    ix.resync();
    assert_eq!(ix.unsynced(&t(&["a", "b"])), t(&["a", "b"]));
}

#[test]
fn hinted_partitions_are_asked_first_most_urgent_first_until_asked() {
    let ix = ReadyIndex::default();
    let topics = t(&["a"]);
    for p in 0..16 {
        ix.mark("a", p);
    }
    ix.hint("a", 9, 500);
    ix.hint("a", 4, 10);
    ix.hint("a", 9, 700); // a less urgent one keeps 9's best
    let look = ix.candidates(&topics, &[], 16);
    let list: Vec<u16> = look.list.iter().map(|&(p, _)| p).collect();
    assert_eq!(&list[..2], [4, 9], "{list:?}");
    assert_eq!(look.urgent, 2, "the two hinted ones head the list");
    assert_eq!(list.len(), 16, "every partition once");
    assert_eq!(ix.hinted("a"), [(4, 10), (9, 500)]);
    // A reserve asks 4: its hint goes; a hint that arrives during an ask of 9 stays.
    ix.claim(&topics, 4).settle(Tried::Full);
    let claim = ix.claim(&topics, 9);
    ix.hint("a", 9, 3);
    claim.settle(Tried::Full);
    assert_eq!(ix.hinted("a"), [(9, 3)]);
    // A failed ask keeps it.
    ix.claim(&topics, 9).settle(Tried::Failed);
    assert_eq!(ix.hinted("a"), [(9, 3)]);
    ix.claim(&topics, 9).settle(Tried::Emptied);
    assert!(ix.hinted("a").is_empty());
}

#[test]
fn a_mark_wakes_one_waiter_and_a_reserve_that_leaves_work_passes_it_on() {
    let ix = ReadyIndex::default();
    let topics = t(&["a"]);
    let (mut w1, mut w2, mut w3) = (ix.waiter(&topics, 1), ix.waiter(&topics, 1), ix.waiter(&topics, 1));
    ix.mark("a", 7);
    assert!(Waiter::woken(&mut w1), "the first in line is woken");
    assert!(!Waiter::woken(&mut w2) && !Waiter::woken(&mut w3), "and nobody else");
    // w1's reserve took a job and left partition 7 listed: the next waiter looks too.
    ix.pass_on(&topics);
    assert!(Waiter::woken(&mut w2));
    assert!(!Waiter::woken(&mut w3));
    // w2's reserve found 7 empty: nothing listed, nobody else woken.
    ix.clear(&topics, 7, ix.epoch());
    ix.pass_on(&topics);
    assert!(!Waiter::woken(&mut w3));
}

#[test]
fn a_partition_being_asked_comes_last_and_its_claim_wakes_the_next_waiter_when_work_is_left() {
    let ix = ReadyIndex::default();
    let topics = t(&["a"]);
    ix.mark("a", 1);
    ix.mark("a", 2);
    // Nobody waited: the next waiter takes the wake-up kept for it.
    assert!(Waiter::woken(&mut ix.waiter(&topics, 1)));
    let claim = ix.claim(&topics, 1);
    assert_eq!(
        ix.candidates(&topics, &[], 10).list.last(),
        Some(&(1, true)),
        "the claimed one last"
    );
    let mut w = ix.waiter(&topics, 1);
    assert!(!Waiter::woken(&mut w));
    // The claim's ask took all it wanted: partition 1 may hold more.
    claim.settle(Tried::Full);
    assert!(Waiter::woken(&mut w));
    let mut w = ix.waiter(&topics, 1);
    ix.claim(&topics, 2).settle(Tried::Emptied);
    assert!(!Waiter::woken(&mut w), "an emptied partition wakes nobody");
    assert_eq!(ix.candidates(&topics, &[], 10).list, [(1, false)]);
    // A wake-up while an ask runs keeps the partition listed, and its settling wakes a waiter.
    let claim = ix.claim(&topics, 1);
    ix.mark("a", 1);
    let mut w2 = ix.waiter(&topics, 1);
    claim.settle(Tried::Emptied);
    assert!(Waiter::woken(&mut w) && Waiter::woken(&mut w2));
    // A failed ask wakes nobody (another waiter would fail the same way) and keeps it listed.
    let mut w = ix.waiter(&topics, 1);
    ix.claim(&topics, 1).settle(Tried::Failed);
    assert!(!Waiter::woken(&mut w));
    // A cancelled ask (dropped unsettled) wakes the next waiter: nothing is known.
    drop(ix.claim(&topics, 1));
    assert!(Waiter::woken(&mut w));
}

#[test]
fn a_waiter_that_goes_away_after_its_wake_up_hands_it_on() {
    let ix = ReadyIndex::default();
    let topics = t(&["a", "b"]);
    let w1 = ix.waiter(&topics, 1);
    let mut w2 = ix.waiter(&t(&["b"]), 1);
    // w1 is reserving when b's wake-up reaches it; it returns with jobs of a and drops its place.
    ix.mark("b", 1);
    drop(w1);
    assert!(Waiter::woken(&mut w2), "the wake-up went on to the next waiter of b");
}

#[test]
fn a_wake_up_with_nobody_waiting_is_kept_for_the_next_waiter() {
    let ix = ReadyIndex::default();
    ix.mark("a", 2);
    let mut w = ix.waiter(&t(&["a"]), 1);
    assert!(Waiter::woken(&mut w));
}

#[test]
fn a_resync_wakes_every_waiter() {
    let ix = ReadyIndex::default();
    let mut ws: Vec<Waiter> = (0..3).map(|_| ix.waiter(&t(&["a"]), 1)).collect();
    ix.resync();
    assert!(ws.iter_mut().all(Waiter::woken));
}

#[test]
fn without_a_listener_every_reserve_reads_the_counts() {
    let ix = ReadyIndex::default();
    ix.synced("a", 0, &[1]);
    assert_eq!(ix.unsynced(&t(&["a"])), t(&["a"]));
}

#[test]
fn a_look_gives_at_most_the_limit_and_says_whether_more_are_listed() {
    let ix = ReadyIndex::default();
    let topics = t(&["a"]);
    for p in 0..20 {
        ix.mark("a", p);
    }
    let look = ix.candidates(&topics, &[], 5);
    assert_eq!(look.list.len(), 5);
    assert!(look.more);
    let asked: Vec<u16> = look.list.iter().map(|(p, _)| *p).collect();
    let all = ix.candidates(&topics, &asked, 100);
    assert_eq!(all.list.len(), 15, "the ones asked are left out");
    assert!(!all.list.iter().any(|(p, _)| asked.contains(p)));
    assert!(!all.more);
    // Partitions being asked come after the free ones, however many: a reserve that will not wait asks
    // them when it found nothing else, and must see every one.
    let _claims: Vec<_> = (0..18).map(|p| ix.claim(&topics, p)).collect();
    let look = ix.candidates(&topics, &[], 5);
    let free: Vec<u16> = look.list.iter().filter(|(_, c)| !c).map(|(p, _)| *p).collect();
    let mut free_sorted = free.clone();
    free_sorted.sort();
    assert_eq!(free_sorted, [18, 19]);
    assert_eq!(look.list.len(), 20, "{look:?}");
    assert!(!look.more);
}

#[test]
fn entries_nobody_reserves_or_waits_on_are_swept_and_read_again_later() {
    // Every reserve sweeps (a zero interval): an entry goes at the second sweep without a use.
    let ix = ReadyIndex::with_sweep(std::time::Duration::ZERO);
    ix.set_listening(true);
    for i in 0..100 {
        let topic = t(&[&format!("once{i}")]);
        ix.unsynced(&topic);
        ix.synced(&topic[0], ix.epoch(), &[1]);
    }
    // Wake-ups for topics this process never reserves make entries too.
    ix.mark("elsewhere", 4);
    let held = t(&["held"]);
    let waiter = ix.waiter(&held, 1);
    let busy = t(&["busy"]);
    ix.unsynced(&busy);
    ix.synced("busy", ix.epoch(), &[2]);
    ix.unsynced(&busy);
    ix.unsynced(&busy);
    assert_eq!(
        ix.len(),
        2,
        "only the topic reserved meanwhile and the one waited on stay"
    );
    assert!(ix.unsynced(&busy).is_empty(), "busy keeps what it knows");
    drop(waiter);
    ix.unsynced(&busy);
    ix.unsynced(&busy);
    assert_eq!(ix.len(), 1);
    // A swept topic is read from the counts again, as one never followed.
    assert_eq!(ix.unsynced(&t(&["once7"])), t(&["once7"]));
}

#[test]
fn a_partition_is_left_only_to_a_claim_for_the_same_topic() {
    // Found by the soak test: dq-consumer's worker of topic b skipped partition 1 while the worker of
    // topic a was asking it, and a's claim woke only a's waiters: b's jobs there waited for ever.
    let ix = ReadyIndex::default();
    ix.mark("a", 1);
    ix.mark("b", 1);
    let (a, b) = (t(&["a"]), t(&["b"]));
    let claim = ix.claim(&a, 1);
    assert_eq!(
        ix.candidates(&b, &[], 10).list,
        [(1, false)],
        "a's claim does not cover b"
    );
    assert_eq!(ix.candidates(&a, &[], 10).list, [(1, true)], "but it covers a");
    claim.settle(Tried::Emptied);
    assert_eq!(
        ix.candidates(&b, &[], 10).list,
        [(1, false)],
        "a's empty answer does not clear b"
    );
    assert!(ix.candidates(&a, &[], 10).list.is_empty());
}

/// Reserves arriving together on a topic not followed yet read its counts once: the first reads, the
/// others wait for that read; a read abandoned (the reserve cancelled) lets the waiters go on too.
#[tokio::test]
async fn a_burst_of_reserves_reads_a_topic_s_counts_once() {
    let ix = ReadyIndex::default();
    ix.set_listening(true);
    let mut first = ix.sync_turns(ix.unsynced(&t(&["a", "b"])));
    assert_eq!(first.mine, t(&["a", "b"]));
    let mut second = ix.sync_turns(ix.unsynced(&t(&["b", "c"])));
    assert_eq!(second.mine, t(&["c"]), "b is being read already");
    // The second waits for b until the first's read ends.
    let mut waiting = Box::pin(second.wait_for_others());
    let cx = &mut std::task::Context::from_waker(std::task::Waker::noop());
    assert!(waiting.as_mut().poll(cx).is_pending());
    ix.synced("b", ix.epoch(), &[1]);
    first.wait_for_others().await;
    assert!(waiting.as_mut().poll(cx).is_ready());
    drop(waiting);
    drop(second);
    // Cancelled half-way: dropped with its read unfinished, the next reserve reads for itself, and
    // nobody waits for ever.
    let abandoned = ix.sync_turns(ix.unsynced(&t(&["d"])));
    assert_eq!(abandoned.mine, t(&["d"]));
    let mut after = ix.sync_turns(ix.unsynced(&t(&["d"])));
    assert!(after.mine.is_empty());
    let mut waiting = Box::pin(after.wait_for_others());
    assert!(waiting.as_mut().poll(cx).is_pending());
    drop(abandoned);
    assert!(waiting.as_mut().poll(cx).is_ready());
    drop(waiting);
    assert_eq!(ix.sync_turns(ix.unsynced(&t(&["d"]))).mine, t(&["d"]));
}

fn handed_job(id: &str, topic: &str) -> crate::job::Reservation {
    crate::job::Reservation {
        id: id.into(),
        topic: topic.into(),
        body: serde_json::value::RawValue::from_string("1".into()).unwrap(),
        attempt: 1,
        receipt: format!("r.{id}"),
        deadline: 0,
        run_at: 0,
        flow_key: None,
        traceparent: None,
        tracestate: None,
        ttr_ms: 30_000,
    }
}

fn ids(jobs: &[crate::job::Reservation]) -> Vec<&str> {
    jobs.iter().map(|j| j.id.as_str()).collect()
}

#[tokio::test]
async fn a_waiting_long_poll_is_counted_only_while_it_waits_and_told_once() {
    let ix = ReadyIndex::default();
    let mut w = ix.waiter(&t(&["a", "b"]), 3);
    assert!(ix.to_tell().is_empty(), "in line, but not waiting yet");
    let waiting = tokio::spawn(async move { w.wait().await });
    tokio::task::yield_now().await;
    eventually_told(&ix, &[("a", 3), ("b", 3)]).await;
    assert!(ix.to_tell().is_empty(), "told already");
    waiting.abort();
    let _ = waiting.await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let mut told = ix.to_tell();
    told.sort();
    assert_eq!(told, [("a".to_string(), 0), ("b".to_string(), 0)], "gone: told 0");
    ix.handed(vec![handed_job("x", "a")]);
    assert!(ix.untell_all().is_empty(), "0 was told already");
}

async fn eventually_told(ix: &ReadyIndex, want: &[(&str, u32)]) {
    for _ in 0..100 {
        let mut told = ix.to_tell();
        if !told.is_empty() {
            told.sort();
            let want: Vec<(String, u32)> = want.iter().map(|(t, n)| (t.to_string(), *n)).collect();
            assert_eq!(told, want);
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    panic!("never told");
}

#[test]
fn handed_jobs_are_taken_in_topic_priority_order_and_wake_a_waiter_each() {
    let ix = ReadyIndex::default();
    let mut w1 = ix.waiter(&t(&["b"]), 1);
    let mut w2 = ix.waiter(&t(&["b"]), 1);
    ix.handed(vec![handed_job("b1", "b"), handed_job("b2", "b")]);
    ix.handed(vec![handed_job("a1", "a")]);
    assert!(w1.woken() && w2.woken(), "one waiter woken per job");
    assert_eq!(ids(&ix.take_handed(&t(&["a", "b"]), 2)), ["a1", "b1"]);
    assert!(ix.take_handed(&t(&["a"]), 5).is_empty());
    assert_eq!(ids(&ix.take_handed(&t(&["a", "b"]), 5)), ["b2"]);
}

#[test]
fn handed_jobs_nobody_took_are_given_back_when_stale_or_all_at_the_end() {
    let ix = ReadyIndex::default();
    ix.handed(vec![handed_job("a1", "a")]);
    assert!(ix.stale_handed(false).is_empty(), "just came");
    ix.handed(vec![handed_job("b1", "b")]);
    let mut all = ids(&ix.stale_handed(true))
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    all.sort();
    assert_eq!(all, ["a1", "b1"]);
    assert!(ix.take_handed(&t(&["a", "b"]), 5).is_empty());
}

#[test]
fn an_entry_with_handed_jobs_outlives_the_sweep() {
    let ix = ReadyIndex::with_sweep(std::time::Duration::ZERO);
    ix.handed(vec![handed_job("a1", "a")]);
    ix.unsynced(&t(&["z"]));
    ix.unsynced(&t(&["z"]));
    ix.unsynced(&t(&["z"]));
    assert_eq!(ids(&ix.take_handed(&t(&["a"]), 1)), ["a1"]);
}
