//! Build script: the git revision `tenure --version` prints (`TENURE_GIT_REV`).
//!
//! Owns: asking git for the short revision of the checkout being built. Must never:
//! fail the build (outside a git checkout, without git, or with a repository git
//! refuses to read, the revision is "unknown"), or make cargo rebuild the crate
//! when nothing but an unrelated file changed (it watches only git's HEAD and the
//! branch it names; with no rerun-if-changed line cargo would rerun it, and rebuild
//! everything, on any change in the package).
//!
//! `TENURE_GIT_REV` set in the environment wins (a build from a source tarball
//! that knows its revision).

use std::path::{Path, PathBuf};
use std::process::Command;

/// `git <args>` in the package's directory: its trimmed stdout, or None on any
/// failure (no git, not a checkout, an error).
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// Re-run when `path` (as git prints it, relative to `dir` or absolute) changes; a
/// path that does not exist is not watched (cargo would rerun every build).
fn watch(dir: &Path, path: Option<String>) {
    let Some(p) = path else { return };
    let p = PathBuf::from(p);
    let p = if p.is_absolute() { p } else { dir.join(p) };
    if p.exists() {
        println!("cargo:rerun-if-changed={}", p.display());
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=TENURE_GIT_REV");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| ".".into()));
    let given = std::env::var("TENURE_GIT_REV")
        .ok()
        .filter(|v| !v.trim().is_empty());
    let rev = match given {
        Some(v) => v.trim().to_string(),
        None => {
            // HEAD moves on checkout; the branch's ref (loose, or in packed-refs)
            // on commit. In a worktree git names the right files itself.
            watch(&dir, git(&dir, &["rev-parse", "--git-path", "HEAD"]));
            if let Some(branch) = git(&dir, &["symbolic-ref", "-q", "HEAD"]) {
                watch(&dir, git(&dir, &["rev-parse", "--git-path", &branch]));
            }
            watch(&dir, git(&dir, &["rev-parse", "--git-path", "packed-refs"]));
            git(&dir, &["rev-parse", "--short", "HEAD"])
                .filter(|r| r.bytes().all(|b| b.is_ascii_hexdigit()))
                .unwrap_or_else(|| "unknown".into())
        }
    };
    println!("cargo:rustc-env=TENURE_GIT_REV={rev}");
}
