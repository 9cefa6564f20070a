//! The etcd backend against a real three-member etcd (DESIGN §6).
//!
//! Each test starts its own cluster; a file-wide lock runs them one at a time even
//! under plain `cargo test` (two cores; the thread-count test also needs no other
//! test starting threads meanwhile).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Barrier, Mutex, MutexGuard};
use std::time::Duration;

use tenure::clock;
use tenure::core::model::{
    AcquireOutcome, AcquiredRecord, ClaimOutcome, ConfirmEpoch, HistoryEntry, Initialize,
    MemberInfo, ReleaseMarker, RenewalOutcome, RollbackSeen,
};
use tenure::core::time::Instant;
use tenure::dcs::{AcquireBasis, Etcd, WatchEvent, encode_member};
use tenure::testbed::etcd::EtcdCluster;
use tenure::testbed::scratch_dir;
use tokio::runtime::Runtime;

static SERIAL: Mutex<()> = Mutex::new(());

struct Bed {
    _serial: MutexGuard<'static, ()>,
    dir: PathBuf,
    cluster: EtcdCluster,
    rt: Runtime,
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.cluster.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime")
}

fn bed(tag: &str) -> Bed {
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = scratch_dir(tag).expect("scratch dir");
    let cluster = EtcdCluster::start(&dir, 3).expect("etcd cluster");
    Bed {
        _serial: serial,
        dir,
        cluster,
        rt: runtime(),
    }
}

fn in_ms(ms: u64) -> Instant {
    clock::now().add(Duration::from_millis(ms))
}

const PREFIX: &str = "/service/t1/";

impl Bed {
    fn client(&self, prefix: &str) -> Etcd {
        Etcd::connect(&self.rt, &self.cluster.endpoints(), prefix, in_ms(2000)).expect("connect")
    }

    /// A plain etcd-client for writing behind the backend's back.
    fn raw<T>(
        &self,
        f: impl AsyncFnOnce(&mut etcd_client::Client) -> Result<T, etcd_client::Error>,
    ) -> T {
        let eps = self.cluster.endpoints();
        self.rt
            .block_on(async move {
                let mut c = etcd_client::Client::connect(eps, None).await?;
                tokio::time::timeout(Duration::from_secs(5), f(&mut c))
                    .await
                    .expect("raw etcd call in time")
            })
            .expect("raw etcd call")
    }
}

fn won(o: AcquireOutcome) -> (i64, u32, i64) {
    match o {
        AcquireOutcome::Won {
            lease,
            granted_ttl,
            epoch,
            ..
        } => (lease, granted_ttl, epoch),
        other => panic!("expected Won, got {other:?}"),
    }
}

#[test]
fn acquire_race_has_one_winner_and_renewal_counts() {
    let b = bed("dcs-race");
    let eps = b.cluster.endpoints();
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = ["pg1", "pg2"]
        .into_iter()
        .map(|me| {
            let eps = eps.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let rt = runtime();
                let mut e = Etcd::connect(&rt, &eps, PREFIX, in_ms(2000)).expect("connect");
                // Warm the connection so both txns really race.
                e.read_cluster(&rt, in_ms(2000)).expect("read");
                barrier.wait();
                (me, e.acquire_unbound(&rt, me, 5, in_ms(2000)))
            })
        })
        .collect();
    let results: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().expect("thread"))
        .collect();
    let winners: Vec<_> = results
        .iter()
        .filter(|(_, o)| matches!(o, AcquireOutcome::Won { .. }))
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    assert!(
        results.iter().any(|(_, o)| *o == AcquireOutcome::Lost),
        "{results:?}"
    );
    let (me, outcome) = winners[0].clone();
    let (lease, granted_ttl, epoch) = won(outcome);
    assert!(granted_ttl >= 5);

    let mut e = b.client(PREFIX);
    let view = e.read_cluster(&b.rt, in_ms(2000)).expect("read");
    let leader = view.leader.expect("leader key");
    assert_eq!(leader.name, me);
    assert_eq!(leader.epoch, epoch, "epoch is the key's create_revision");
    assert_eq!(leader.lease, lease);

    let r = e.confirmed_renew(&b.rt, lease, epoch, me, in_ms(2000));
    assert!(
        matches!(r.outcome, RenewalOutcome::Counted { ttl } if ttl > 0),
        "{r:?}"
    );
    // The loser's name, or a wrong epoch, with the same live lease: not counted.
    let other = if me == "pg1" { "pg2" } else { "pg1" };
    let r = e.confirmed_renew(&b.rt, lease, epoch, other, in_ms(2000));
    assert!(
        matches!(r.outcome, RenewalOutcome::KeyLost { found: Some(_) }),
        "{r:?}"
    );
    let r = e.confirmed_renew(&b.rt, lease, epoch + 1, me, in_ms(2000));
    assert!(matches!(r.outcome, RenewalOutcome::KeyLost { .. }), "{r:?}");
}

