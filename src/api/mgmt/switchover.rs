//! `POST /switchover`, `DELETE /switchover` and `POST /failover` (issue 9):
//! Patroni 4.1's checks, in its order (`do_POST_failover`, `is_failover_possible`,
//! `parse_schedule`, `do_DELETE_switchover`), from the agent's snapshot.
//!
//! Owns: the request's fields, the refusals that need nothing but the snapshot
//! (400 for a bad body or time, 412 when the leader named is not the leader or no
//! candidate fits), and the [`Intent`] that has the loop write the `failover` key.
//! Must never: write anything itself, read a clock (a time in the past is refused
//! by the loop, which has one), or be the last word on a candidate's fitness: the
//! leader checks the request again against fresh positions before it stops
//! anything (`core::switchover`), and a manual failover only makes a replica the
//! preferred candidate of an automatic one (every check of DESIGN §1 step 4 holds).

use std::time::Duration;

use super::{Intent, Reply, WriteRequest, field_str, only_fields};
use crate::api::ApiStatus;
use crate::clock::TimestampError;

/// Which endpoint asked (Patroni's `action`): it words the answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Switchover,
    Failover,
}

impl Action {
    pub fn word(self) -> &'static str {
        match self {
            Action::Switchover => "switchover",
            Action::Failover => "failover",
        }
    }

    /// `Switchover` / `Failover`.
    pub fn title(self) -> &'static str {
        match self {
            Action::Switchover => "Switchover",
            Action::Failover => "Failover",
        }
    }

    /// `switched over` / `failed over` (Patroni's `action[:-4] + "ed"`).
    pub fn past(self) -> &'static str {
        match self {
            Action::Switchover => "switched over",
            Action::Failover => "failed over",
        }
    }
}

/// A request the loop writes into the `failover` key.
#[derive(Clone, Debug, PartialEq)]
pub struct FailoverIntent {
    pub action: Action,
    pub leader: Option<String>,
    pub candidate: Option<String>,
    /// `scheduled_at` as sent (RFC 3339 with an offset, checked) and as seconds since
    /// the Unix epoch: the loop refuses one in the past (422, Patroni's code).
    pub scheduled_at: Option<(String, f64)>,
}

/// How long the loop watches the outcome of an immediate request before it answers
/// 503 "status unknown": Patroni's `poll_failover_result` bound,
/// `2 × max(10 s, loop_wait)`. The connection stays parked that long at most (one
/// of the server's fixed slots; its deadline is this plus [`super::INTENT_WAIT`],
/// so the loop's own answer always comes first).
pub fn outcome_wait(loop_wait: Duration) -> Duration {
    2 * loop_wait.max(Duration::from_secs(10))
}

/// `POST /switchover`.
pub fn post_switchover(req: &WriteRequest<'_>, s: &ApiStatus) -> Reply {
    post(Action::Switchover, req, s)
}

/// `POST /failover`.
pub fn post_failover(req: &WriteRequest<'_>, s: &ApiStatus) -> Reply {
    post(Action::Failover, req, s)
}

/// `DELETE /switchover`: the loop reads the key fresh and deletes a scheduled
/// request with a compare-and-set (200, 404 when none is scheduled, 409 when the
/// key changed in between, 503 when etcd does not answer).
pub fn delete_switchover(_req: &WriteRequest<'_>, _s: &ApiStatus) -> Reply {
    Reply::intent(Intent::CancelSwitchover)
}

