//! The shutdown checkpoint from `global/pg_control` (issue 9: the release marker).
//!
//! Owns: reading the control file's state, latest checkpoint location and its
//! timeline, read directly (no `pg_controldata` child: the loop must not wait on
//! one) at the offsets PostgreSQL 9.6 to 17 share.
//!
//! Must never: report a checkpoint unless the control file says `shut down` (a
//! crash, an immediate stop or a running server leaves WAL after it).

use super::PgCtl;
use crate::core::model::Lsn;

/// `DB_SHUTDOWNED` in `ControlFileData.state`.
const DB_SHUTDOWNED: u32 = 1;

/// `(timeline, location)` of the shutdown checkpoint in a control file: `state` at
/// 16, `checkPoint` (the latest checkpoint's location) at 32, and
/// `checkPointCopy.ThisTimeLineID` at 48 (after its 8-byte `redo`).
pub fn shutdown_checkpoint_of(ctl: &[u8]) -> Result<(u32, Lsn), String> {
    let u32_at = |o: usize| -> Option<u32> {
        let b = ctl.get(o..o + 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| -> Option<u64> {
        let b = ctl.get(o..o + 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(u64::from_le_bytes(a))
    };
    let (Some(state), Some(lsn), Some(tl)) = (u32_at(16), u64_at(32), u32_at(48)) else {
        return Err(format!("pg_control is {} bytes, too short", ctl.len()));
    };
    if state != DB_SHUTDOWNED {
        return Err(format!(
            "pg_control says state {state}, not shut down: no shutdown checkpoint is the last WAL"
        ));
    }
    if lsn == 0 || tl == 0 {
        return Err("pg_control names no checkpoint".into());
    }
    Ok((tl, lsn))
}

impl PgCtl {
    /// The shutdown checkpoint of the stopped local PostgreSQL.
    pub fn shutdown_checkpoint(&self) -> Result<(u32, Lsn), String> {
        let p = self.cfg.data_dir.join("global").join("pg_control");
        // As `dir_state` reads it: non-blocking, a regular file, bounded.
        let (b, _) = super::read_regular(&p, 64 << 10, false)
            .and_then(|r| r.ok_or_else(|| "missing".into()))
            .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
        shutdown_checkpoint_of(&b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_clean_shutdown_names_its_checkpoint() {
        let mut b = vec![0u8; 64];
        b[16..20].copy_from_slice(&1u32.to_le_bytes());
        b[32..40].copy_from_slice(&0x0300_0028u64.to_le_bytes());
        b[48..52].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(shutdown_checkpoint_of(&b), Ok((2, 0x0300_0028)));
        // In production (6), crash recovery (4): not clean.
        for state in [6u32, 4, 2] {
            b[16..20].copy_from_slice(&state.to_le_bytes());
            assert!(shutdown_checkpoint_of(&b).is_err());
        }
        assert!(shutdown_checkpoint_of(&b[..40]).is_err());
    }
}
