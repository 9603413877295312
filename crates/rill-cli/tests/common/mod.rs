//! What the `rill` binary's tests share: the fixtures and running the
//! binary as a user does.
#![allow(dead_code)] // each test file uses its own part

use std::path::PathBuf;
use std::process::{Command, Output};

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The committed model fixtures.
pub fn fixtures() -> PathBuf {
    root().join("fixtures/models")
}

/// The path of fixture model `name`.
pub fn fixture(name: &str) -> String {
    fixtures().join(name).to_string_lossy().into_owned()
}

/// `rill ARGS` (never a model from the environment).
pub fn rill(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rill"))
        .args(args)
        .env_remove("RILL_MODEL")
        .output()
        .expect("run rill")
}

/// `rill ARGS`, which must succeed: its stdout.
pub fn ok(args: &[&str]) -> String {
    let out = rill(args);
    assert!(
        out.status.success(),
        "rill {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// `rill ARGS`, which must fail with a message and not a panic: its stderr.
pub fn refused(args: &[&str]) -> String {
    let out = rill(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "rill {args:?} ran: {err}");
    assert!(!err.contains("panicked"), "rill {args:?} panicked: {err}");
    err
}

/// `rill inspect PATH`, which must say each of `wants`: its output.
pub fn inspect_says(path: &str, wants: &[&str]) -> String {
    let info = ok(&["inspect", path]);
    for want in wants {
        assert!(info.contains(want), "missing {want:?} in\n{info}");
    }
    info
}
