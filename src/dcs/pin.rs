//! The etcd cluster every answer must come from.
//!
//! Owns: the id of the etcd cluster this process talks to, pinned by the first
//! answer that names one, and the check of every later answer's header against it.
//! Every answer etcd sends carries its cluster's id in its header (`ResponseHeader`
//! `cluster_id`), so the check itself is a compare of one `u64` per answer, on
//! every call the loop makes, the renewal's keepalive and read among them. (The
//! `Etcd` client adds one read before a new client's first write, `verify`.)
//!
//! Who is pinned: `tenure ctl`'s and the one-shot commands' clients, and the
//! agent's when its endpoints come from DNS (`[etcd] srv`, or host names). An
//! agent given addresses is not: a new cluster id there is etcd restored under a
//! new token, which the rollback marker catches from the running agents' memory
//! of revisions (DESIGN §3: a changed id only an extra signal), while a refusal
//! would have every agent restarted, and that memory lost with it. Its answers
//! are observed instead ([`ClusterPin::observe`]): a new id is said, not refused.
//!
//! Why every answer and not once per client: the address a client talks to can
//! come to be served by another etcd cluster while the client lives — a member the
//! DNS SRV records dropped that the client keeps until a call fails
//! (`resolve_interval`), a host name that now resolves elsewhere, an address
//! re-used by a new etcd after its old one stopped (the client's channel reconnects
//! to it by itself). An answer from another cluster says nothing about ours: a
//! keepalive it confirms is no renewal of our lease, a CAS it accepts takes no key
//! of ours, and agents split between two clusters would each elect a leader (review
//! of the SRV change, finding 1).
//!
//! Must never: let an answer whose header names another cluster, or has no header,
//! reach a caller as a success; unpin (a process accepts a new etcd cluster only
//! when restarted). A header with cluster id 0 names none (etcd's gRPC proxy makes
//! up a shared watch's `created` answer so): it is let through but proves nothing
//! and pins nothing. What it cannot check: an error status (gRPC's) carries no
//! header. The client reads such answers so: a lease poll's "lease not found" is
//! no answer (etcd itself answers TTL -1 with a header; "the leader's lease is
//! gone" is what lets a candidate act, S3); a keepalive's, which etcd-client
//! reports without the header, counts only once a read of the same member passed
//! the check (else a reconnect to another cluster would make a leader step down);
//! a revoke's is taken as done (no decision reads it).

use std::cell::RefCell;
use std::rc::Rc;

use etcd_client::{
    DeleteResponse, GetResponse, LeaseGrantResponse, LeaseKeepAliveResponse, LeaseRevokeResponse,
    LeaseTimeToLiveResponse, PutResponse, ResponseHeader, TxnResponse, WatchResponse,
};

use super::DcsError;

/// An answer of etcd with a header.
pub trait Headed {
    fn response_header(&self) -> Option<&ResponseHeader>;
}

macro_rules! headed {
    ($($t:ty),* $(,)?) => {
        $(impl Headed for $t {
            fn response_header(&self) -> Option<&ResponseHeader> {
                self.header()
            }
        })*
    };
}

headed!(
    GetResponse,
    PutResponse,
    DeleteResponse,
    TxnResponse,
    LeaseGrantResponse,
    LeaseRevokeResponse,
    LeaseKeepAliveResponse,
    LeaseTimeToLiveResponse,
    WatchResponse,
);

/// Distinct mismatches said at `error` level (with `ALERT:`) per process; later
/// ones only fail their call (its error is logged by the caller as any other).
const ALERTS_KEPT: usize = 16;

/// The pinned etcd cluster of one process, shared by every client it makes (an
/// endpoint switch makes a new client; the pin stays). Single-threaded: the loop's.
#[derive(Clone, Debug, Default)]
pub struct ClusterPin(Rc<RefCell<State>>);

impl State {
    /// `ALERT: etcd: why` once per member and foreign id (the first
    /// [`ALERTS_KEPT`] pairs are remembered).
    fn alert_once(&mut self, endpoint: &str, id: u64, why: &str) {
        if self.alerted.iter().any(|(e, i)| e == endpoint && *i == id) {
            return;
        }
        log::error!("ALERT: etcd: {why}");
        if self.alerted.len() < ALERTS_KEPT {
            self.alerted.push((endpoint.to_string(), id));
        }
    }
}

#[derive(Debug, Default)]
struct State {
    id: Option<u64>,
    /// `(endpoint, foreign id)` already said.
    alerted: Vec<(String, u64)>,
    /// Answers refused for naming another cluster, since the start.
    refused: u64,
}

impl ClusterPin {
    /// The pinned cluster, once an answer named one.
    pub fn id(&self) -> Option<u64> {
        self.0.borrow().id
    }

    /// Answers refused for naming another cluster, since the start.
    pub fn refused(&self) -> u64 {
        self.0.borrow().refused
    }

    /// Check one answer from `endpoint`: `Ok(true)` when its header names the
    /// pinned cluster, or pins it when none is pinned yet; `Ok(false)` when it
    /// names none (cluster id 0: etcd's gRPC proxy makes up the `created` answer of
    /// a watch it shares that way): let through, but it proves nothing.
    pub fn check(&self, endpoint: &str, answer: &impl Headed) -> Result<bool, DcsError> {
        match answer.response_header() {
            Some(h) => self.check_id(endpoint, h.cluster_id()),
            None => Err(DcsError(format!(
                "{endpoint} answered without a header: which etcd cluster the answer \
                 comes from cannot be told, so it is not used"
            ))),
        }
    }

