//! Many reservers racing over many partitions drain a topic completely: the ready index never drops a
//! partition that still holds jobs, and a reserve that will not wait asks every partition with jobs,
//! those other reserves are asking included.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dq_core::{PushRequest, Queue, Settings};
use dq_harness::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_reservers_drain_every_job() {
    let redis = RedisServer::start();
    let mut s = Settings::default();
    s.redis.urls = vec![redis.url()];
    s.redis.partitions = Some(256);
    let q = Queue::connect(&s).await.unwrap();
    // As in a process whose listener is subscribed: reserves go by the index, fed by this process's
    // own pushes (no wake-up comes here).
    q.reservations().ready_index().set_listening(true);
    for round in 0..5 {
        let topic = format!("race{round}");
        let n = 2000;
        // In groups of 50, as batch pushes come: each group's jobs get ids in one partition, so some 40
        // partitions hold 50 jobs each, and 64 reservers meet in them at the end.
        for chunk in 0..n / 50 {
            let jobs = (0..50)
                .map(|i| {
                    let body = serde_json::json!({"topic": topic, "body": chunk * 50 + i});
                    q.producer()
                        .validate(serde_json::from_value::<PushRequest>(body).unwrap())
                        .unwrap()
                })
                .collect();
            for r in q.producer().push_many(jobs).await {
                r.unwrap();
            }
        }
        let taken = Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = (0..64)
            .map(|_| {
                let (q, taken, topic) = (q.clone(), taken.clone(), topic.clone());
                tokio::spawn(async move {
                    loop {
                        let got = q.reservations().reserve(std::slice::from_ref(&topic), 1).await.unwrap();
                        if got.is_empty() {
                            return;
                        }
                        for r in got {
                            q.reservations().ack(&r.id, &r.receipt).await.unwrap();
                            taken.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.await.unwrap();
        }
        // A worker stops at its first empty answer; the others may still be busy then, so count what
        // is left in Redis rather than what each worker saw.
        let left: usize = q
            .reservations()
            .reserve(std::slice::from_ref(&topic), 100)
            .await
            .unwrap()
            .len();
        assert_eq!((taken.load(Ordering::Relaxed), left), (n, 0), "round {round}");
    }
}
