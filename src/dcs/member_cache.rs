//! The last parse of each member's value (issue 13 item 2).
//!
//! Owns: per member name, the raw value of `members/<name>` last read and, once the
//! same bytes were read twice in a row, what `keys::parse_member` made of them. A
//! cluster read whose member values did not change (every idle loop: each agent
//! rewrites its key with the same bytes) then costs a clone of the parsed fields
//! instead of a JSON parse into a `serde_json::Value` — about 33 heap allocations
//! per member per loop fewer (docs/benchmarks.md §8). A value that changes every loop (a member under
//! write load publishes a new position each time) costs what it cost before: the
//! parse, plus a copy of the bytes into a buffer that keeps its capacity.
//! Must never: return anything but what `parse_member` returns for the same bytes
//! (a hit needs the whole value equal), or grow without bound (names come from
//! etcd: past `CAP` names the map starts over).

use crate::core::model::MemberInfo;

use super::keys;

/// Member names remembered; past it the map starts over.
const CAP: usize = 256;

struct Entry {
    name: Vec<u8>,
    raw: Vec<u8>,
    /// The parse of `raw`, kept once `raw` was seen twice in a row.
    info: Option<MemberInfo>,
}

#[derive(Default)]
pub(super) struct MemberCache {
    /// A linear scan: a cluster has a handful of members.
    entries: Vec<Entry>,
}

impl MemberCache {
    /// `keys::parse_member(raw)` for the value of `members/<name>`, without parsing
    /// when these exact bytes were parsed for this name before.
    pub(super) fn parse(&mut self, name: &[u8], raw: &[u8]) -> MemberInfo {
        let Some(i) = self.entries.iter().position(|e| e.name == name) else {
            if self.entries.len() >= CAP {
                self.entries.clear();
            }
            self.entries.push(Entry {
                name: name.to_vec(),
                raw: raw.to_vec(),
                info: None,
            });
            return keys::parse_member(raw);
        };
        let e = &mut self.entries[i];
        if e.raw != raw {
            // Changed: remember the bytes (the buffer keeps its capacity) and parse.
            e.raw.clear();
            e.raw.extend_from_slice(raw);
            e.info = None;
            return keys::parse_member(raw);
        }
        match &e.info {
            Some(info) => info.clone(),
            None => {
                // INVARIANT: `info` is only ever the parse of `raw` as it is now.
                let info = keys::parse_member(raw);
                e.info = Some(info.clone());
                info
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_answer_is_the_parse_of_the_bytes_given() {
        let a = br#"{"role":"replica","xlog_location":100,"state":"running"}"#;
        let b = br#"{"role":"replica","xlog_location":200,"state":"running"}"#;
        let junk = b"{not json";
        let mut c = MemberCache::default();
        for (name, raw) in [
            (&b"pg1"[..], &a[..]),
            (b"pg1", a),
            (b"pg1", a),
            (b"pg2", a),
            (b"pg1", b),
            (b"pg1", b),
            (b"pg1", b),
            (b"pg1", a),
            (b"pg1", junk),
            (b"pg1", junk),
            (b"pg1", junk),
        ] {
            assert_eq!(c.parse(name, raw), keys::parse_member(raw));
        }
    }

    #[test]
    fn names_beyond_the_cap_start_the_map_over() {
        let mut c = MemberCache::default();
        for i in 0..(CAP + 10) {
            let name = format!("m{i}");
            let _ = c.parse(name.as_bytes(), b"{}");
        }
        assert!(c.entries.len() <= CAP);
    }
}
