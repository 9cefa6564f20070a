//! `POST /restart`, `DELETE /restart`, `POST /reload`, `POST /reinitialize`: their
//! bodies, conditions and answers (Patroni 4.1's `do_POST_restart`,
//! `do_DELETE_restart`, `do_POST_reload`, `do_POST_reinitialize`).
//!
//! Owns: reading each body into a typed request (400/422 with Patroni's sentence
//! for a bad field), the restart conditions (`role`, `postgres_version`,
//! `restart_pending`) judged against facts the agent passes in, and the sentences
//! the loop answers with.
//! Must never: read a clock (a schedule "in the past" is judged by the loop against
//! the time it passes in), do I/O, or decide whether an action may run: the core
//! says that (`Core::restart_job`, `Core::reinitialize_job`) and the loop carries
//! it out as a supervised job, answering the parked connection when it ends.

use std::time::Duration;

use serde_json::Value;

use super::{Intent, Reply, WriteRequest, field_bool, kind};
use crate::api::ApiStatus;
use crate::clock::{TimestampError, parse_timestamp};

/// How long `POST /restart` waits for the loop when no `timeout` is given: a fast
/// stop and a start (`pg_ctl -t` defaults to 60 s each), as Patroni's own restart
/// answers only once PostgreSQL is up again.
const RESTART_WAIT_DEFAULT: u64 = 60;
/// Beyond the start's `timeout`: the fast stop before it.
const RESTART_WAIT_STOP: u64 = 30;
/// `POST /reinitialize` is answered once the data directory was moved aside (a
/// fast stop, then a rename), before the clone from the leader.
const REINIT_WAIT: Duration = Duration::from_secs(60);

/// Patroni's restart conditions and schedule, parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestartRequest {
    /// Restart only a node in this role: `primary`, `standby_leader` or `replica`.
    pub role: Option<String>,
    /// Restart only if the running server's version is below this one, as
    /// `server_version_num` (`15.2` → 150002).
    pub postgres_version: Option<u32>,
    /// `pg_ctl start -t`, seconds; the answer waits that long for the start.
    pub timeout: Option<u32>,
    /// Restart only if PostgreSQL reports a parameter pending a restart.
    pub restart_pending: bool,
    /// When (seconds since the Unix epoch, wall clock), for a scheduled restart,
    /// and as it was written.
    pub schedule: Option<(Duration, String)>,
}

/// Facts the restart conditions are judged against (the last probe).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartFacts<'a> {
    /// `primary` or `replica` (Patroni's role names).
    pub role: &'a str,
    pub server_version: Option<u32>,
    pub pending_restart: bool,
}

impl RestartRequest {
    /// Patroni's `restart_matches`: why the conditions are not met (its sentences),
    /// or `None`. A version condition against a server whose version is unknown is
    /// not met (nothing proves it is older).
    pub fn mismatch(&self, f: &RestartFacts<'_>) -> Option<&'static str> {
        let mut why = None;
        if self.role.as_deref().is_some_and(|r| r != f.role) {
            why = Some("host role mismatch");
        }
        if let Some(v) = self.postgres_version
            && f.server_version.is_none_or(|cur| v <= cur)
        {
            why = Some("postgres version mismatch");
        }
        if self.restart_pending && !f.pending_restart {
            why = Some("pending restart flag is not set");
        }
        why
    }

    /// How long the connection waits for the loop's answer.
    fn wait(&self) -> Duration {
        if self.schedule.is_some() {
            return super::INTENT_WAIT;
        }
        let start = self.timeout.map_or(RESTART_WAIT_DEFAULT, u64::from);
        Duration::from_secs(start + RESTART_WAIT_STOP)
    }
}

/// The longest `timeout` a restart may be given: a day.
const RESTART_TIMEOUT_MAX: i64 = 86_400;

/// Patroni's `postgres_version_to_int`: `X.Y` (X >= 10) or `X.Y.Z` as
/// `server_version_num` (`15.2` → 150002, `9.6.3` → 90603).
pub fn postgres_version_to_int(v: &str) -> Result<u32, String> {
    let parts: Result<Vec<u32>, _> = v.split('.').map(str::parse::<u32>).collect();
    let Ok(mut parts) = parts else {
        return Err(format!("Invalid PostgreSQL version: {v}"));
    };
    let bad_format = parts.len() < 2 || parts.len() > 3 || (parts.len() == 2 && parts[0] < 10);
    if bad_format || parts.iter().any(|&p| p > 99) {
        return Err(format!(
            "Invalid PostgreSQL version format: X.Y or X.Y.Z is accepted: {v}"
        ));
    }
    if parts.len() == 2 {
        parts.insert(1, 0);
    }
    Ok(parts[0] * 10_000 + parts[1] * 100 + parts[2])
}

/// Patroni's `parse_int(value, 's')` for `timeout`: a number of seconds, or a
/// string with an optional unit (`ms`, `s`, `min`, `h`, `d`), rounded to whole
/// seconds; `None` when it is neither.
fn timeout_secs(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite())
                .map(|f| f.round() as i64)
        }),
        Value::String(s) => {
            let s = s.trim();
            let split = s
                .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
                .unwrap_or(s.len());
            let (num, unit) = (&s[..split], s[split..].trim());
            let n: f64 = num.parse().ok().filter(|f: &f64| f.is_finite())?;
            let per = match unit {
                "ms" => 0.001,
                "" | "s" => 1.0,
                "min" => 60.0,
                "h" => 3600.0,
                "d" => 86_400.0,
                _ => return None,
            };
            Some((n * per).round() as i64)
        }
        _ => None,
    }
}

