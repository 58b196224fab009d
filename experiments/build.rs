//! Records what a run's `run.json` names about the binary that made it:
//! the commit checked out when it was built (`git rev-parse HEAD`;
//! `unknown` outside a git checkout; edits not yet committed are not
//! recorded: watching the index would rebuild at every `git status`) and
//! the cargo profile.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=FLOWLAB_COMMIT={commit}");
    println!("cargo:rustc-env=FLOWLAB_PROFILE={}", std::env::var("PROFILE").unwrap_or_else(|_| "unknown".into()));
    // a new commit or checkout changes HEAD (or the ref it names)
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{r}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
