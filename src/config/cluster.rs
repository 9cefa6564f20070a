//! The cluster-wide `config` key as a whole (DESIGN §3 "Configuration", §5 "Every
//! timing change is checked against what is armed"): what each member publishes of
//! its own timing (`W`, `M`, `B`, `P`), the check of a new value against every
//! member before it is stored, and Patroni's JSON merge patch.
//!
//! Owns: the member JSON's `timing` object, [`check_members`], [`merge_patch`].
//! Must never: do I/O, adjust a value, or accept a value that breaks S6 for any
//! member that published its timing (the error names the member, the inequality and
//! the numbers).

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{Config, TimingConfig, show_d, validate_timing, watchdog_range};

/// What a member publishes of the values S6 is checked with on its side (member
/// JSON `timing`): every `W` in force (an armed device's read-back, systemd's
/// `WATCHDOG_USEC`), whether it will arm a device not opened yet (then some
/// whole-second `W` must exist for the ttl), its `M`, `B` and `P`, and the TTL of the
/// leader lease it holds.
#[derive(Clone, Debug, PartialEq)]
pub struct PublishedTiming {
    pub watchdogs: Vec<u32>,
    pub arms_watchdog: bool,
    pub safety_margin: Duration,
    pub demote_budget: Duration,
    pub iteration_budget: Duration,
    /// `P` is the default `loop_wait - retry_timeout`, and follows a new
    /// `loop_wait`/`retry_timeout` (as [`Config::merge_dynamic`] does).
    pub iteration_budget_default: bool,
    pub leader_ttl: Option<u32>,
}

fn secs(d: Duration) -> Value {
    json!(d.as_secs_f64())
}

impl PublishedTiming {
    /// The member JSON's `timing` object (`leader_ttl` is published on its own).
    pub fn to_json(&self) -> Value {
        json!({
            "W": self.watchdogs,
            "arms_watchdog": self.arms_watchdog,
            "M": secs(self.safety_margin),
            "B": secs(self.demote_budget),
            "P": secs(self.iteration_budget),
            "P_default": self.iteration_budget_default,
        })
    }

    /// Read a member JSON (the whole value). `Ok(None)`: no `timing` published (an
    /// older agent): nothing to check against. `Err`: garbage, which names the field.
    pub fn from_member_json(raw: &str) -> Result<Option<PublishedTiming>, String> {
        let v: Value = serde_json::from_str(raw).map_err(|e| format!("not JSON: {e}"))?;
        let Some(t) = v.get("timing") else {
            return Ok(None);
        };
        let d = |k: &str| -> Result<Duration, String> {
            let x = t
                .get(k)
                .and_then(Value::as_f64)
                .ok_or_else(|| format!("timing.{k}: expected a number of seconds"))?;
            super::secs_from_f64(x).map_err(|e| format!("timing.{k}: {e}"))
        };
        let watchdogs = match t.get("W") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|w| {
                    w.as_u64()
                        .and_then(|w| u32::try_from(w).ok())
                        .ok_or_else(|| "timing.W: expected whole seconds".to_string())
                })
                .collect::<Result<Vec<u32>, String>>()?,
            _ => return Err("timing.W: expected a list of whole seconds".into()),
        };
        let flag = |k: &str| t.get(k).and_then(Value::as_bool).unwrap_or(false);
        Ok(Some(PublishedTiming {
            watchdogs,
            arms_watchdog: flag("arms_watchdog"),
            safety_margin: d("M")?,
            demote_budget: d("B")?,
            iteration_budget: d("P")?,
            iteration_budget_default: flag("P_default"),
            leader_ttl: v
                .get("leader_ttl")
                .and_then(Value::as_u64)
                .and_then(|t| u32::try_from(t).ok()),
        }))
    }

    /// S6 for this member with the cluster timing `t` (its own `M`, `B`, `P` put in):
    /// with the ttl `t` asks for and the one of the leader lease it holds, for
    /// every `W` it runs, and, if it will arm a device, with some `W` existing.
    pub fn check(&self, t: &TimingConfig) -> Result<(), String> {
        let mut t = t.clone();
        t.safety_margin = self.safety_margin;
        t.demote_budget = self.demote_budget;
        if !self.iteration_budget_default {
            t.iteration_budget = self.iteration_budget;
        }
        let mut ttls = vec![t.ttl];
        ttls.extend(self.leader_ttl.filter(|l| *l != t.ttl));
        for ttl in ttls {
            validate_timing(&t, ttl, None).map_err(|e| format!("with ttl {ttl} s: {e}"))?;
            for &w in &self.watchdogs {
                validate_timing(&t, ttl, Some(w))
                    .map_err(|e| format!("with ttl {ttl} s and its W = {w} s: {e}"))?;
            }
            if self.arms_watchdog && watchdog_range(&t, ttl).is_none() {
                return Err(format!(
                    "with ttl {ttl} s: {}",
                    super::empty_range_error(&t, ttl)
                ));
            }
        }
        Ok(())
    }

    /// `W = [..] s, M = .. s, B = .. s, P = .. s` for messages.
    pub fn describe(&self) -> String {
        format!(
            "W = {:?} s, M = {} s, B = {} s, P = {} s",
            self.watchdogs,
            show_d(self.safety_margin),
            show_d(self.demote_budget),
            show_d(self.iteration_budget)
        )
    }
}

/// Check a whole `config` value before it is stored: it must parse (types, as
/// every agent reads it; missing keys take `base`'s file values) and hold S6 for
/// every member that published its timing. `members`: (name, member JSON).
/// `Err` names the member, its values, the inequality and the numbers.
pub fn check_members(
    base: &Config,
    value: &str,
    members: &[(String, String)],
) -> Result<(), String> {
    let (t, _) = base.merge_dynamic(value)?;
    for (name, raw) in members {
        let pt = match PublishedTiming::from_member_json(raw) {
            Ok(Some(pt)) => pt,
            // An older agent, or a member key that does not parse: it checks the
            // value itself when it reads it (and refuses it, keeping its own).
            Ok(None) | Err(_) => continue,
        };
        pt.check(&t)
            .map_err(|e| format!("refused for member {name} ({}): {e}", pt.describe()))?;
    }
    Ok(())
}

/// The PostgreSQL parameters a `config` value or patch sets: the names under
/// `postgresql.parameters` whose value is not `null`. Patroni's cluster-wide
/// settings, which no tenure agent applies (each node's `[postgresql.parameters]`
/// are what its PostgreSQL gets): `PATCH`/`PUT /config` refuses them rather than
/// store them to do nothing, and an agent names any it finds in the key.
pub fn pg_parameters_set(v: &Value) -> Vec<String> {
    v.pointer("/postgresql/parameters")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// Apply a JSON merge patch (RFC 7396; Patroni's `patch_config`): `null` deletes a
/// key, objects merge recursively, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

#[cfg(test)]
mod tests;