fn post(mut action: Action, req: &WriteRequest<'_>, s: &ApiStatus) -> Reply {
    if let Err(r) = only_fields(
        &req.body,
        &["leader", "candidate", "member", "scheduled_at"],
    ) {
        return r;
    }
    let text = |k: &str| field_str(&req.body, k).map(|v| v.filter(|x| !x.is_empty()));
    let (leader, candidate, member, scheduled) = match (
        text("leader"),
        text("candidate"),
        text("member"),
        text("scheduled_at"),
    ) {
        (Ok(l), Ok(c), Ok(m), Ok(t)) => (l, c, m, t),
        (Err(r), ..) | (_, Err(r), ..) | (_, _, Err(r), _) | (.., Err(r)) => return r,
    };
    let candidate = candidate.or(member);
    let bad = |m: String| Reply::now(400, m);
    if action == Action::Failover && candidate.is_none() {
        return bad("Failover could be performed only to a specific candidate".into());
    }
    if action == Action::Switchover && leader.is_none() {
        return bad("Switchover could be performed only from a specific leader".into());
    }
    let mut scheduled_at = None;
    if let Some(t) = scheduled {
        if action == Action::Failover {
            return bad("Failover can't be scheduled".into());
        }
        if s.pause {
            return bad("Can't schedule switchover in the paused state".into());
        }
        match schedule(t, action) {
            Ok(secs) => scheduled_at = Some((t.to_string(), secs)),
            Err(r) => return r,
        }
    }
    if s.pause {
        // Patroni lets a manual switchover or failover to a named candidate through
        // while paused; tenure's pause holds every candidate back (`core::pause`), so
        // the leader would stop and nobody would take the key (review finding F3).
        return bad(
            "the cluster is paused (maintenance mode): no switchover or failover until it \
             resumes (every candidate is held back)"
                .into(),
        );
    }
    if action == Action::Failover && leader.is_some() {
        // Patroni: "received failover request with leader specified - performing
        // switchover instead".
        action = Action::Switchover;
    }
    if leader.is_some() && leader == candidate {
        return bad("Switchover target and source are the same".into());
    }
    if scheduled_at.is_none()
        && let Err(why) = possible(action, s, leader, candidate)
    {
        return Reply::now(412, why);
    }
    let intent = Intent::Failover(FailoverIntent {
        action,
        leader: leader.map(str::to_string),
        candidate: candidate.map(str::to_string),
        scheduled_at: scheduled_at.clone(),
    });
    if scheduled_at.is_some() {
        Reply::intent(intent)
    } else {
        Reply::Intent {
            intent,
            wait: outcome_wait(s.loop_wait) + super::INTENT_WAIT,
        }
    }
}

/// Patroni's `parse_schedule` (ISO 8601 / RFC 3339 through
/// [`crate::clock::parse_timestamp`], as everything an operator sends): without an
/// offset 400 (the time zone is mandatory), unparseable 422.
fn schedule(t: &str, action: Action) -> Result<f64, Reply> {
    match crate::clock::parse_timestamp(t) {
        Ok(d) => Ok(d.as_secs_f64()),
        Err(TimestampError::NoTimezone) => Err(Reply::now(
            400,
            format!(
                "Timezone information is mandatory for the scheduled {}",
                action.word()
            ),
        )),
        Err(TimestampError::Unparsable) => Err(Reply::now(
            422,
            "Unable to parse scheduled timestamp. It should be in an unambiguous format, \
             e.g. ISO 8601 (2026-12-01T10:00:00+01:00)",
        )),
    }
}