/// The fields `POST /restart` takes.
const RESTART_FIELDS: &[&str] = &[
    "restart_pending",
    "role",
    "postgres_version",
    "timeout",
    "schedule",
];

/// Read `POST /restart`'s body: Patroni's checks and answers (400 for an unknown
/// field, a bad `role`, `postgres_version` or `timeout`; 400 for a schedule
/// without a timezone, 422 for one that does not parse).
pub fn restart_request(body: &serde_json::Map<String, Value>) -> Result<RestartRequest, Reply> {
    let mut r = RestartRequest::default();
    if let Some(k) = body.keys().find(|k| !RESTART_FIELDS.contains(&k.as_str())) {
        return Err(Reply::now(
            400,
            format!(
                "Unknown filter for the scheduled restart: {}",
                crate::api::truncate(k)
            ),
        ));
    }
    if let Some(v) = body.get("schedule").filter(|v| !v.is_null()) {
        let Value::String(s) = v else {
            return Err(Reply::now(422, UNPARSABLE_SCHEDULE));
        };
        match parse_timestamp(s) {
            Ok(at) => r.schedule = Some((at, s.clone())),
            Err(TimestampError::NoTimezone) => {
                return Err(Reply::now(
                    400,
                    "Timezone information is mandatory for the scheduled restart",
                ));
            }
            Err(TimestampError::Unparsable) => {
                return Err(Reply::now(422, UNPARSABLE_SCHEDULE));
            }
        }
    }
    if let Some(v) = body.get("role").filter(|v| !v.is_null()) {
        match v.as_str() {
            Some(role @ ("primary" | "standby_leader" | "replica")) => {
                r.role = Some(role.to_string())
            }
            _ => {
                return Err(Reply::now(
                    400,
                    "PostgreSQL role should be either primary, standby_leader, or replica",
                ));
            }
        }
    }
    if let Some(v) = body.get("postgres_version").filter(|v| !v.is_null()) {
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => format!("({})", kind(other)),
        };
        r.postgres_version = Some(postgres_version_to_int(&text).map_err(|e| Reply::now(400, e))?);
    }
    if let Some(v) = body.get("timeout").filter(|v| !v.is_null()) {
        match timeout_secs(v).filter(|&t| t > 0) {
            // Bounded: it becomes `pg_ctl -t` (whose tenths-of-a-second count
            // overflows an int past ~2e8 s) and how long this request is held
            // (review of bad input, finding 7).
            Some(t) if t <= RESTART_TIMEOUT_MAX => r.timeout = Some(t as u32),
            Some(t) => {
                return Err(Reply::now(
                    400,
                    format!("Timeout {t} s is more than the {RESTART_TIMEOUT_MAX} s allowed"),
                ));
            }
            None => {
                return Err(Reply::now(
                    400,
                    "Timeout should be a positive number of seconds",
                ));
            }
        }
    }
    // Patroni tests the key's presence; patronictl sends it only as `true`. The
    // value is honoured here: `false` is no condition.
    r.restart_pending = field_bool(body, "restart_pending")?.unwrap_or(false);
    Ok(r)
}

const UNPARSABLE_SCHEDULE: &str =
    "Unable to parse scheduled timestamp. It should be in an unambiguous format, e.g. ISO 8601";

/// `POST /restart`: now (the loop answers once the restart job ended: 200
/// restarted, 503 failed or refused) or at `schedule` (202, or 409 when another is
/// scheduled).
pub fn post_restart(req: &WriteRequest<'_>, _s: &ApiStatus) -> Reply {
    match restart_request(&req.body) {
        Ok(r) => {
            let wait = r.wait();
            Reply::Intent {
                intent: Intent::Restart(r),
                wait,
            }
        }
        Err(reply) => reply,
    }
}

/// `DELETE /restart`: cancel the scheduled restart (200, or 404 when none is).
pub fn delete_restart(_req: &WriteRequest<'_>, _s: &ApiStatus) -> Reply {
    Reply::intent(Intent::CancelRestart)
}

/// `POST /reload`: the agent's configuration file (the SIGHUP path, S6 checked),
/// then PostgreSQL's (`pg_reload_conf()`). 202 as Patroni; 400 with the refusal.
pub fn post_reload(_req: &WriteRequest<'_>, _s: &ApiStatus) -> Reply {
    Reply::intent(Intent::Reload)
}

/// `POST /reinitialize` (`force`, `from_leader`): a replica's data directory moved
/// aside, then cloned from the leader. 200 once moved aside (the answer names
/// where), 503 with the refusal.
pub fn post_reinitialize(req: &WriteRequest<'_>, _s: &ApiStatus) -> Reply {
    let force = match field_bool(&req.body, "force") {
        Ok(f) => f.unwrap_or(false),
        Err(r) => return r,
    };
    // `from_leader`: tenure always clones the leader (no `clonefrom` tag), so the
    // flag is read (a bad value is a 400) and changes nothing.
    if let Err(r) = field_bool(&req.body, "from_leader") {
        return r;
    }
    Reply::Intent {
        intent: Intent::Reinitialize { force },
        wait: REINIT_WAIT,
    }
}

#[cfg(test)]
mod tests;
