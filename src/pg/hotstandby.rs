//! A standby's floor for the five settings a hot standby must hold at no less
//! than its primary's values (`max_connections`, `max_worker_processes`,
//! `max_wal_senders`, `max_prepared_transactions`, `max_locks_per_transaction`):
//! a standby that starts below one of them is refused by PostgreSQL ("recovery
//! aborted because of insufficient parameter settings"), and it keeps failing at
//! every start until someone edits its files. A node's own
//! `[postgresql.parameters]` lower than the primary's, or a cluster-wide change
//! restarted on the primary first, leaves a replica that way.
//!
//! Owns: reading the values the standby's `pg_control` holds (the primary's, as of
//! the last parameter change it replayed or the copy it was built from: the
//! output of `pg_controldata`) and what the standby's own files would set
//! (`postgres -C NAME`), and deciding which to raise for this start (`-c NAME=V`
//! on the start's command line: it wins over every file, and a later start
//! without it goes back to the files). Patroni does the same at a replica's start.
//! Pure text in, a plan out: the job (`job.rs`) runs the children without
//! waiting on them and carries the plan out.
//!
//! Must never: lower a setting (only a value from `pg_control` above what the
//! files set is passed), pass a value it could not read as a plain number, or
//! trust a `pg_control` whose checksum `pg_controldata` says is wrong.

/// The settings, with `pg_controldata`'s label for each (its names differ for
/// two).
pub const SETTINGS: [(&str, &str); 5] = [
    ("max_connections", "max_connections setting:"),
    ("max_worker_processes", "max_worker_processes setting:"),
    ("max_wal_senders", "max_wal_senders setting:"),
    ("max_prepared_transactions", "max_prepared_xacts setting:"),
    ("max_locks_per_transaction", "max_locks_per_xact setting:"),
];

/// The values `pg_controldata`'s output (`LC_ALL=C`) holds for [`SETTINGS`], in
/// that order. `Err` names what is wrong: a checksum warning (the values may be
/// garbage), a label missing, or a value that is not a plain number.
pub fn control_values(text: &str) -> Result<[i64; 5], String> {
    if text.contains("WARNING") || text.contains("CRC") {
        return Err(format!(
            "pg_controldata warns: {}",
            text.lines()
                .find(|l| l.contains("WARNING") || l.contains("CRC"))
                .unwrap_or("")
                .trim()
        ));
    }
    let mut out = [0i64; 5];
    for (i, (_, label)) in SETTINGS.iter().enumerate() {
        let line = text
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(label))
            .ok_or_else(|| format!("pg_controldata names no {label:?}"))?;
        out[i] = number(line).ok_or_else(|| {
            format!(
                "pg_controldata's {label:?} is {:?}, not a number",
                line.trim()
            )
        })?;
    }
    Ok(out)
}

/// What `postgres -C NAME` printed (its stdout and stderr together): the one line
/// that is a plain number; none, or two, is no answer.
pub fn configured_value(text: &str) -> Option<i64> {
    let mut found = text.lines().filter_map(number);
    let v = found.next()?;
    found.next().is_none().then_some(v)
}

/// A plain non-negative number that fits PostgreSQL's `int` (these settings
/// have no units).
fn number(s: &str) -> Option<i64> {
    let s = s.trim();
    if s.is_empty() || s.len() > 10 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<i64>().ok().filter(|v| *v <= i64::from(i32::MAX))
}

/// A setting this start raises: its name, the primary's value (from
/// `pg_control`), and what the standby's files set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Raise {
    pub name: &'static str,
    pub to: i64,
    pub from: i64,
}