/// Fault test 8 (issue 4): several candidates race for a vacant key in the same
/// instant, many times over. Each round, four contenders (own thread, own etcd
/// client, own runtime) are released together by a barrier right after the
/// previous holder's lease was revoked (or, every `EXPIRY_EVERY`th round, after it
/// expired and etcd deleted the key) and each runs the real acquire path (grant +
/// the create-if-absent txn, a loser revoking its lease). Exactly one `Won` per
/// round, the others `Lost`; the key names the winner with the winner's lease; no
/// lease but the winner's survives the round; the epoch grows every round.
#[test]
fn acquire_race_many_rounds_one_winner_each() {
    const ROUNDS: usize = 200;
    const CONTENDERS: usize = 4;
    const EXPIRY_EVERY: usize = 40;
    const SCOPE: &str = "/service/race8/";
    // TTL 5 when the coordinator revokes; 2 s when the lease is left to expire, so
    // an expiry round costs ~2.5 s, not 5 (and the winner's lease still lives
    // when the round's checks run).
    let ttl_of = |round: usize| {
        if round.is_multiple_of(EXPIRY_EVERY) {
            2
        } else {
            5
        }
    };
    let b = bed("dcs-race8");
    let eps = b.cluster.endpoints();
    let start = Arc::new(Barrier::new(CONTENDERS + 1));
    let (tx, rx) = std::sync::mpsc::channel();
    let t_begin = std::time::Instant::now();
    let handles: Vec<_> = (0..CONTENDERS)
        .map(|k| {
            let (eps, start, tx) = (eps.clone(), start.clone(), tx.clone());
            std::thread::spawn(move || {
                let me = format!("pg{}", k + 1);
                let rt = runtime();
                let mut e = Etcd::connect(&rt, &eps, SCOPE, in_ms(2000)).expect("connect");
                // Warm the connections so the txns, not the handshakes, race.
                e.read_cluster(&rt, in_ms(2000)).expect("read");
                for round in 0..ROUNDS {
                    start.wait();
                    let out = e.acquire_unbound(&rt, &me, ttl_of(round), in_ms(2000));
                    if tx.send((round, me.clone(), out)).is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    drop(tx);

    let mut coord = b.client(SCOPE);
    // One plain client for listing leases (the backend has no such call).
    let mut lister =
        b.rt.block_on(etcd_client::Client::connect(eps.clone(), None))
            .expect("connect a plain client");
    let mut last_epoch = 0i64;
    let mut prev: Option<(i64, String)> = None;
    let mut wins: std::collections::BTreeMap<String, usize> = Default::default();
    let mut expiry_rounds = 0;
    for round in 0..ROUNDS {
        // Vacate the key: revoke the holder's lease, or let it expire.
        if let Some((lease, holder)) = prev.take() {
            if ttl_of(round - 1) == 2 {
                expiry_rounds += 1;
                let gone = tenure::testbed::wait_for(
                    Duration::from_secs(10),
                    Duration::from_millis(5),
                    || {
                        let v = coord.read_cluster(&b.rt, in_ms(2000)).ok()?;
                        v.leader.is_none().then_some(())
                    },
                );
                assert!(
                    gone.is_some(),
                    "{holder}'s key did not expire (round {round})"
                );
                let poll = coord.lease_ttl(&b.rt, lease, in_ms(2000)).expect("ttl");
                assert_eq!(poll.ttl, None, "expired lease still known: {poll:?}");
            } else {
                coord.revoke(&b.rt, lease, in_ms(2000)).expect("revoke");
            }
        }
        start.wait();
        let mut results: Vec<(String, AcquireOutcome)> = (0..CONTENDERS)
            .map(|_| {
                let (r, me, out) = rx
                    .recv_timeout(Duration::from_secs(10))
                    .expect("every contender answers");
                assert_eq!(r, round);
                (me, out)
            })
            .collect();
        results.sort_by(|a, b| a.0.cmp(&b.0));
        let winners: Vec<_> = results
            .iter()
            .filter(|(_, o)| matches!(o, AcquireOutcome::Won { .. }))
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        assert_eq!(
            results
                .iter()
                .filter(|(_, o)| *o == AcquireOutcome::Lost)
                .count(),
            CONTENDERS - 1,
            "round {round}: every other contender lost: {results:?}"
        );
        let (me, outcome) = winners[0].clone();
        let (lease, _, epoch) = won(outcome);
        assert!(
            epoch > last_epoch,
            "round {round}: epoch {epoch} after {last_epoch}"
        );
        last_epoch = epoch;
        let view = coord.read_cluster(&b.rt, in_ms(2000)).expect("read");
        let key = view.leader.expect("leader key after a win");
        assert_eq!(
            (key.name.as_str(), key.epoch, key.lease),
            (me.as_str(), epoch, lease),
            "round {round}"
        );
        // The losers revoked their leases: the winner's is the only one left (a
        // member may apply the revokes a moment after the losers returned).
        let mut left: Vec<i64> = Vec::new();
        let only_winner =
            tenure::testbed::wait_for(Duration::from_secs(5), Duration::from_millis(5), || {
                let listed = b.rt.block_on(async {
                    tokio::time::timeout(Duration::from_secs(2), lister.leases()).await
                });
                left = match listed {
                    Ok(Ok(r)) => r.leases().iter().map(|l| l.id()).collect(),
                    _ => return None,
                };
                (left == [lease]).then_some(())
            });
        assert!(
            only_winner.is_some(),
            "round {round}: leases alive {left:x?}, only the winner's {lease:x} may be"
        );
        *wins.entry(me.clone()).or_default() += 1;
        prev = Some((lease, me));
    }
    for h in handles {
        h.join().expect("contender thread");
    }
    println!(
        "acquire race: {ROUNDS} rounds x {CONTENDERS} contenders ({expiry_rounds} after an expiry) \
         in {:.1} s; wins per contender {wins:?}; last epoch {last_epoch}",
        t_begin.elapsed().as_secs_f64()
    );
}

#[test]
fn renewal_sees_key_deleted_behind_its_back_then_lease_gone() {
    let b = bed("dcs-renew");
    let mut e = b.client(PREFIX);
    let (lease, _, epoch) = won(e.acquire_unbound(&b.rt, "pg1", 5, in_ms(2000)));
    let before = clock::now();
    let r = e.confirmed_renew(&b.rt, lease, epoch, "pg1", in_ms(2000));
    assert!(matches!(r.outcome, RenewalOutcome::Counted { .. }), "{r:?}");
    assert!(r.sent_at >= before);

    // An operator's `etcdctl del`: the lease lives on, the key is gone.
    let key = format!("{PREFIX}leader");
    b.raw(async move |c| c.delete(key, None).await);
    let r = e.confirmed_renew(&b.rt, lease, epoch, "pg1", in_ms(2000));
    assert_eq!(r.outcome, RenewalOutcome::KeyLost { found: None });
    let poll = e.lease_ttl(&b.rt, lease, in_ms(2000)).expect("lease ttl");
    assert!(poll.ttl.is_some_and(|t| t > 0), "{poll:?}");
    assert!(!poll.has_keys);

    e.revoke(&b.rt, lease, in_ms(2000)).expect("revoke");
    let r = e.confirmed_renew(&b.rt, lease, epoch, "pg1", in_ms(2000));
    assert_eq!(r.outcome, RenewalOutcome::LeaseGone);
    let err = e
        .keep_alive_once(&b.rt, lease, in_ms(2000))
        .expect_err("gone");
    assert!(err.0.contains("lease not found"), "{err}");
    let poll = e.lease_ttl(&b.rt, lease, in_ms(2000)).expect("lease ttl");
    assert_eq!(poll.ttl, None, "{poll:?}");
    // Revoking twice is fine: the lease is gone either way.
    e.revoke(&b.rt, lease, in_ms(2000)).expect("second revoke");

    // A fresh lease: keepalive answers its TTL, lease_ttl sees the key on it.
    let (l2, ttl2) = e.grant(&b.rt, 5, in_ms(2000)).expect("grant");
    assert_eq!(
        e.keep_alive_once(&b.rt, l2, in_ms(2000)).expect("ka"),
        i64::from(ttl2)
    );
    e.put_member(&b.rt, "pg1", "{}", l2, in_ms(2000))
        .expect("put member");
    let poll = e.lease_ttl(&b.rt, l2, in_ms(2000)).expect("lease ttl");
    assert!(poll.ttl.is_some_and(|t| t > 0) && poll.has_keys, "{poll:?}");
}

#[test]
fn stale_epoch_writes_are_refused() {
    let b = bed("dcs-fence");
    let mut e = b.client(PREFIX);
    let (l1, _, e1) = won(e.acquire_unbound(&b.rt, "pg1", 5, in_ms(2000)));
    assert!(
        e.guarded_put(&b.rt, "sync", r#"{"leader":"pg1"}"#, "pg1", e1, in_ms(2000))
            .expect("put")
    );
    let h = |tl: u32| HistoryEntry {
        timeline: tl,
        lsn: 1000 * u64::from(tl),
        reason: "test".into(),
        timestamp: "2026-01-01T00:00:00Z".into(),
        new_leader: "pg1".into(),
    };
    assert!(
        e.append_history(&b.rt, &h(1), "pg1", e1, in_ms(2000))
            .expect("append")
    );
    assert!(
        e.release(&b.rt, "pg1", e1, l1, in_ms(2000))
            .expect("release")
    );
    assert_eq!(e.lease_ttl(&b.rt, l1, in_ms(2000)).expect("ttl").ttl, None);
    // Nothing to release any more.
    assert!(
        !e.release(&b.rt, "pg1", e1, l1, in_ms(2000))
            .expect("release again")
    );

    let (l2, _, e2) = won(e.acquire_unbound(&b.rt, "pg1", 5, in_ms(2000)));
    assert!(e2 > e1);
    assert!(
        !e.guarded_put(&b.rt, "sync", "stale", "pg1", e1, in_ms(2000))
            .expect("put")
    );
    assert!(
        !e.guarded_put(&b.rt, "sync", "foreign", "pg2", e2, in_ms(2000))
            .expect("put")
    );
    assert!(
        !e.append_history(&b.rt, &h(9), "pg1", e1, in_ms(2000))
            .expect("append")
    );
    assert!(
        e.append_history(&b.rt, &h(2), "pg1", e2, in_ms(2000))
            .expect("append")
    );
    assert!(
        e.guarded_put(&b.rt, "sync", "fresh", "pg1", e2, in_ms(2000))
            .expect("put")
    );
    let view = e.read_cluster(&b.rt, in_ms(2000)).expect("read");
    assert_eq!(view.history, vec![h(1), h(2)]);
    assert_eq!(view.newest_timeline(), 3);
    let key = format!("{PREFIX}sync");
    let sync = b.raw(async move |c| c.get(key, None).await);
    assert_eq!(sync.kvs()[0].value(), b"fresh");
    // The guarded delete and the leader's config seed: refused on a stale epoch.
    assert!(
        !e.guarded_delete(&b.rt, "sync", "pg1", e1, in_ms(2000))
            .expect("delete")
    );
    assert!(
        !e.put_config_if_absent(&b.rt, "{}", Some(("pg1", e1)), in_ms(2000))
            .expect("config")
    );
    assert!(
        e.put_config_if_absent(&b.rt, r#"{"ttl":7}"#, Some(("pg1", e2)), in_ms(2000))
            .expect("config")
    );
    assert!(
        e.guarded_delete(&b.rt, "sync", "pg1", e2, in_ms(2000))
            .expect("delete")
    );
    assert!(
        e.read_cluster(&b.rt, in_ms(2000))
            .expect("read")
            .sync
            .is_none()
    );
    // A release with the stale epoch does not delete the new leadership's key
    // (and revokes only the lease it was given).
    assert!(
        !e.release(&b.rt, "pg1", e1, l1, in_ms(2000))
            .expect("stale release")
    );
    let r = e.confirmed_renew(&b.rt, l2, e2, "pg1", in_ms(2000));
    assert!(matches!(r.outcome, RenewalOutcome::Counted { .. }), "{r:?}");
}

#[test]
fn watch_wakes_on_release_and_acquire() {
    let b = bed("dcs-watch");
    let mut a = b.client(PREFIX);
    let mut w = b.client(PREFIX);
    let (l1, _, e1) = won(a.acquire_unbound(&b.rt, "pg1", 5, in_ms(2000)));

    // No watch open: the event future pends, the timer wins.
    let got = b.rt.block_on(async {
        tokio::select! {
            ev = w.next_watch_event() => Some(ev),
            _ = tokio::time::sleep(Duration::from_millis(200)) => None,
        }
    });
    assert_eq!(got, None);

    let rev = w.read_cluster(&b.rt, in_ms(2000)).expect("read").revision;
    w.watch_leader(&b.rt, rev + 1, in_ms(2000)).expect("watch");
    assert!(w.watch_is_open());
    // Nothing happened yet: the timer wins, and the watch survives being cancelled.
    let got = b.rt.block_on(async {
        tokio::select! {
            ev = w.next_watch_event() => Some(ev),
            _ = tokio::time::sleep(Duration::from_millis(200)) => None,
        }
    });
    assert_eq!(got, None);

    assert!(
        a.release(&b.rt, "pg1", e1, l1, in_ms(2000))
            .expect("release")
    );
    let t0 = clock::now();
    let ev = b.rt.block_on(async {
        tokio::select! {
            ev = w.next_watch_event() => Some(ev),
            _ = tokio::time::sleep(Duration::from_secs(5)) => None,
        }
    });
    println!("watch saw the release after {:?}", clock::now().since(t0));
    assert!(
        matches!(ev, Some(WatchEvent::LeaderDeleted { .. })),
        "{ev:?}"
    );

    let (l2, _, e2) = won(a.acquire_unbound(&b.rt, "pg2", 5, in_ms(2000)));
    let t0 = clock::now();
    let ev = b.rt.block_on(async {
        tokio::select! {
            ev = w.next_watch_event() => Some(ev),
            _ = tokio::time::sleep(Duration::from_secs(5)) => None,
        }
    });
    println!("watch saw the acquire after {:?}", clock::now().since(t0));
    assert_eq!(
        ev,
        Some(WatchEvent::LeaderPut {
            name: "pg2".into(),
            revision: e2,
            // The create revision and the lease: what a replica that never reads
            // this leadership needs to judge its DELETE (DESIGN §1 step 4).
            epoch: e2,
            lease: l2,
        })
    );

    // The watch covers the scope (issue 13 item 4): a member key's write is
    // reported, any other key's is not.
    assert!(
        a.put_config_cas(&b.rt, r#"{"ttl": 7}"#, None, in_ms(2000))
            .expect("config")
    );
    let (ml, _) = a.grant(&b.rt, 5, in_ms(2000)).expect("grant");
    a.put_member(&b.rt, "pg3", r#"{"role":"replica"}"#, ml, in_ms(2000))
        .expect("member");
    let ev = b.rt.block_on(async {
        tokio::select! {
            ev = w.next_watch_event() => Some(ev),
            _ = tokio::time::sleep(Duration::from_secs(5)) => None,
        }
    });
    assert!(
        matches!(&ev, Some(WatchEvent::MemberPut { name, .. }) if name == "pg3"),
        "{ev:?}"
    );

    // A watch from a compacted revision breaks (at open or as its first event).
    let now_rev = w.read_cluster(&b.rt, in_ms(2000)).expect("read").revision;
    b.raw(async move |c| c.compact(now_rev, None).await);
    match w.watch_leader(&b.rt, 2, in_ms(2000)) {
        Err(e) => println!("watch from a compacted revision refused at open: {e}"),
        Ok(()) => {
            let ev = b.rt.block_on(async {
                tokio::select! {
                    ev = w.next_watch_event() => Some(ev),
                    _ = tokio::time::sleep(Duration::from_secs(5)) => None,
                }
            });
            println!("watch from a compacted revision: {ev:?}");
            assert!(matches!(ev, Some(WatchEvent::Broken(_))), "{ev:?}");
            assert!(!w.watch_is_open());
        }
    }
}

#[test]
fn garbage_in_the_scope_is_carried_not_raised() {
    let b = bed("dcs-garbage");
    let mut e = b.client(PREFIX);
    let good = MemberInfo {
        role: "replica".into(),
        xlog_location: 77,
        timeline: 2,
        epoch: Some(5),
        pg_healthy: true,
        ..MemberInfo::default()
    };
    let good_json = encode_member(&good);
    b.raw(async move |c| {
        c.put(
            format!("{PREFIX}members/x"),
            b"\xff\xfe{garbage".to_vec(),
            None,
        )
        .await?;
        c.put(format!("{PREFIX}members/y"), good_json, None).await?;
        c.put(
            format!("{PREFIX}members/z"),
            r#"{"timeline":"two","xlog_location":1e99}"#,
            None,
        )
        .await?;
        c.put(format!("{PREFIX}initialize"), "not-a-sysid", None)
            .await?;
        c.put(
            format!("{PREFIX}history"),
            r#"[[1,100,"r","t","pg1"],"junk",[2]]"#,
            None,
        )
        .await?;
        c.put(format!("{PREFIX}config"), b"\xff".to_vec(), None)
            .await?;
        c.put(format!("{PREFIX}leader"), b"\xff\xfe".to_vec(), None)
            .await?;
        // Another scope's keys are not ours.
        c.put("/service/other/leader", "pg9", None).await
    });
    let view = e
        .read_cluster(&b.rt, in_ms(2000))
        .expect("garbage is not an error");
    assert!(view.revision > 0);
    let x = view.member("x").expect("x");
    assert!(x.info.parse_error.is_some());
    let y = view.member("y").expect("y");
    assert_eq!(y.info, good);
    let z = view.member("z").expect("z");
    assert!(
        z.info
            .parse_error
            .as_deref()
            .is_some_and(|p| p.contains("timeline"))
    );
    assert!(
        matches!(view.initialize, Some(Initialize::Garbage(_))),
        "{:?}",
        view.initialize
    );
    assert_eq!(view.history.len(), 1);
    assert_eq!(view.history[0].timeline, 1);
    assert!(view.config.is_some());
    let leader = view.leader.expect("leader");
    assert_ne!(leader.name, "pg9");
    assert_eq!(leader.lease, 0);
    // Reading twice logs nothing new and still works.
    e.read_cluster(&b.rt, in_ms(2000)).expect("read again");
}

#[test]
fn initialize_claim_race_and_record() {
    let b = bed("dcs-init");
    let mut a = b.client(PREFIX);
    let mut c = b.client(PREFIX);
    let la = match a.claim_initialize(&b.rt, 5, in_ms(2000)) {
        ClaimOutcome::Won { lease } => lease,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        c.claim_initialize(&b.rt, 5, in_ms(2000)),
        ClaimOutcome::Lost
    );
    let view = c.read_cluster(&b.rt, in_ms(2000)).expect("read");
    assert_eq!(
        view.initialize,
        Some(Initialize::Locked {
            lease: la,
            holder: String::new()
        })
    );
    // The wrong lease cannot record.
    let (lc, _) = c.grant(&b.rt, 5, in_ms(2000)).expect("grant");
    assert!(
        !c.record_initialize(&b.rt, 123, lc, in_ms(2000))
            .expect("record")
    );
    assert_eq!(c.lease_ttl(&b.rt, lc, in_ms(2000)).expect("ttl").ttl, None);
    // The lock holder can; its lock lease is gone afterwards and the key stays.
    assert!(
        a.record_initialize(&b.rt, 7_298_031_012_345_678_901, la, in_ms(2000))
            .expect("record")
    );
    assert_eq!(a.lease_ttl(&b.rt, la, in_ms(2000)).expect("ttl").ttl, None);
    let view = c.read_cluster(&b.rt, in_ms(2000)).expect("read");
    assert_eq!(
        view.initialize,
        Some(Initialize::Done {
            sysid: 7_298_031_012_345_678_901
        })
    );
    // A retry after a lost answer (the txn was applied, its answer never came):
    // the compare fails now (the key has no lease), but the key holds this
    // identifier, so it reads as written, never as a lost lock (which would hold
    // the cluster's own data directory). Another identifier is not ours.
    assert!(
        a.record_initialize(&b.rt, 7_298_031_012_345_678_901, la, in_ms(2000))
            .expect("record again")
    );
    assert!(
        !a.record_initialize(&b.rt, 7_298_031_012_345_678_902, la, in_ms(2000))
            .expect("record another")
    );
    assert!(
        !c.create_initialize(&b.rt, 1, &seen(), "pg9", "t", in_ms(2000))
            .expect("create")
    );
    // `initialize` existed: no marker either.
    assert_eq!(
        c.read_cluster(&b.rt, in_ms(2000)).expect("read").rollback,
        None
    );
    assert_eq!(
        c.claim_initialize(&b.rt, 5, in_ms(2000)),
        ClaimOutcome::Lost
    );

    // A concurrent race of claims on a fresh scope: one winner.
    let eps = b.cluster.endpoints();
    let barrier = Arc::new(Barrier::new(3));
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let eps = eps.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let rt = runtime();
                let mut e = Etcd::connect(&rt, &eps, "/service/t2/", in_ms(2000)).expect("connect");
                e.read_cluster(&rt, in_ms(2000)).expect("read");
                barrier.wait();
                e.claim_initialize(&rt, 5, in_ms(2000))
            })
        })
        .collect();
    let outcomes: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().expect("thread"))
        .collect();
    let wins = outcomes
        .iter()
        .filter(|o| matches!(o, ClaimOutcome::Won { .. }))
        .count();
    assert_eq!(wins, 1, "{outcomes:?}");
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == ClaimOutcome::Lost)
            .count(),
        2
    );

    // A node with data re-creating a lost key, create-only; and config seeding.
    let mut f = b.client("/service/t3/");
    assert!(
        f.create_initialize(&b.rt, 42, &seen(), "pg1", "t1", in_ms(2000))
            .expect("create")
    );
    assert!(
        !f.create_initialize(&b.rt, 43, &seen(), "pg2", "t2", in_ms(2000))
            .expect("create")
    );
    assert!(
        f.put_config_if_absent(&b.rt, r#"{"ttl":7}"#, None, in_ms(2000))
            .expect("config")
    );
    assert!(
        !f.put_config_if_absent(&b.rt, r#"{"ttl":9}"#, None, in_ms(2000))
            .expect("config")
    );
    let view = f.read_cluster(&b.rt, in_ms(2000)).expect("read");
    assert_eq!(view.initialize, Some(Initialize::Done { sysid: 42 }));
    assert_eq!(view.config.as_deref(), Some(r#"{"ttl":7}"#));
    // The re-creation wrote the rollback marker in the same txn (a nested txn).
    let m = view.rollback.expect("rollback marker");
    assert_eq!(
        (
            m.key.as_str(),
            m.seen_revision,
            m.by.as_str(),
            m.parse_error
        ),
        ("/service/t3/rollback", 316, "pg1", None)
    );
    // The marker is create-only: the first writer keeps its word.
    assert!(
        !f.mark_rollback(&b.rt, &seen(), "pg3", "t3", in_ms(2000))
            .expect("mark")
    );
    // confirm-epoch deletes it and writes confirm_epoch in one txn.
    let c = ConfirmEpoch {
        up_to: 316,
        by: "op".into(),
        at: "t4".into(),
    };
    let cleared = f.confirm_epoch(&b.rt, &c, in_ms(2000)).expect("confirm");
    assert_eq!(cleared.map(|m| m.by), Some("pg1".into()));
    let view = f.read_cluster(&b.rt, in_ms(2000)).expect("read");
    assert_eq!((view.rollback, view.confirm_epoch), (None, Some(c.clone())));
    // A marker by mark_rollback; garbage written over it is still a marker, and
    // confirm-epoch clears that too.
    assert!(
        f.mark_rollback(&b.rt, &seen(), "pg3", "t5", in_ms(2000))
            .expect("mark")
    );
    assert_eq!(
        f.read_cluster(&b.rt, in_ms(2000))
            .expect("read")
            .rollback
            .map(|m| m.by),
        Some("pg3".into())
    );
    b.raw(async move |c| c.put("/service/t3/rollback", "{garbage", None).await);
    let m = f
        .read_cluster(&b.rt, in_ms(2000))
        .expect("read")
        .rollback
        .expect("garbage is a marker");
    assert!(m.parse_error.is_some(), "{m:?}");
    let cleared = f.confirm_epoch(&b.rt, &c, in_ms(2000)).expect("confirm");
    assert!(cleared.expect("cleared").parse_error.is_some());
    assert_eq!(
        f.read_cluster(&b.rt, in_ms(2000)).expect("read").rollback,
        None
    );
}

fn seen() -> RollbackSeen {
    RollbackSeen {
        seen_revision: 316,
        found_revision: 4,
        reason: "test".into(),
    }
}

#[test]
fn member_key_held_by_another_live_lease() {
    let b = bed("dcs-member");
    let mut a = b.client(PREFIX);
    let mut c = b.client(PREFIX);
    assert!(
        !c.member_held_elsewhere(&b.rt, "pg1", None, in_ms(2000))
            .expect("check")
    );
    let (la, _) = a.grant(&b.rt, 5, in_ms(2000)).expect("grant");
    let json = encode_member(&MemberInfo::default());
    a.put_member(&b.rt, "pg1", &json, la, in_ms(2000))
        .expect("put");
    assert!(
        c.member_held_elsewhere(&b.rt, "pg1", None, in_ms(2000))
            .expect("check")
    );
    let (lc, _) = c.grant(&b.rt, 5, in_ms(2000)).expect("grant");
    assert!(
        c.member_held_elsewhere(&b.rt, "pg1", Some(lc), in_ms(2000))
            .expect("check")
    );
    assert!(
        !a.member_held_elsewhere(&b.rt, "pg1", Some(la), in_ms(2000))
            .expect("check")
    );
    assert!(
        !c.member_held_elsewhere(&b.rt, "pg2", None, in_ms(2000))
            .expect("check")
    );
    let view = c.read_cluster(&b.rt, in_ms(2000)).expect("read");
    assert_eq!(view.member("pg1").expect("pg1").lease, la);
    a.revoke(&b.rt, la, in_ms(2000)).expect("revoke");
    assert!(
        !c.member_held_elsewhere(&b.rt, "pg1", Some(lc), in_ms(2000))
            .expect("check")
    );
}

/// Every call returns by its deadline (plus a little) with all of etcd dead.
#[test]
fn calls_keep_their_deadlines_with_etcd_dead() {
    let mut b = bed("dcs-dead");
    let mut e = b.client(PREFIX);
    let (lease, _, epoch) = won(e.acquire_unbound(&b.rt, "pg1", 5, in_ms(2000)));
    let rev = e.read_cluster(&b.rt, in_ms(2000)).expect("read").revision;
    e.watch_leader(&b.rt, rev + 1, in_ms(2000)).expect("watch");
    for i in 0..3 {
        b.cluster.kill_member(i);
    }
    // The open watch notices (stream error) and reports Broken.
    let t0 = clock::now();
    let ev = b.rt.block_on(async {
        tokio::select! {
            ev = e.next_watch_event() => Some(ev),
            _ = tokio::time::sleep(Duration::from_secs(10)) => None,
        }
    });
    println!(
        "watch after etcd died: {ev:?} after {:?}",
        clock::now().since(t0)
    );
    assert!(matches!(ev, Some(WatchEvent::Broken(_))), "{ev:?}");

    let worst =
        every_call_by_its_deadline(&mut e, &b.rt, &b.cluster.endpoints(), lease, epoch, rev);
    println!("worst overrun: {:.3} ms", worst.as_secs_f64() * 1e3);

    // A deadline already passed fails at once, sending nothing.
    let rt = &b.rt;
    let past = clock::now();
    let err = e.read_cluster(rt, past).expect_err("past deadline");
    assert!(err.0.contains("deadline"), "{err}");
    assert!(matches!(
        e.confirmed_renew(rt, lease, epoch, "pg1", past).outcome,
        RenewalOutcome::Failed(_)
    ));

    // The same client recovers once etcd is back (members restarted on their data).
    for i in 0..3 {
        b.cluster.start_member(i, "existing").expect("restart");
    }
    assert!(b.cluster.wait_healthy(Duration::from_secs(30)));
    let t0 = clock::now();
    let view = wait_ok(|| e.read_cluster(&b.rt, in_ms(500)));
    println!("client recovered after {:?}", clock::now().since(t0));
    assert_eq!(view.leader.map(|l| l.epoch), Some(epoch));
}

/// Retry `f` for up to 20 s until it succeeds.
fn wait_ok<T>(mut f: impl FnMut() -> Result<T, tenure::dcs::DcsError>) -> T {
    let end = clock::now().add(Duration::from_secs(20));
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if clock::now() > end => panic!("still failing after 20 s: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// etcd hung rather than dead (SIGSTOP: connections stay open, nothing answers):
/// every call must give up at its own deadline.
#[test]
fn calls_keep_their_deadlines_with_etcd_hung() {
    let b = bed("dcs-hung");
    let mut e = b.client(PREFIX);
    let (lease, _, epoch) = won(e.acquire_unbound(&b.rt, "pg1", 30, in_ms(2000)));
    let (spare, _) = e.grant(&b.rt, 30, in_ms(2000)).expect("grant");
    let rev = e.read_cluster(&b.rt, in_ms(2000)).expect("read").revision;
    let pids: Vec<_> = (0..3)
        .map(|i| nix::unistd::Pid::from_raw(b.cluster.pid(i).expect("running") as i32))
        .collect();
    for p in &pids {
        nix::sys::signal::kill(*p, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");
    }
    // Requests that time out here still sit in etcd's socket and may be applied
    // once it resumes (a revoke, a release): aim them at a spare lease and an epoch
    // nobody holds, so the real leadership's state stays known.
    let worst = every_call_by_its_deadline(
        &mut e,
        &b.rt,
        &b.cluster.endpoints(),
        spare,
        epoch + 1_000_000,
        rev,
    );
    println!(
        "worst overrun with etcd hung: {:.3} ms",
        worst.as_secs_f64() * 1e3
    );
    for p in &pids {
        nix::sys::signal::kill(*p, nix::sys::signal::Signal::SIGCONT).expect("SIGCONT");
    }
    // After a timeout the next renewal uses a fresh stream: it must be a real,
    // current answer (Counted), not a stale queued one.
    let r = {
        let end = clock::now().add(Duration::from_secs(20));
        loop {
            let r = e.confirmed_renew(&b.rt, lease, epoch, "pg1", in_ms(1000));
            if !matches!(r.outcome, RenewalOutcome::Failed(_)) || clock::now() > end {
                break r;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // The lease (ttl 30) outlived the ~6 s etcd was stopped.
    println!("renewal after SIGCONT: {r:?}");
    assert!(
        matches!(r.outcome, RenewalOutcome::Counted { ttl } if ttl >= 30),
        "{r:?}"
    );
}

/// require-leader: a member cut off from its quorum answers "no leader" quickly
/// and cancels the watch instead of leaving it silent (DESIGN §3).
#[test]
fn member_without_leader_fails_fast_and_cancels_the_watch() {
    let mut b = bed("dcs-noleader");
    let survivor = b.cluster.endpoints()[2].clone();
    let mut e = Etcd::connect(&b.rt, &[survivor], PREFIX, in_ms(2000)).expect("connect");
    let rev = e.read_cluster(&b.rt, in_ms(2000)).expect("read").revision;
    e.watch_leader(&b.rt, rev + 1, in_ms(2000)).expect("watch");
    b.cluster.kill_member(0);
    b.cluster.kill_member(1);
    let t0 = clock::now();
    let ev = b.rt.block_on(async {
        tokio::select! {
            ev = e.next_watch_event() => Some(ev),
            _ = tokio::time::sleep(Duration::from_secs(10)) => None,
        }
    });
    println!(
        "watch without a leader: {ev:?} after {:?}",
        clock::now().since(t0)
    );
    assert!(matches!(ev, Some(WatchEvent::Broken(_))), "{ev:?}");
    assert!(!e.watch_is_open());
    let t1 = clock::now();
    let err = e.read_cluster(&b.rt, in_ms(2000)).expect_err("no quorum");
    println!(
        "read without a leader: {err} after {:?}",
        clock::now().since(t1)
    );
    assert!(err.0.contains("no leader"), "{err}");
}

/// Run every call with a 300 ms deadline; assert each returned within a loose slack
/// of it and print the measured overruns. Returns the worst.
fn every_call_by_its_deadline(
    e: &mut Etcd,
    rt: &Runtime,
    endpoints: &[String],
    lease: i64,
    epoch: i64,
    rev: i64,
) -> Duration {
    let budget = Duration::from_millis(300);
    let mut worst = Duration::ZERO;
    let mut check = |name: &str, f: &mut dyn FnMut(Instant) -> String| {
        let deadline = clock::now().add(budget);
        let what = f(deadline);
        let end = clock::now();
        let over = end.since(deadline);
        worst = worst.max(over);
        println!(
            "{name:>22}: overrun {:>8.3} ms -> {what}",
            over.as_secs_f64() * 1e3
        );
        assert!(
            over < Duration::from_secs(1),
            "{name} overran its deadline by {over:?}"
        );
    };
    check("read_cluster", &mut |d| {
        format!("{:?}", e.read_cluster(rt, d).map(|v| v.revision))
    });
    check("confirmed_renew", &mut |d| {
        format!(
            "{:?}",
            e.confirmed_renew(rt, lease, epoch, "pg1", d).outcome
        )
    });
    check("acquire", &mut |d| {
        format!("{:?}", e.acquire_unbound(rt, "pg1", 5, d))
    });
    check("claim_initialize", &mut |d| {
        format!("{:?}", e.claim_initialize(rt, 5, d))
    });
    check("record_initialize", &mut |d| {
        format!("{:?}", e.record_initialize(rt, 1, lease, d))
    });
    check("create_initialize", &mut |d| {
        format!("{:?}", e.create_initialize(rt, 1, &seen(), "pg1", "t", d))
    });
    check("grant", &mut |d| format!("{:?}", e.grant(rt, 5, d)));
    check("keep_alive_once", &mut |d| {
        format!("{:?}", e.keep_alive_once(rt, lease, d))
    });
    check("revoke", &mut |d| format!("{:?}", e.revoke(rt, lease, d)));
    check("lease_ttl", &mut |d| {
        format!("{:?}", e.lease_ttl(rt, lease, d))
    });
    check("put_member", &mut |d| {
        format!("{:?}", e.put_member(rt, "pg1", "{}", lease, d))
    });
    check("member_held_elsewhere", &mut |d| {
        format!("{:?}", e.member_held_elsewhere(rt, "pg1", None, d))
    });
    check("guarded_put", &mut |d| {
        format!("{:?}", e.guarded_put(rt, "sync", "x", "pg1", epoch, d))
    });
    let h = HistoryEntry {
        timeline: 1,
        lsn: 1,
        reason: "r".into(),
        timestamp: "t".into(),
        new_leader: "pg1".into(),
    };
    check("append_history", &mut |d| {
        format!("{:?}", e.append_history(rt, &h, "pg1", epoch, d))
    });
    check("release", &mut |d| {
        format!("{:?}", e.release(rt, "pg1", epoch, lease, d))
    });
    check("put_config_if_absent", &mut |d| {
        format!("{:?}", e.put_config_if_absent(rt, "{}", None, d))
    });
    check("watch_leader", &mut |d| {
        format!("{:?}", e.watch_leader(rt, rev + 1, d))
    });
    check("connect", &mut |d| {
        format!(
            "{:?}",
            Etcd::connect(rt, endpoints, PREFIX, d).map(|_| "client")
        )
    });
    worst
}

fn task_ids() -> HashSet<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect()
}

/// DESIGN §5: one OS thread in steady state. Connecting and using the client on a
/// current-thread runtime must not start any thread (no resolver, no blocking pool).
#[test]
fn no_threads_are_started() {
    let b = bed("dcs-threads");
    let rt = runtime();
    let before = task_ids();
    let mut e = Etcd::connect(&rt, &b.cluster.endpoints(), PREFIX, in_ms(2000)).expect("connect");
    let (lease, _, epoch) = won(e.acquire_unbound(&rt, "pg1", 5, in_ms(2000)));
    let rev = e.read_cluster(&rt, in_ms(2000)).expect("read").revision;
    e.watch_leader(&rt, rev + 1, in_ms(2000)).expect("watch");
    for _ in 0..20 {
        let r = e.confirmed_renew(&rt, lease, epoch, "pg1", in_ms(2000));
        assert!(matches!(r.outcome, RenewalOutcome::Counted { .. }), "{r:?}");
        e.read_cluster(&rt, in_ms(2000)).expect("read");
        e.lease_ttl(&rt, lease, in_ms(2000)).expect("ttl");
        e.put_member(&rt, "pg1", "{}", lease, in_ms(2000))
            .expect("put");
        e.guarded_put(&rt, "status", "{}", "pg1", epoch, in_ms(2000))
            .expect("guarded");
    }
    assert!(
        e.release(&rt, "pg1", epoch, lease, in_ms(2000))
            .expect("release")
    );
    // The watch covers the scope: the member writes above come first.
    let ev = rt.block_on(async {
        let skip_members = async {
            loop {
                match e.next_watch_event().await {
                    WatchEvent::MemberPut { .. } => continue,
                    other => return other,
                }
            }
        };
        tokio::select! {
            ev = skip_members => Some(ev),
            _ = tokio::time::sleep(Duration::from_secs(5)) => None,
        }
    });
    assert!(
        matches!(ev, Some(WatchEvent::LeaderDeleted { .. })),
        "{ev:?}"
    );
    // A call that times out (a member killed mid-burst) must not leave a thread either.
    let mut b = b;
    b.cluster.kill_member(0);
    for _ in 0..5 {
        let _ = e.read_cluster(&rt, in_ms(300));
    }
    let after = task_ids();
    let new: Vec<_> = after.difference(&before).collect();
    assert!(new.is_empty(), "threads appeared during the burst: {new:?}");
}

/// DESIGN §3 (pause): the acquire txn compares the `config` key's mod revision the
/// candidate decided on. A candidate that read the key before an operator's change
/// (a `pause` written meanwhile) loses the race; one that read the current
/// revision wins; with the key absent, revision 0 is "still absent". Also the
/// compare-and-set `PATCH /config` stores with.
#[test]
fn a_stale_config_revision_loses_the_acquire() {
    let b = bed("dcs-cfgrev");
    let mut e = b.client(PREFIX);
    // Absent config: the revision read is 0, and it still compares.
    let first = e.read_cluster(&b.rt, in_ms(2000)).expect("read");
    assert_eq!((first.config.as_deref(), first.config_revision), (None, 0));
    assert!(
        e.put_config_cas(&b.rt, r#"{"ttl": 7}"#, None, in_ms(2000))
            .expect("create config")
    );
    let seen = e.read_cluster(&b.rt, in_ms(2000)).expect("read");
    assert!(seen.config_revision > 0);
    // The create-only write does not overwrite; a stale revision does not either.
    assert!(
        !e.put_config_cas(&b.rt, "{}", None, in_ms(2000))
            .expect("cas")
    );
    // An operator pauses the cluster after the candidate read the key.
    assert!(
        e.put_config_cas(
            &b.rt,
            r#"{"ttl": 7, "pause": true}"#,
            Some(seen.config_revision),
            in_ms(2000)
        )
        .expect("cas")
    );
    assert!(
        !e.put_config_cas(&b.rt, "{}", Some(seen.config_revision), in_ms(2000))
            .expect("stale cas")
    );
    let stale = e.acquire_seen(&b.rt, "pg1", 5, &AcquireBasis::of(&seen), in_ms(2000));
    assert_eq!(
        stale,
        AcquireOutcome::Lost,
        "a stale config revision must lose"
    );
    assert!(
        e.read_cluster(&b.rt, in_ms(2000))
            .expect("read")
            .leader
            .is_none()
    );
    // Decided on the current revision: the race is won as usual.
    let now = e.read_cluster(&b.rt, in_ms(2000)).expect("read");
    let (_, _, epoch) = won(e.acquire_seen(&b.rt, "pg2", 5, &AcquireBasis::of(&now), in_ms(2000)));
    assert!(epoch > now.config_revision);
}

/// Review F1: the release marker is bound to the DELETE it proves. An acquisition
/// that read a marker compares its mod revision and marks it taken in the same txn,
/// so a candidate that read the marker before another node's whole leadership came
/// and went loses the race with that stale read, and a fresh read shows the marker
/// taken (it proves nothing for the later DELETE).
#[test]
fn the_acquire_txn_binds_and_takes_the_release_marker() {
    let b = bed("dcs-relbind");
    let mut e = b.client(PREFIX);
    let (l1, _, e1) = won(e.acquire_unbound(&b.rt, "pg1", 5, in_ms(2000)));
    let marker = ReleaseMarker {
        epoch: e1,
        lsn: 0x3000028,
        timeline: 1,
        candidate: Some("pg2".into()),
        by: "pg1".into(),
        taken_by: None,
    };
    assert!(
        e.hand_over(&b.rt, "pg1", e1, l1, &marker, in_ms(2000))
            .expect("hand over"),
        "the release txn's guard refused"
    );
    // pg2 reads the vacancy and its marker (and is then delayed).
    let stale = e.read_cluster(&b.rt, in_ms(2000)).expect("read");
    assert!(stale.leader.is_none());
    assert_eq!(stale.release, Some(Ok(marker.clone())));
    assert!(stale.release_revision > e1);
    // Meanwhile pg3 takes the key on the same read: the marker is marked taken in
    // the acquire's own txn, with every field kept for operators.
    let (l3, _, e3) = won(e.acquire_seen(&b.rt, "pg3", 5, &AcquireBasis::of(&stale), in_ms(2000)));
    let after = e.read_cluster(&b.rt, in_ms(2000)).expect("read");
    let taken = ReleaseMarker {
        taken_by: Some("pg3".into()),
        ..marker.clone()
    };
    assert_eq!(after.release, Some(Ok(taken.clone())));
    assert_eq!(after.release_revision, e3, "marked in the acquire's txn");
    // pg3's leadership ends without a hand-over (its lease revoked).
    e.revoke(&b.rt, l3, in_ms(2000)).expect("revoke");
    // pg2, still deciding on its stale read, cannot win with it...
    assert_eq!(
        e.acquire_seen(&b.rt, "pg2", 5, &AcquireBasis::of(&stale), in_ms(2000)),
        AcquireOutcome::Lost,
        "a candidate that read the marker before another acquisition must lose"
    );
    // ...and a fresh read shows the marker taken, which proves nothing (the core's
    // `release_proves`); deciding on it wins as usual and keeps it taken.
    let fresh = e.read_cluster(&b.rt, in_ms(2000)).expect("read");
    assert!(fresh.leader.is_none());
    assert_eq!(fresh.release, Some(Ok(taken)));
    let (_, _, e2) = won(e.acquire_seen(&b.rt, "pg2", 5, &AcquireBasis::of(&fresh), in_ms(2000)));
    let last = e.read_cluster(&b.rt, in_ms(2000)).expect("read");
    assert_eq!(
        last.release.and_then(Result::ok).and_then(|m| m.taken_by),
        Some("pg2".into())
    );
    assert_eq!(last.release_revision, e2);
}

/// The acquisition record (docs/design.md "the acquisition record"; S3): every
/// bound acquire txn writes `release` (holder, lease, granted TTL) at the new
/// epoch's revision. So a candidate that read the vacancy before another node's
/// whole leadership came and went (acquired, then its lease revoked: no marker, no
/// key left) loses the race with its stale read, and a fresh read shows that
/// leadership's record. Garbage in the key is replaced by the next acquisition.
/// Before the record, pg2's stale acquire won here (nothing it compared changed).
#[test]
fn every_acquire_writes_its_record_and_a_read_before_another_acquisition_loses() {
    let b = bed("dcs-acqrec");
    let mut e = b.client(PREFIX);
    let empty = e.read_cluster(&b.rt, in_ms(2000)).expect("read");
    assert_eq!(
        (empty.release_revision, &empty.release_acquired),
        (0, &None)
    );
    let (l1, t1, e1) = won(e.acquire_seen(&b.rt, "pg1", 5, &AcquireBasis::of(&empty), in_ms(2000)));
    // pg1's leadership ends early (its lease revoked); pg2 reads the vacancy.
    e.revoke(&b.rt, l1, in_ms(2000)).expect("revoke");
    let stale = e.read_cluster(&b.rt, in_ms(2000)).expect("read");
    assert!(stale.leader.is_none());
    // pg3 takes the key on its own, later read, and loses it at once.
    let fresh3 = e.read_cluster(&b.rt, in_ms(2000)).expect("read");
    let (l3, _, e3) = won(e.acquire_seen(&b.rt, "pg3", 5, &AcquireBasis::of(&fresh3), in_ms(2000)));
    e.revoke(&b.rt, l3, in_ms(2000)).expect("revoke");
    // pg2, deciding on the read that predates pg3's acquisition, cannot win.
    assert_eq!(
        e.acquire_seen(&b.rt, "pg2", 5, &AcquireBasis::of(&stale), in_ms(2000)),
        AcquireOutcome::Lost,
        "a candidate whose read predates another acquisition must lose"
    );
    // The record outlives its leadership: pg2's read showed pg1's, written in
    // pg1's acquire txn (its mod revision is pg1's epoch), and no marker.
    assert_eq!(
        stale.release_acquired,
        Some(AcquiredRecord {
            by: "pg1".into(),
            lease: l1,
            ttl: i64::from(t1),
        })
    );
    assert_eq!(stale.release_revision, e1, "written in the acquire's txn");
    assert!(stale.release.is_none(), "a record alone is no marker");
    // A fresh read shows the leadership it never saw: pg3's record at pg3's epoch.
    let fresh = e.read_cluster(&b.rt, in_ms(2000)).expect("read");
    assert!(fresh.leader.is_none());
    assert_eq!(fresh.release_revision, e3);
    assert_eq!(
        fresh
            .release_acquired
            .as_ref()
            .map(|a| (a.by.as_str(), a.lease)),
        Some(("pg3", l3))
    );
    // Garbage another writer left proves nothing and is replaced by the next record.
    b.raw(async move |c| c.put("/service/t1/release", "{garbage", None).await);
    let junk = e.read_cluster(&b.rt, in_ms(2000)).expect("read");
    assert!(matches!(junk.release, Some(Err(_))), "{:?}", junk.release);
    assert!(junk.release_acquired.is_none());
    let (l2, _, e2) = won(e.acquire_seen(&b.rt, "pg2", 5, &AcquireBasis::of(&junk), in_ms(2000)));
    let last = e.read_cluster(&b.rt, in_ms(2000)).expect("read");
    assert_eq!(last.release_revision, e2);
    assert_eq!(
        last.release_acquired.map(|a| (a.by, a.lease)),
        Some(("pg2".to_string(), l2))
    );
    assert!(last.release.is_none());
}

/// `grpc_server_msg_received_total` for one method, summed over the members.
fn received(b: &Bed, method: &str) -> f64 {
    let mut n = 0.0;
    for m in &b.cluster.members {
        let text = tenure::testbed::etcd::http_get_local(m.client_port, "/metrics")
            .expect("etcd /metrics");
        n += text
            .lines()
            .filter(|l| {
                l.starts_with("grpc_server_msg_received_total{")
                    && l.contains(&format!("grpc_method=\"{method}\""))
            })
            .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
            .sum::<f64>();
    }
    n
}

/// Issue 13 item 5: a lease's keepalive stream is kept between keepalives (one
/// message each instead of a fresh stream's two), and only while every keepalive
/// sent on it was answered: after a timeout the late answer stays queued on the
/// stream (DESIGN §3), so the next keepalive must go on a fresh stream. Here the
/// lease is revoked after the timeout: a reused stream would hand out the queued
/// answer (TTL 30, "alive") for a lease etcd no longer has.
#[test]
fn a_keepalive_stream_is_kept_only_while_every_keepalive_was_answered() {
    let b = bed("dcs-kept-ka");
    let mut e = b.client(PREFIX);
    let (lease, _, epoch) = won(e.acquire_unbound(&b.rt, "pg1", 30, in_ms(2000)));
    // The first opens the stream (two messages), the next ten reuse it.
    let r = e.confirmed_renew(&b.rt, lease, epoch, "pg1", in_ms(2000));
    assert!(matches!(r.outcome, RenewalOutcome::Counted { .. }), "{r:?}");
    let before = received(&b, "LeaseKeepAlive");
    for _ in 0..10 {
        let r = e.confirmed_renew(&b.rt, lease, epoch, "pg1", in_ms(2000));
        assert!(
            matches!(r.outcome, RenewalOutcome::Counted { ttl } if ttl >= 30),
            "{r:?}"
        );
    }
    let sent = received(&b, "LeaseKeepAlive") - before;
    println!("10 renewals on the kept stream: {sent} keepalive messages");
    assert_eq!(sent, 10.0, "one message per renewal on the kept stream");

    // etcd hung: the keepalive times out with its request in etcd's socket.
    let pids: Vec<_> = (0..3)
        .map(|i| nix::unistd::Pid::from_raw(b.cluster.pid(i).expect("running") as i32))
        .collect();
    for p in &pids {
        nix::sys::signal::kill(*p, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");
    }
    let timed_out = e.keep_alive_once(&b.rt, lease, in_ms(300));
    for p in &pids {
        nix::sys::signal::kill(*p, nix::sys::signal::Signal::SIGCONT).expect("SIGCONT");
    }
    assert!(timed_out.is_err(), "{timed_out:?}");
    // etcd answers the queued keepalive once it runs again; then the lease goes.
    std::thread::sleep(Duration::from_secs(1));
    b.raw(async move |c| c.lease_revoke(lease).await);
    let after = wait_ok(|| match e.keep_alive_once(&b.rt, lease, in_ms(1000)) {
        Err(err) if !err.0.contains("lease not found") => Err(err),
        other => Ok(other),
    });
    assert!(
        matches!(&after, Err(err) if err.0.contains("lease not found")),
        "the keepalive after the timeout must be answered for itself: {after:?}"
    );
}

/// Issue 13 item 5: the view kept from the scope watch is the view a read at the
/// same revision gives (puts, a delete, a txn of two keys, garbage), and a watch
/// that cannot follow on from the read (compacted) leaves no kept view until a
/// read and a watch from right after it.
#[test]
fn the_kept_view_follows_the_scope_and_a_compaction_needs_a_read() {
    let b = bed("dcs-kept-view");
    let mut e = b.client(PREFIX);
    let mut reader = b.client(PREFIX);
    let (_lease, _, _) = won(e.acquire_unbound(&b.rt, "pg1", 30, in_ms(2000)));
    let rev = e.read_cluster(&b.rt, in_ms(2000)).expect("read").revision;
    e.watch_leader(&b.rt, rev + 1, in_ms(2000)).expect("watch");
    assert!(
        e.watched_view().is_some(),
        "a read and a watch right after it"
    );

    let (m1, m2) = (
        format!("{PREFIX}members/pg2"),
        format!("{PREFIX}members/pg3"),
    );
    let info = encode_member(&MemberInfo {
        conn_url: "postgres://pg2".into(),
        role: "replica".into(),
        xlog_location: 100,
        ..MemberInfo::default()
    });
    let (k1, v1) = (m1.clone(), info.clone());
    b.raw(async move |c| c.put(k1, v1, None).await);
    let (k2, v2) = (m2.clone(), info.clone());
    b.raw(async move |c| c.put(k2, v2, None).await);
    let cfg = format!("{PREFIX}config");
    b.raw(async move |c| c.put(cfg, "{\"ttl\": 30}", None).await);
    let k1 = m1.clone();
    b.raw(async move |c| c.delete(k1, None).await);
    // One txn, two keys, one revision; one of them garbage.
    let (s, h) = (format!("{PREFIX}sync"), format!("{PREFIX}history"));
    b.raw(async move |c| {
        c.txn(etcd_client::Txn::new().and_then(vec![
            etcd_client::TxnOp::put(s, "{\"leader\":\"pg1\",\"sync_standby\":\"pg3\"}", None),
            etcd_client::TxnOp::put(h, "not a list", None),
        ]))
        .await
    });
    let fresh = reader.read_cluster(&b.rt, in_ms(2000)).expect("read");
    let kept = wait_ok(|| {
        let _ = e.poll_watch(&b.rt);
        match e.watched_view() {
            Some(v) if v.revision >= fresh.revision => Ok(v),
            other => Err(tenure::dcs::DcsError(format!("not there yet: {other:?}"))),
        }
    });
    assert_eq!(format!("{kept:?}"), format!("{fresh:?}"));
    assert!(kept.member("pg2").is_none() && kept.member("pg3").is_some());

    // Compacted past the revision a watch would start from: etcd creates the
    // watch, then cancels it (DESIGN §3), and no kept view is handed out meanwhile
    // or after, until a read and a watch from right after it.
    let now = fresh.revision;
    b.raw(async move |c| c.compact(now, None).await);
    let _ = e.watch_leader(&b.rt, rev + 1, in_ms(2000));
    assert!(
        e.watched_view().is_none(),
        "events were applied: replaying them needs a read"
    );
    let broken = wait_ok(|| {
        let evs = e.poll_watch(&b.rt);
        match evs
            .into_iter()
            .find(|ev| matches!(ev, WatchEvent::Broken(_)))
        {
            Some(ev) => Ok(ev),
            None if !e.watch_is_open() => Ok(WatchEvent::Broken("closed".into())),
            None => Err(tenure::dcs::DcsError("not cancelled yet".into())),
        }
    });
    println!("compacted: {broken:?}");
    assert!(e.watched_view().is_none());
    let again = e.read_cluster(&b.rt, in_ms(2000)).expect("read");
    assert!(e.watched_view().is_none(), "a read without a watch");
    e.watch_leader(&b.rt, again.revision + 1, in_ms(2000))
        .expect("watch");
    assert_eq!(e.watched_view().map(|v| v.revision), Some(again.revision));
}

/// An address a pinned client keeps using (the agent's with endpoints from DNS,
/// ctl's) comes to be served by another etcd cluster: here the same etcd restored
/// from a snapshot under a new cluster token — the same keys, the same lease, a
/// new cluster id — which the client's channel reconnects to by itself. Every
/// answer is checked against the etcd cluster the client first used
/// (dcs/pin.rs): a keepalive of a lease granted after the snapshot fails for the
/// cluster, not as "lease not found" (which would make a leader step down), the
/// leader's renewal there never counts, a read fails naming the other cluster,
/// and a write is not sent. A client made afresh (its own pin) is answered by the
/// restored cluster and its renewal counts — the key and the lease are there — so
/// the refusals are the check's.
#[test]
fn answers_from_another_etcd_cluster_at_the_same_address_are_refused() {
    let mut b = bed("dcs-other-cluster");
    // One endpoint, as the agent's client has.
    let ep0 = vec![b.cluster.endpoints()[0].clone()];
    // The process's pin, as the agent passes it to each client it makes.
    let pin = tenure::dcs::ClusterPin::default();
    let mut e = Etcd::connect(&b.rt, &ep0, PREFIX, in_ms(2000))
        .expect("connect")
        .pinned(pin.clone(), "");
    let (lease, _, epoch) = won(e.acquire_unbound(&b.rt, "pg1", 60, in_ms(2000)));
    let r = e.confirmed_renew(&b.rt, lease, epoch, "pg1", in_ms(2000));
    assert!(matches!(r.outcome, RenewalOutcome::Counted { .. }), "{r:?}");
    // An observed client (the agent's to endpoints given as addresses): notes
    // the id, refuses nothing.
    let noted = tenure::dcs::ClusterPin::default();
    let mut observer = Etcd::connect(&b.rt, &ep0, PREFIX, in_ms(2000))
        .expect("connect")
        .observed(noted.clone(), "");
    observer.read_cluster(&b.rt, in_ms(2000)).expect("read");
    let old_id = noted.id().expect("an id noted");
    // A lease it does not know is gone, and the client still writes (a restarted
    // agent's old member lease: this once left the observed client unable to
    // write, its member key never rewritten).
    let gone = observer.keep_alive_once(&b.rt, 0x7e57, in_ms(2000));
    assert!(
        gone.as_ref()
            .is_err_and(|e| e.0.contains("lease not found")),
        "{gone:?}"
    );
    observer
        .put_member(
            &b.rt,
            "pg8",
            &encode_member(&MemberInfo::default()),
            0,
            in_ms(2000),
        )
        .expect("the observed client writes after a lease not found");
    let snap = b.dir.join("etcd.snapshot.db");
    b.cluster.snapshot(&snap).expect("snapshot");
    let (later, _) = e.grant(&b.rt, 60, in_ms(2000)).expect("grant");
    e.keep_alive_once(&b.rt, later, in_ms(2000))
        .expect("a keepalive on its stream");

    b.cluster
        .restore(&snap, true)
        .expect("restore as a new cluster");

    // The lease granted after the snapshot is not in the restored store: its
    // keepalive's first answer says "lease not found" without a header.
    let mut refused = None;
    for _ in 0..50 {
        match e.keep_alive_once(&b.rt, later, in_ms(2000)) {
            Err(m) if m.0.contains("answers for etcd cluster") => {
                refused = Some(m.0);
                break;
            }
            Err(m) if !m.0.contains("lease not found") => {
                eprintln!("keepalive while reconnecting: {m}");
                std::thread::sleep(Duration::from_millis(100));
            }
            other => panic!("a keepalive answered by another etcd cluster: {other:?}"),
        }
    }
    refused.expect("the keepalive was refused for its cluster");

    // While the channel reconnects a renewal may fail for transport reasons;
    // none may count, and one must be refused for its cluster.
    let mut refused = None;
    for _ in 0..50 {
        let r = e.confirmed_renew(&b.rt, lease, epoch, "pg1", in_ms(2000));
        match r.outcome {
            RenewalOutcome::Failed(m) if m.contains("answers for etcd cluster") => {
                refused = Some(m);
                break;
            }
            RenewalOutcome::Failed(m) => {
                eprintln!("renewal while reconnecting: {m}");
                std::thread::sleep(Duration::from_millis(100));
            }
            other => panic!("a renewal answered by another etcd cluster: {other:?}"),
        }
    }
    let refused = refused.expect("the renewal was refused for its cluster");
    assert!(refused.contains(", not "), "{refused}");
    let read = e.read_cluster(&b.rt, in_ms(2000));
    assert!(
        read.as_ref()
            .is_err_and(|m| m.0.contains("answers for etcd cluster")),
        "{:?}",
        read.map(|v| v.revision)
    );
    let info = MemberInfo::default();
    let put = e.put_member(&b.rt, "pg9", &encode_member(&info), 0, in_ms(2000));
    assert!(
        put.as_ref()
            .is_err_and(|m| m.0.contains("answers for etcd cluster")),
        "{put:?}"
    );

    // A new client with the same pin (the agent's next endpoint) is refused too.
    let mut second = Etcd::connect(&b.rt, &ep0, PREFIX, in_ms(2000))
        .expect("connect")
        .pinned(pin.clone(), "");
    let read = second.read_cluster(&b.rt, in_ms(2000));
    assert!(
        read.as_ref()
            .is_err_and(|m| m.0.contains("answers for etcd cluster")),
        "{:?}",
        read.map(|v| v.revision)
    );

    // The observed client reads the restored cluster and notes its new id.
    let seen = wait_ok(|| observer.read_cluster(&b.rt, in_ms(2000)));
    assert!(seen.leader.is_some(), "the restored key");
    assert!(
        noted.id().is_some_and(|id| id != old_id),
        "{:?} after the restore, {old_id:x} before",
        noted.id()
    );
    assert_eq!(noted.refused(), 0, "nothing refused");

    // The restored cluster holds the key and the lease: a new client counts.
    let mut fresh = Etcd::connect(&b.rt, &ep0, PREFIX, in_ms(2000)).expect("connect");
    let r = wait_ok(|| {
        let r = fresh.confirmed_renew(&b.rt, lease, epoch, "pg1", in_ms(2000));
        match r.outcome {
            RenewalOutcome::Counted { ttl } => Ok(ttl),
            o => Err(tenure::dcs::DcsError(format!("{o:?}"))),
        }
    });
    assert!(r > 0);
    let written = b.raw(async |c| c.get(format!("{PREFIX}members/pg9"), None).await);
    assert!(
        written.kvs().is_empty(),
        "a write reached the other cluster"
    );
}
