//! etcd v3 backend: the key layout (DESIGN §4), leases, the acquire txn, guarded
//! writes, the watch on `leader`. Blocking calls, each bounded by a deadline.
//!
//! Owns: every byte exchanged with etcd, and the defensive parsing of what other
//! writers left there. Must never: decide anything (it reports outcomes to the
//! core), block past the deadline it was given, resolve a host name, or reuse a
//! keepalive stream after a timeout (DESIGN §3).
//!
//! STUB: signatures are the contract; bodies are filled in by the dcs work.

use tokio::runtime::Runtime;

use crate::core::model::{
    AcquireOutcome, ClaimOutcome, ClusterView, Epoch, HistoryEntry, LeaseId, LeasePoll, Renewal,
};
use crate::core::time::Instant;

/// A failure talking to etcd (timeout, no leader, connection refused...). The text
/// names what failed; the loop treats it as an observation.
#[derive(Debug, Clone)]
pub struct DcsError(pub String);

impl std::fmt::Display for DcsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A change to `leader` seen by the watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// `leader` was deleted (expiry, release, revoke, operator).
    LeaderDeleted { revision: i64 },
    /// `leader` was written (created or overwritten) with this value.
    LeaderPut { name: String, revision: i64 },
    /// The watch broke (cancelled, compacted, no leader): reopen it.
    Broken(String),
}

pub struct Etcd {
    // filled in by the dcs work
}

impl Etcd {
    /// Connect to `endpoints` (IP addresses only) with require-leader set.
    /// `prefix` is `<namespace>/<scope>/` (with the trailing slash).
    pub fn connect(
        rt: &Runtime,
        endpoints: &[String],
        prefix: &str,
        deadline: Instant,
    ) -> Result<Etcd, DcsError> {
        let _ = (rt, endpoints, prefix, deadline);
        unimplemented!()
    }
}
