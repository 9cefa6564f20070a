//! The fork into a timeline, from PostgreSQL's own timeline history file
//! (`pg_wal/<timeline as 8 hex digits>.history`) — review F2: the `history` key's
//! switch point.
//!
//! Owns: reading and parsing that file (bounded: a file of at most
//! [`MAX_HISTORY_FILE`] bytes, read once, no child process).
//!
//! Must never: guess a switch point. A missing, oversized or malformed file is an
//! error naming the file; the caller appends nothing and tries again later, so
//! `history` never records a position PostgreSQL did not fork at (replicas decide
//! on it whether they must rewind).

use std::fs;
use std::io::Read;

use super::{PgCtl, parse_lsn};
use crate::core::model::Lsn;

/// A history file has one line per ancestor timeline (~50 bytes each): 1 MiB is
/// some 20,000 promotions. Past it the file is not PostgreSQL's.
pub const MAX_HISTORY_FILE: u64 = 1 << 20;

/// `(parent timeline, switch point)` of the last entry of a timeline history file:
/// the fork into the file's own timeline. Lines are `parentTLI <tab> X/Y <tab>
/// reason`; `#` comments and blank lines are skipped, as PostgreSQL does.
pub fn last_fork(text: &str, timeline: u32) -> Result<(u32, Lsn), String> {
    let mut last = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut f = line.split_whitespace();
        let (Some(tl), Some(lsn)) = (f.next(), f.next()) else {
            return Err(format!(
                "line {}: expected a timeline and a position",
                n + 1
            ));
        };
        let tl: u32 = tl
            .parse()
            .map_err(|_| format!("line {}: timeline {tl:?} is not a number", n + 1))?;
        let lsn =
            parse_lsn(lsn).ok_or_else(|| format!("line {}: position {lsn:?} is not X/Y", n + 1))?;
        last = Some((tl, lsn));
    }
    match last {
        None => Err("no entry".into()),
        Some((tl, _)) if tl == 0 || tl >= timeline => Err(format!(
            "its last entry names timeline {tl}, not a parent of {timeline}"
        )),
        Some(fork) => Ok(fork),
    }
}

impl PgCtl {
    /// The fork into `timeline` as the local PostgreSQL recorded it when it
    /// promoted (or received the history from its upstream).
    pub fn timeline_fork(&self, timeline: u32) -> Result<(u32, Lsn), String> {
        let p = self
            .cfg
            .data_dir
            .join("pg_wal")
            .join(format!("{timeline:08X}.history"));
        let name = p.display();
        let f = fs::File::open(&p).map_err(|e| format!("cannot open {name}: {e}"))?;
        let mut text = String::new();
        f.take(MAX_HISTORY_FILE + 1)
            .read_to_string(&mut text)
            .map_err(|e| format!("cannot read {name}: {e}"))?;
        if text.len() as u64 > MAX_HISTORY_FILE {
            return Err(format!("{name} is larger than {MAX_HISTORY_FILE} bytes"));
        }
        last_fork(&text, timeline).map_err(|e| format!("{name}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_entry_is_the_fork() {
        let text = "1\t0/3000060\tno recovery target specified\n\n\
                    # a comment\n2\t0/5000000\tno recovery target specified\n";
        assert_eq!(last_fork(text, 3), Ok((2, 0x500_0000)));
        assert_eq!(
            last_fork("1\t0/30000A0\treason with\ttabs\n", 2),
            Ok((1, 0x300_00A0))
        );
    }

    #[test]
    fn garbage_is_an_error_naming_the_line() {
        for (text, what) in [
            ("", "no entry"),
            ("# only a comment\n", "no entry"),
            ("x\t0/1\tr\n", "line 1: timeline"),
            ("1\t0/1\tr\n1\tnope\tr\n", "line 2: position"),
            ("1\n", "line 1: expected"),
            ("2\t0/1\tr\n", "not a parent of 2"),
            ("0\t0/1\tr\n", "not a parent of 2"),
        ] {
            let e = last_fork(text, 2).unwrap_err();
            assert!(e.contains(what), "{text:?}: {e}");
        }
    }
}
