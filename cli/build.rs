//! Stamps the build with the commit it was built from, for `floe --version`:
//! `FLOE_COMMIT` if set, else git's ("unknown commit" outside a checkout).

use std::process::Command;

fn main() {
    // Given (an image built without the .git folder passes it in).
    println!("cargo:rerun-if-env-changed=FLOE_COMMIT");
    if let Ok(commit) = std::env::var("FLOE_COMMIT")
        && !commit.trim().is_empty()
    {
        println!("cargo:rustc-env=FLOE_COMMIT={}", commit.trim());
        return;
    }
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown commit".into());
    println!("cargo:rustc-env=FLOE_COMMIT={commit}");
    // Again when HEAD moves: HEAD itself, and the branch it names.
    println!("cargo:rerun-if-changed=../.git/HEAD");
    if let Ok(head) = std::fs::read_to_string("../.git/HEAD")
        && let Some(branch) = head.trim().strip_prefix("ref: ")
    {
        println!("cargo:rerun-if-changed=../.git/{branch}");
    }
}
