//! The loop's side of the cluster-wide `config` key (DESIGN §3 "Configuration", §5
//! "Every timing change is checked against what is armed"): what this node
//! publishes of its own timing, and `PATCH`/`PUT /config`.
//!
//! Owns: the member JSON's `timing` (`W`, `M`, `B`, `P`), and writing the key for the
//! API: check the PostgreSQL settings the request sets (their form, then
//! PostgreSQL's own parser: `pg::paramcheck`), read the key and every member, merge,
//! check S6 for every member's published values, then a compare-and-set on the mod
//! revision read.
//! Must never: store a value that breaks S6 for a member that published its timing,
//! or a PostgreSQL setting the request changes that PostgreSQL refuses (it would
//! stop every member's next start; one carried over unchanged from another
//! writer is not judged again, and every agent leaves it out), or overwrite a value it did not read (the compare-and-set answers 409 instead).
//! Every call is capped by `Agent::deadline` (S1, S6 d).

use log::info;
use serde_json::{Map, Value};

use crate::api::mgmt::Response;
use crate::config::cluster::{PublishedTiming, check_members, merge_patch};

use super::Agent;

impl Agent {
    /// What this node publishes of the values its own S6 check uses (member JSON
    /// `timing`), so `PATCH /config` can refuse a value before it is stored.
    pub(super) fn published_timing(&self) -> PublishedTiming {
        let mut watchdogs = Vec::new();
        if let Some(dev) = &self.wd.device {
            watchdogs.push(dev.timeout());
        }
        if let Some(w) = self.wd.systemd_w {
            let secs =
                u32::try_from(w.as_secs() + u64::from(w.subsec_nanos() > 0)).unwrap_or(u32::MAX);
            watchdogs.push(secs);
        }
        let t = &self.cfg.timing;
        PublishedTiming {
            watchdogs,
            arms_watchdog: self.wd.use_device && self.wd.device.is_none(),
            safety_margin: t.safety_margin,
            demote_budget: t.demote_budget,
            iteration_budget: t.iteration_budget,
            iteration_budget_default: t.iteration_budget
                == t.loop_wait.saturating_sub(t.retry_timeout),
            leader_ttl: self.core.leadership().map(|l| l.ttl),
        }
    }

    /// `PATCH /config` (`patch`, a JSON merge patch on the stored value) or `PUT
    /// /config` (`whole`): Patroni's answers — 200 with the value stored, 409 when
    /// the key changed since it was read, 503 when etcd does not answer or (PATCH)
    /// the key does not exist — plus 400 with the inequality and the numbers when
    /// the result breaks S6 for any member, before anything is stored.
    pub(super) fn write_config(
        &mut self,
        patch: Option<Map<String, Value>>,
        whole: Option<Map<String, Value>>,
    ) -> Response {
        let deadline = self.deadline(self.core.timing().retry_timeout);
        let Some((etcd, rt)) = self.connect(deadline) else {
            return Response::text(503, "etcd unreachable: nothing written");
        };
        let read = match etcd.read_config_and_members(rt, deadline) {
            Ok(r) => r,
            Err(e) => return Response::text(503, format!("cannot read the config key: {e}")),
        };
        // The stored value's PostgreSQL settings, to judge only what changes.
        let pg_of = |raw: &str| {
            self.cfg
                .merge_dynamic(raw)
                .map(|(_, d)| d.pg_parameters)
                .unwrap_or_default()
        };
        let stored = read
            .config
            .as_ref()
            .map(|(raw, _)| pg_of(raw))
            .unwrap_or_default();
        let (value, expect) = match (patch, whole) {
            (Some(p), _) => {
                let Some((raw, rev)) = read.config else {
                    return Response::text(
                        503,
                        "the config key does not exist (the bootstrapping node seeds it): \
                         PUT /config writes a whole value",
                    );
                };
                // Garbage in the key (written straight to etcd) is patched as `{}`,
                // as Patroni reads it.
                let mut v = match serde_json::from_str::<Value>(&raw) {
                    Ok(v @ Value::Object(_)) => v,
                    _ => Value::Object(Map::new()),
                };
                merge_patch(&mut v, &Value::Object(p));
                (v, Some(rev))
            }
            (None, w) => (
                Value::Object(w.unwrap_or_default()),
                read.config.as_ref().map(|(_, rev)| *rev),
            ),
        };
        let text = value.to_string();
        // DESIGN §5: refused before it is stored when S6 breaks for any member.
        if let Err(e) = check_members(&self.cfg, &text, &read.members) {
            return Response::text(400, format!("config refused, nothing stored: {e}"));
        }
        // The PostgreSQL settings the value changes (not what another writer left
        // in the key and a PUT of the whole value carries over unchanged: editing
        // `pause` in a key holding a Patroni-era section goes through): an entry
        // an agent would leave out is refused, then PostgreSQL's own parser judges
        // the changed values. A value PostgreSQL refuses in a configuration file
        // would stop every member's next start.
        let pg = pg_of(&text);
        if let Some((name, why)) = pg.ignored.iter().find(|i| !stored.ignored.contains(i)) {
            return Response::text(
                400,
                format!(
                    "config refused, nothing stored: postgresql.parameters {:?}: {why}",
                    name
                ),
            );
        }
        let changed: Vec<(String, String)> = pg
            .set
            .iter()
            .filter(|p| !stored.set.contains(p))
            .cloned()
            .collect();
        if !changed.is_empty() {
            let deadline = self.deadline(self.core.timing().retry_timeout);
            match self.pg.check_parameters(&changed, &pg.set, deadline) {
                Ok(refused) if refused.is_empty() => {}
                Ok(refused) => {
                    let said: Vec<String> = refused
                        .iter()
                        .map(|r| {
                            format!(
                                "postgresql.parameters.{} = {:?}: refused ({})",
                                r.name, r.value, r.why
                            )
                        })
                        .collect();
                    return Response::text(
                        400,
                        format!("config refused, nothing stored: {}", said.join("; ")),
                    );
                }
                Err(e) => {
                    return Response::text(
                        503,
                        format!(
                            "cannot check the PostgreSQL settings on this member ({e}): \
                             nothing stored"
                        ),
                    );
                }
            }
        }
        let deadline = self.deadline(self.core.timing().retry_timeout);
        let Some((etcd, rt)) = self.connect(deadline) else {
            return Response::text(503, "etcd unreachable: nothing written");
        };
        match etcd.put_config_cas(rt, &text, expect, deadline) {
            Ok(true) => {
                info!("api: config key written: {text}");
                Response::json(200, &value)
            }
            Ok(false) => Response::text(
                409,
                "the config key changed since it was read: nothing written, retry",
            ),
            Err(e) => Response::text(503, format!("config key write: {e}")),
        }
    }
}