/// The settings to raise: each whose `pg_control` value is above what the
/// files set (`configured[i]`: `None` when `postgres -C` gave no number, which
/// raises nothing for it — a start on files PostgreSQL cannot read fails and says
/// why on its own).
pub fn raises(control: &[i64; 5], configured: &[Option<i64>; 5]) -> Vec<Raise> {
    SETTINGS
        .iter()
        .zip(control.iter().zip(configured.iter()))
        .filter_map(|((name, _), (&to, from))| {
            let from = (*from)?;
            (to > from).then_some(Raise { name, to, from })
        })
        .collect()
}

/// The options for the start's command line (`pg_ctl start -o`, which hands
/// them to the server through `/bin/sh`: numbers and names only, nothing to
/// quote).
pub fn start_options(r: &[Raise]) -> String {
    r.iter()
        .map(|r| format!("-c {}={}", r.name, r.to))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trimmed from PostgreSQL 15's `pg_controldata` (`LC_ALL=C`).
    const PG15: &str = "pg_control version number:            1300
Catalog version number:               202209061
Database cluster state:               in archive recovery
wal_level setting:                    replica
wal_log_hints setting:                off
max_connections setting:              120
max_worker_processes setting:         8
max_wal_senders setting:              10
max_prepared_xacts setting:           0
max_locks_per_xact setting:           64
track_commit_timestamp setting:       off
Maximum data alignment:               8
";

    #[test]
    fn the_probes_list_names_every_setting() {
        let list = crate::pg::floor_names!();
        let quoted: Vec<String> = SETTINGS.iter().map(|(n, _)| format!("'{n}'")).collect();
        let given: Vec<&str> = list.split(',').map(str::trim).collect();
        assert_eq!(given, quoted);
    }

    #[test]
    fn reads_the_primarys_values_from_pg_controldata() {
        assert_eq!(control_values(PG15), Ok([120, 8, 10, 0, 64]));
    }

    #[test]
    fn a_pg_control_it_cannot_trust_gives_no_values() {
        let crc = format!(
            "WARNING: Calculated CRC checksum does not match value stored in file.\n{PG15}"
        );
        let e = control_values(&crc).unwrap_err();
        assert!(e.contains("CRC checksum"), "{e}");
        let missing = PG15.replace("max_locks_per_xact setting:           64\n", "");
        assert!(
            control_values(&missing)
                .unwrap_err()
                .contains("max_locks_per_xact")
        );
        for bad in ["-1", "12x", "", "99999999999"] {
            let t = PG15.replace("              120", &format!("              {bad}"));
            let e = control_values(&t).unwrap_err();
            assert!(e.contains("max_connections"), "{bad}: {e}");
        }
    }

    #[test]
    fn reads_what_postgres_c_printed() {
        assert_eq!(configured_value("100\n"), Some(100));
        assert_eq!(
            configured_value("2026-12-07 LOG: something\n64\n\n"),
            Some(64)
        );
        assert_eq!(configured_value("FATAL: bad\n"), None);
        assert_eq!(configured_value(""), None);
        assert_eq!(configured_value("1e3\n"), None);
        assert_eq!(configured_value("64\n128\n"), None);
    }

    #[test]
    fn only_a_value_below_the_primarys_is_raised() {
        let control = [120, 8, 10, 0, 64];
        // Equal or above: nothing; unknown: nothing.
        assert!(raises(&control, &[Some(120), Some(8), Some(10), Some(0), Some(64)]).is_empty());
        assert!(
            raises(
                &control,
                &[Some(500), Some(16), Some(20), Some(5), Some(128)]
            )
            .is_empty()
        );
        assert!(raises(&control, &[None; 5]).is_empty());
        let r = raises(&control, &[Some(50), Some(8), None, Some(0), Some(32)]);
        assert_eq!(
            r,
            vec![
                Raise {
                    name: "max_connections",
                    to: 120,
                    from: 50
                },
                Raise {
                    name: "max_locks_per_transaction",
                    to: 64,
                    from: 32
                },
            ]
        );
        assert_eq!(
            start_options(&r),
            "-c max_connections=120 -c max_locks_per_transaction=64"
        );
    }
}
