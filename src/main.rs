//! `tenure`: the agent binary. This is the test-bed branch's minimal dispatcher:
//! `tenure demo [--keep]` only; `tenure run --config FILE` is the agent work's
//! (the integrator merges the two).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("demo") => {
            let keep = match args.get(1).map(String::as_str) {
                None => false,
                Some("--keep") => true,
                Some(other) => {
                    eprintln!(
                        "tenure demo: unknown argument {other:?} (usage: tenure demo [--keep])"
                    );
                    return ExitCode::from(2);
                }
            };
            match tenure::demo::run(keep) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("tenure demo: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => {
            eprintln!(
                "usage: tenure demo [--keep]   (tenure run --config FILE: not in this branch yet)"
            );
            ExitCode::from(2)
        }
    }
}
