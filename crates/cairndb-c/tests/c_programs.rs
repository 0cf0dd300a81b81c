//! Compiles the C programs of `tests/c/` with the system C compiler
//! against the library cargo built (`libcairndb_c.so`, and
//! `libcairndb_c.a` for one of them) and runs each in a scratch
//! directory. One program also runs under valgrind, when it is installed,
//! to check that what the library hands out is released as documented
//! and nothing leaks.
//!
//! The library is found next to this test binary: cargo builds the crate's
//! cdylib and staticlib into `target/<profile>/deps/` (the directory of
//! the test binary) before running integration tests, and copies them one
//! level up on `cargo build`.

#![allow(clippy::unwrap_used, reason = "test code")]

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory holding `libcairndb_c.<ext>`.
fn lib_dir(ext: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let name = format!("libcairndb_c.{ext}");
    for dir in [deps, deps.parent().unwrap()] {
        if dir.join(&name).exists() {
            return dir.to_path_buf();
        }
    }
    panic!(
        "{name} not found next to {} (is crate-type still cdylib + staticlib?)",
        exe.display()
    )
}

/// The C compiler: `$CC`, else `cc`.
fn compiler() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// How to link the library: shared (with an rpath to it) or static (with
/// the system libraries Rust's standard library needs).
#[derive(Clone, Copy)]
enum Link {
    Shared,
    Static,
}

/// Compiles `tests/c/<name>.c` into `out`, returning the program's path.
fn build(name: &str, link: Link, out: &Path) -> PathBuf {
    let src = crate_dir().join("tests/c").join(format!("{name}.c"));
    build_source(&src, name, link, out)
}

/// Compiles the C file `src` into `out/<name>`, returning its path.
fn build_source(src: &Path, name: &str, link: Link, out: &Path) -> PathBuf {
    let exe = out.join(name);
    let mut cmd = Command::new(compiler());
    cmd.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-O1"])
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg(src)
        .arg("-o")
        .arg(&exe);
    match link {
        Link::Shared => {
            let dir = lib_dir("so");
            cmd.arg("-L")
                .arg(&dir)
                .arg("-lcairndb_c")
                .arg(format!("-Wl,-rpath,{}", dir.display()));
        }
        Link::Static => {
            cmd.arg(lib_dir("a").join("libcairndb_c.a"));
            cmd.args([
                "-lgcc_s",
                "-lutil",
                "-lrt",
                "-lpthread",
                "-lm",
                "-ldl",
                "-lc",
            ]);
        }
    }
    cmd.arg("-lpthread");
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("running the C compiler {:?}: {e}", compiler()));
    assert!(
        status.success(),
        "compiling {} failed: {status}",
        src.display()
    );
    exe
}

/// Runs `program` (under `wrapper`, if given) with a scratch directory as
/// its argument; fails the test on a non-zero exit.
fn run(program: &Path, wrapper: &[&str], scratch: &Path) {
    let mut cmd = match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(program);
            c
        }
        None => Command::new(program),
    };
    let out = cmd.arg(scratch).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{} failed ({}):\n{text}",
        program.display(),
        out.status
    );
    print!("{text}");
}

fn build_and_run(name: &str, link: Link) {
    let scratch = tempfile::tempdir().unwrap();
    let exe = build(name, link, scratch.path());
    run(&exe, &[], scratch.path());
}

/// The repository README's C example compiles and runs as written (its
/// database in a scratch directory instead of /tmp).
#[test]
fn readme_example() {
    let readme = crate_dir().join("../../README.md");
    let text = std::fs::read_to_string(&readme).unwrap();
    let start = text.find("```c\n").expect("README has a C example") + "```c\n".len();
    let len = text[start..].find("```").expect("the C example ends");
    let path = "/tmp/cairndb-example-c";
    assert!(
        text[start..start + len].contains(path),
        "the example opens {path}"
    );
    let scratch = tempfile::tempdir().unwrap();
    let db = scratch.path().join("db");
    let code = text[start..start + len].replace(path, db.to_str().unwrap());
    let src = scratch.path().join("readme_example.c");
    std::fs::write(&src, code).unwrap();
    let exe = build_source(&src, "readme_example", Link::Shared, scratch.path());
    run(&exe, &[], scratch.path());
    assert!(db.exists(), "the example created its database");
}

#[test]
fn api_test() {
    build_and_run("api_test", Link::Shared);
}

#[test]
fn api_test_linked_statically() {
    build_and_run("api_test", Link::Static);
}

#[test]
fn threads_test() {
    build_and_run("threads_test", Link::Shared);
}

#[test]
fn extras_test() {
    build_and_run("extras_test", Link::Shared);
}

#[test]
fn ownership_test() {
    build_and_run("ownership_test", Link::Shared);
}

/// `ownership_test` under valgrind: no leak of what the library hands out
/// (values, property strings, error messages) when the program frees it
/// as documented, and no invalid access. Skipped, with a note, where
/// valgrind is not installed.
#[test]
fn ownership_test_under_valgrind() {
    let found = Command::new("valgrind").arg("--version").output();
    if !found.is_ok_and(|o| o.status.success()) {
        println!("note: valgrind is not installed; skipping the leak check");
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let exe = build("ownership_test", Link::Shared, scratch.path());
    run(
        &exe,
        &[
            "valgrind",
            "--quiet",
            "--leak-check=full",
            "--error-exitcode=1",
        ],
        scratch.path(),
    );
}
