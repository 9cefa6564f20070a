//! A `/metrics` scrape allocates nothing once its buffer has its size (issue 10:
//! "rendered into a reused buffer; no allocation storm per scrape"). A counting
//! global allocator wraps the system's and counts only on the thread that turned
//! counting on, around the scrape: the harness's own threads (its output, its
//! timers) allocate when they like, and once made this test fail.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tenure::api::{ApiStatus, Method, respond};
use tenure::core::model::PgReport;
use tenure::core::time::Instant;

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // `const` and without a destructor: reading it never allocates, so the
    // allocator may read it.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if COUNTING.with(Cell::get) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed on unchanged to the system allocator, which upholds
// the GlobalAlloc contract; the counter has no effect on the memory returned.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller's contract for `realloc` is passed on as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn a_scrape_allocates_nothing_into_a_sized_buffer() {
    let now = Instant::from_nanos(1_000_000_000_000);
    let mut s = ApiStatus {
        name: "pg2".into(),
        scope: "demo".into(),
        role: "replica",
        state: "running".into(),
        pg_running: true,
        streaming: true,
        epoch: Some(73),
        timeline: 4,
        now,
        report: PgReport {
            server_version: Some(150_004),
            postmaster_start_time: Some("2026-01-01 10:00:00.123456+00:00".into()),
            receive_lsn: Some(5_000_000),
            replay_lsn: Some(4_000_000),
            latest_end_lsn: Some(5_000_000),
            replayed_timestamp: Some("2026-01-01 10:05:00.5+00:00".into()),
            replay_paused: Some(false),
            ..PgReport::default()
        },
        ..ApiStatus::default()
    };
    s.metrics.etcd_endpoints = vec!["http://127.0.0.1:2379".into()];
    s.cluster.sync_standbys = vec!["pg2".into()];
    // Every certificate configured: the expiry gauge's four samples are rendered.
    s.cert_expiry = tenure::certs::Gauges([Some(1_767_225_600); 4]);
    for ms in [1, 3, 40, 900] {
        s.metrics.renewal(true, Duration::from_millis(ms));
        s.metrics.loop_lateness.observe(Duration::from_millis(ms));
    }
    // The server's slot buffer: allocated once, at start-up, at this size.
    let mut out: Vec<u8> = Vec::with_capacity(tenure::api::metrics::SCRAPE_CAPACITY);
    for _ in 0..3 {
        out.clear();
        let before = ALLOCS.load(Ordering::Relaxed);
        COUNTING.with(|c| c.set(true));
        respond(&Method::Get, "/metrics", "", &s, &mut out);
        COUNTING.with(|c| c.set(false));
        let allocs = ALLOCS.load(Ordering::Relaxed) - before;
        assert_eq!(
            allocs,
            0,
            "a scrape of {} bytes allocated {allocs} times",
            out.len()
        );
    }
    let text = String::from_utf8(out).expect("UTF-8");
    assert!(text.contains("tenure_replication_lag_bytes{scope=\"demo\",name=\"pg2\"} 1000000\n"));
    assert!(text.contains(
        "tenure_tls_cert_expiry_timestamp_seconds{scope=\"demo\",name=\"pg2\",cert=\"rewind\"} 1767225600\n"
    ));
    eprintln!("scrape of a replica: {} bytes with the head", text.len());
}