    /// Note one answer without refusing it (an agent given IP addresses, DESIGN
    /// §3: a changed id "only an extra signal"): a new cluster id is said as an
    /// `ALERT` once per member and id, and becomes the one noted.
    pub fn observe(&self, endpoint: &str, answer: &impl Headed) {
        let Some(id) = answer.response_header().map(|h| h.cluster_id()) else {
            return;
        };
        self.observe_id(endpoint, id);
    }

    fn observe_id(&self, endpoint: &str, id: u64) {
        if id == 0 {
            return;
        }
        let mut s = self.0.borrow_mut();
        let old = match s.id.replace(id) {
            Some(old) if old != id => old,
            _ => return,
        };
        s.alert_once(
            endpoint,
            id,
            &format!(
                "{endpoint} now answers for etcd cluster {id:x}, not {old:x}: etcd was \
                 restored or replaced under a new cluster id (if it went back in time, the \
                 rollback marker holds every failover until `tenure confirm-epoch`)"
            ),
        );
    }

    fn check_id(&self, endpoint: &str, id: u64) -> Result<bool, DcsError> {
        if id == 0 {
            return Ok(false);
        }
        let mut s = self.0.borrow_mut();
        let pinned = match s.id {
            None => {
                // INVARIANT: pinned once per process, by the first answer that
                // names a cluster; never changed after (only a restart accepts
                // another cluster).
                s.id = Some(id);
                return Ok(true);
            }
            Some(p) if p == id => return Ok(true),
            Some(p) => p,
        };
        let why = format!(
            "{endpoint} answers for etcd cluster {id:x}, not {pinned:x}, the one this \
             process has used since it started: a wrong DNS record or endpoint, or \
             another etcd cluster now at that address (restart the agent to accept a \
             new one, e.g. etcd restored from a backup)"
        );
        s.refused += 1;
        s.alert_once(endpoint, id, &why);
        Err(DcsError(why))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_answer_pins_and_later_ones_must_match() {
        let pin = ClusterPin::default();
        assert_eq!(pin.id(), None);
        assert!(
            matches!(pin.check_id("http://10.0.0.1:2379", 0), Ok(false)),
            "names none"
        );
        assert_eq!(pin.id(), None, "and pins nothing");
        pin.check_id("http://10.0.0.1:2379", 0xabc).expect("pins");
        assert_eq!(pin.id(), Some(0xabc));
        assert!(
            matches!(pin.check_id("http://10.0.0.9:2379", 0), Ok(false)),
            "a proxy's 0"
        );
        pin.check_id("http://10.0.0.2:2379", 0xabc)
            .expect("another member of the same cluster");
        let e = pin
            .check_id("http://10.0.0.3:2379", 0xdef)
            .expect_err("another cluster");
        assert!(
            e.0.contains("http://10.0.0.3:2379 answers for etcd cluster def, not abc"),
            "{e}"
        );
        assert_eq!(pin.id(), Some(0xabc), "never re-pinned");
        assert_eq!(pin.refused(), 1);
        // Shared by every client of the process.
        let other_client = pin.clone();
        assert!(
            other_client
                .check_id("http://10.0.0.1:2379", 0xdef)
                .is_err()
        );
        assert!(matches!(
            other_client.check_id("http://10.0.0.1:2379", 0xabc),
            Ok(true)
        ));
    }

    /// Observed, not enforced: every answer passes; a new id is noted and said
    /// once per member and id.
    #[test]
    fn an_observed_change_is_noted_not_refused() {
        let pin = ClusterPin::default();
        pin.observe_id("a", 0);
        assert_eq!(pin.id(), None);
        pin.observe_id("a", 1);
        assert_eq!(pin.id(), Some(1));
        pin.observe_id("a", 2);
        assert_eq!(pin.id(), Some(2), "the new id is the one noted");
        assert_eq!(pin.0.borrow().alerted, vec![("a".to_string(), 2)]);
        pin.observe_id("a", 1);
        pin.observe_id("a", 2);
        assert_eq!(pin.0.borrow().alerted.len(), 2, "once per member and id");
        assert_eq!(pin.refused(), 0, "nothing refused");
    }

    #[test]
    fn an_answer_without_a_header_is_not_used() {
        struct NoHeader;
        impl Headed for NoHeader {
            fn response_header(&self) -> Option<&ResponseHeader> {
                None
            }
        }
        let pin = ClusterPin::default();
        let e = pin
            .check("http://10.0.0.1:2379", &NoHeader)
            .expect_err("no header");
        assert!(e.0.contains("without a header"), "{e}");
        assert_eq!(pin.id(), None, "nothing pinned by it");
    }

    #[test]
    fn alerts_are_kept_bounded() {
        let pin = ClusterPin::default();
        assert!(matches!(pin.check_id("a", 1), Ok(true)));
        for i in 0..100u64 {
            assert!(pin.check_id("a", 2 + i).is_err());
            assert!(pin.check_id("a", 2 + i).is_err());
        }
        assert_eq!(pin.0.borrow().alerted.len(), ALERTS_KEPT);
    }
}