/// Patroni's `is_failover_possible` from the last cluster read, with the reason a
/// candidate does not fit added to its sentence. The leader checks again with
/// fresh positions (`core::switchover`).
fn possible(
    action: Action,
    s: &ApiStatus,
    leader: Option<&str>,
    candidate: Option<&str>,
) -> Result<(), String> {
    if let Some(l) = leader
        && s.leader.as_deref() != Some(l)
    {
        return Err(format!(
            "leader name does not match (the leader is {})",
            s.leader.as_deref().unwrap_or("nobody")
        ));
    }
    let members = &s.cluster.members;
    let pool: Vec<_> = match candidate {
        Some(c) => {
            if action == Action::Switchover
                && !s.cluster.sync_standbys.is_empty()
                && !s.cluster.sync_standbys.iter().any(|x| x == c)
            {
                return Err("candidate name does not match with sync_standby".into());
            }
            let found: Vec<_> = members.iter().filter(|m| m.name == c).collect();
            if found.is_empty() {
                return Err("candidate does not exists".into());
            }
            found
        }
        None => {
            let others: Vec<_> = members
                .iter()
                .filter(|m| s.leader.as_deref() != Some(m.name.as_str()))
                .collect();
            if others.is_empty() {
                return Err(format!(
                    "{} is not possible: cluster does not have members except leader",
                    action.word()
                ));
            }
            others
        }
    };
    // The leader's position: its member key (the `status` optime when it has none).
    let top = s
        .leader
        .as_deref()
        .and_then(|l| members.iter().find(|m| m.name == l))
        .map(|m| m.info.xlog_location)
        .or(s.status_optime);
    let mut why = Vec::new();
    for m in pool {
        let i = &m.info;
        let limit = if i.tags.nofailover {
            Some("tagged nofailover".to_string())
        } else if !i.pg_healthy || i.role != "replica" {
            Some("not a running replica".to_string())
        } else {
            top.map(|t| t.saturating_sub(i.xlog_location))
                .filter(|lag| *lag > s.maximum_lag_on_failover)
                .map(|lag| {
                    format!(
                        "{lag} bytes behind > maximum_lag_on_failover {}",
                        s.maximum_lag_on_failover
                    )
                })
        };
        match limit {
            None => return Ok(()),
            Some(l) => why.push(format!("{}: {l}", m.name)),
        }
    }
    Err(format!(
        "{} is not possible: no good candidates have been found ({})",
        action.word(),
        why.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::core::model::{Member, MemberInfo, Tags};

    fn member(name: &str, role: &str, xlog: u64, nofailover: bool) -> Member {
        Member {
            name: name.into(),
            mod_revision: 1,
            lease: 1,
            info: MemberInfo {
                role: role.into(),
                pg_healthy: true,
                xlog_location: xlog,
                tags: Tags {
                    nofailover,
                    ..Tags::default()
                },
                ..MemberInfo::default()
            },
        }
    }

    fn status() -> ApiStatus {
        let mut s = ApiStatus {
            leader: Some("pg1".into()),
            maximum_lag_on_failover: 1000,
            loop_wait: Duration::from_millis(500),
            ..ApiStatus::default()
        };
        s.cluster.members = vec![
            member("pg1", "primary", 5000, false),
            member("pg2", "replica", 5000, false),
            member("pg3", "replica", 1000, false),
            member("pg4", "replica", 5000, true),
        ];
        s
    }

    fn call(f: Handler4, body: Value, s: &ApiStatus) -> Reply {
        let Value::Object(body) = body else {
            panic!("object")
        };
        f(
            &WriteRequest {
                path: "/switchover",
                query: "",
                body,
            },
            s,
        )
    }
    type Handler4 = fn(&WriteRequest<'_>, &ApiStatus) -> Reply;

    fn refused(r: Reply) -> (u16, String) {
        match r {
            Reply::Now(resp) => match resp.body {
                super::super::Body::Text(t) => (resp.code, t),
                super::super::Body::Json(t) => (resp.code, t),
            },
            Reply::Intent { intent, .. } => panic!("not refused: {intent:?}"),
        }
    }

    /// Patroni's order and codes: bad bodies and times 400 (an unparseable time
    /// 422), a wrong leader or no fit candidate 412, each saying why.
    #[test]
    fn refusals_in_patronis_order_say_why() {
        let s = status();
        let cases: Vec<(Handler4, Value, u16, &str)> = vec![
            (
                post_switchover,
                json!({"candidate": "pg2"}),
                400,
                "only from a specific leader",
            ),
            (
                post_failover,
                json!({"leader": "pg1"}),
                400,
                "only to a specific candidate",
            ),
            (
                post_switchover,
                json!({"leader": 3}),
                400,
                "expected a string",
            ),
            (
                post_switchover,
                json!({"leader": "pg1", "x": 1}),
                400,
                "unknown field",
            ),
            (
                post_failover,
                json!({"candidate": "pg2", "scheduled_at": "2030-01-01T00:00:00Z"}),
                400,
                "can't be scheduled",
            ),
            (
                post_switchover,
                json!({"leader": "pg1", "scheduled_at": "2030-01-01T00:00:00"}),
                400,
                "Timezone information is mandatory",
            ),
            (
                post_switchover,
                json!({"leader": "pg1", "scheduled_at": "tomorrow"}),
                422,
                "Unable to parse",
            ),
            (
                post_switchover,
                json!({"leader": "pg1", "candidate": "pg1"}),
                400,
                "target and source are the same",
            ),
            (
                post_switchover,
                json!({"leader": "pg2", "candidate": "pg3"}),
                412,
                "leader name does not match",
            ),
            (
                post_switchover,
                json!({"leader": "pg1", "candidate": "pg9"}),
                412,
                "candidate does not exists",
            ),
            (
                post_switchover,
                json!({"leader": "pg1", "candidate": "pg4"}),
                412,
                "pg4: tagged nofailover",
            ),
            (
                post_switchover,
                json!({"leader": "pg1", "candidate": "pg3"}),
                412,
                "pg3: 4000 bytes behind",
            ),
        ];
        for (f, body, code, words) in cases {
            let (c, text) = refused(call(f, body.clone(), &s));
            assert_eq!(c, code, "{body}: {text}");
            assert!(text.contains(words), "{body}: {text:?} lacks {words:?}");
        }
        // Paused: nothing scheduled, and only to a named candidate.
        let mut p = status();
        p.pause = true;
        let (c, t) = refused(call(
            post_switchover,
            json!({"leader": "pg1", "scheduled_at": "2030-01-01T00:00:00Z"}),
            &p,
        ));
        assert_eq!((c, t.contains("paused state")), (400, true), "{t}");
        let (c, t) = refused(call(post_switchover, json!({"leader": "pg1"}), &p));
        assert_eq!((c, t.contains("paused")), (400, true), "{t}");
        let (c, t) = refused(call(
            post_switchover,
            json!({"leader": "pg1", "candidate": "pg2"}),
            &p,
        ));
        assert_eq!((c, t.contains("paused")), (400, true), "{t}");
        // No candidate named and none fits.
        let mut s = status();
        s.cluster.members.retain(|m| m.name != "pg2");
        let (c, t) = refused(call(post_switchover, json!({"leader": "pg1"}), &s));
        assert_eq!(c, 412, "{t}");
        assert!(t.contains("no good candidates"), "{t}");
    }

    /// A request that passes becomes an intent; an immediate one keeps its
    /// connection parked for the outcome (bounded), a scheduled one does not.
    #[test]
    fn good_requests_become_intents() {
        let s = status();
        match call(
            post_switchover,
            json!({"leader": "pg1", "candidate": "pg2"}),
            &s,
        ) {
            Reply::Intent { intent, wait } => {
                assert_eq!(
                    intent,
                    Intent::Failover(FailoverIntent {
                        action: Action::Switchover,
                        leader: Some("pg1".into()),
                        candidate: Some("pg2".into()),
                        scheduled_at: None,
                    })
                );
                assert_eq!(wait, Duration::from_secs(20) + super::super::INTENT_WAIT);
            }
            r => panic!("{r:?}"),
        }
        // Patroni's `member` is read as the candidate; a failover naming the leader
        // is a switchover.
        match call(post_failover, json!({"leader": "pg1", "member": "pg2"}), &s) {
            Reply::Intent {
                intent: Intent::Failover(f),
                ..
            } => assert_eq!(
                (f.action, f.candidate.as_deref()),
                (Action::Switchover, Some("pg2"))
            ),
            r => panic!("{r:?}"),
        }
        // A failover with no leader in the cluster: to the named, fit replica.
        let mut s = status();
        s.leader = None;
        s.cluster.members.retain(|m| m.name != "pg1");
        match call(post_failover, json!({"candidate": "pg2"}), &s) {
            Reply::Intent {
                intent: Intent::Failover(f),
                ..
            } => assert_eq!((f.action, f.leader), (Action::Failover, None)),
            r => panic!("{r:?}"),
        }
        let r = call(
            post_switchover,
            json!({"leader": "pg1", "candidate": "pg3", "scheduled_at": "2030-01-01T00:00:00+01:00"}),
            &status(),
        );
        match r {
            Reply::Intent {
                intent: Intent::Failover(f),
                wait,
            } => {
                // Scheduled: not checked against positions now (Patroni's order).
                assert_eq!(f.scheduled_at.map(|x| x.1), Some(1_893_452_400.0));
                assert_eq!(wait, super::super::INTENT_WAIT);
            }
            r => panic!("{r:?}"),
        }
    }
}
