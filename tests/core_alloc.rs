//! The core's steady-state step allocates the same whatever the number of members
//! (issue 13 item 2: "a small fixed number per iteration"). A counting global
//! allocator wraps the system's and counts on the calling thread only, so the test
//! harness's other threads never show up in a count.

#[path = "support/core_builders.rs"]
mod core_builders;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use core_builders::{core_with, key, pg, view};
use tenure::core::Core;
use tenure::core::model::*;
use tenure::core::time::Instant;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: every call is passed on unchanged to the system allocator, which upholds
// the GlobalAlloc contract; the thread-local counter (const-initialised, no
// destructor, so it never allocates) has no effect on the memory returned.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract for `realloc` is passed on as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

fn at(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

/// The core of node `name` on ttl 7, loop 0.5, retry 0.25, margin 0.5, budget 1 (the
/// timing of the cluster's `config` below), not the shared `core`'s ttl 30.
fn core(name: &str) -> Core {
    core_with(
        name,
        None,
        Timing {
            ttl: 7,
            loop_wait: Duration::from_millis(500),
            retry_timeout: Duration::from_millis(250),
            safety_margin: Duration::from_millis(500),
            demote_budget: Duration::from_secs(1),
            promote_delay: None,
            maximum_lag_on_failover: 1 << 20,
            primary_start_timeout: Duration::from_secs(30),
            synchronous: SyncMode::Off,
            synchronous_node_count: 1,
            maximum_lag_on_syncnode: None,
        },
    )
}

fn member(name: &str, rev: i64, role: &str) -> Member {
    Member {
        name: name.into(),
        mod_revision: rev,
        lease: 0x100,
        info: MemberInfo {
            conn_url: format!("postgres://127.0.0.1:5432/postgres?name={name}"),
            api_url: format!("http://127.0.0.1:8008/{name}"),
            state: "running".into(),
            role: role.into(),
            version: "0.1.0".into(),
            xlog_location: 1000,
            timeline: 1,
            epoch: Some(5),
            leader_lease: (role == "primary").then_some(0xA),
            pg_healthy: true,
            ..MemberInfo::default()
        },
    }
}

/// pg2 follows pg1 and polls pg1's lease every step; the cluster has `n` members.
/// Returns the allocations of one steady-state step (after 50 warm-up steps).
fn replica_step_allocs(n: usize) -> u64 {
    let mut c = core("pg2");
    let members: Vec<Member> = (1..=n)
        .map(|i| {
            member(
                &format!("pg{i}"),
                90 + i as i64,
                if i == 1 { "primary" } else { "replica" },
            )
        })
        .collect();
    let mut v = view(100, Some(key("pg1", 5, 0xA)), members);
    v.config = Some(r#"{"ttl":7,"loop_wait":0.5,"retry_timeout":0.25}"#.into());
    let mut status = pg(PgRole::Replica, 1000, Some("pg1"));
    status.epoch = Some(5);
    let mut o = Observation::reading(Ok(v), status);
    let start = 10_000_000_000u64;
    o.lease_poll = Some(LeasePoll {
        lease: 0xA,
        sent_at: at(start),
        ttl: Some(6),
        granted_ttl: None,
        has_keys: true,
    });
    let mut last = None;
    for i in 0..50u64 {
        let now = at(start + i * 500_000_000);
        if let Some(p) = &mut o.lease_poll {
            p.sent_at = now;
        }
        last = Some(c.step(now, &o));
    }
    let plan = last.expect("50 steps ran");
    assert!(
        // The one action of a steady replica: keep its slot copies (the shell
        // finds nothing to do while nothing changed).
        matches!(plan.reason, Reason::Following { .. })
            && plan.actions == [Action::CopySlots { copies: true }],
        "not the steady state of a replica: {:?} ({})",
        plan.actions,
        plan.reason
    );
    drop(plan);
    let now = at(start + 50 * 500_000_000);
    if let Some(p) = &mut o.lease_poll {
        p.sent_at = now;
    }
    let before = allocs();
    let plan = c.step(now, &o);
    let n_allocs = allocs() - before;
    drop(plan);
    n_allocs
}

/// Issue 13 item 2: the revision bookkeeping (`note_revisions`, the rollback check
/// of DESIGN §3) cloned every member's name into its map on every step, known or
/// not: one allocation per member per loop. A known member now costs nothing.
#[test]
fn a_replica_step_allocates_the_same_with_3_or_30_members() {
    let three = replica_step_allocs(3);
    let thirty = replica_step_allocs(30);
    assert_eq!(
        three, thirty,
        "a steady-state step allocates per member: {three} with 3 members, {thirty} with 30"
    );
}
