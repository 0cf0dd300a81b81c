//! The headers and the library agree: every function the crate exports
//! is declared in `include/leveldb/c.h` or `include/cairndb.h` and every
//! declared function is exported; and the headers compile as C++ too
//! (skipped, with a note, without a C++ compiler).

#![allow(clippy::unwrap_used, reason = "test code")]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Names starting with `leveldb_` or `cairndb_` followed by `(` in `text`.
fn called_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices('(') {
        let before = &text[..i];
        let start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |p| p + 1);
        let name = &before[start..];
        if name.starts_with("leveldb_") || name.starts_with("cairndb_") {
            out.insert(name.to_owned());
        }
    }
    out
}

#[test]
fn every_export_is_declared_and_every_declaration_exported() {
    let mut declared = BTreeSet::new();
    for h in ["include/leveldb/c.h", "include/cairndb.h"] {
        let text = std::fs::read_to_string(crate_dir().join(h)).unwrap();
        declared.extend(called_names(&text));
    }
    let mut exported = BTreeSet::new();
    for entry in std::fs::read_dir(crate_dir().join("src")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines() {
            let line = line.trim_start();
            let rest = line
                .strip_prefix("pub unsafe extern \"C\" fn ")
                .or_else(|| line.strip_prefix("pub extern \"C\" fn "));
            if let Some(rest) = rest {
                exported.insert(rest.split('(').next().unwrap().to_owned());
            }
        }
    }
    assert!(exported.len() > 80, "found only {} exports", exported.len());
    let undeclared: Vec<_> = exported.difference(&declared).collect();
    let missing: Vec<_> = declared.difference(&exported).collect();
    assert!(
        undeclared.is_empty(),
        "exported, not in a header: {undeclared:?}"
    );
    assert!(missing.is_empty(), "declared, not exported: {missing:?}");
}

#[test]
fn headers_compile_as_c_and_cplusplus() {
    let scratch = tempfile::tempdir().unwrap();
    let src =
        "#include <cairndb.h>\nint main(void) { return leveldb_no_compression + CAIRNDB_OK; }\n";
    for (compiler, file, std) in [("cc", "h.c", "-std=c99"), ("c++", "h.cc", "-std=c++11")] {
        if Command::new(compiler).arg("--version").output().is_err() {
            println!("note: no {compiler}; skipping the header check for it");
            continue;
        }
        let path = scratch.path().join(file);
        std::fs::write(&path, src).unwrap();
        let status = Command::new(compiler)
            .args([std, "-Wall", "-Wextra", "-Werror", "-pedantic", "-c"])
            .arg("-I")
            .arg(crate_dir().join("include"))
            .arg(&path)
            .arg("-o")
            .arg(scratch.path().join(format!("{file}.o")))
            .status()
            .unwrap();
        assert!(
            status.success(),
            "the headers do not compile with {compiler} {std}"
        );
    }
}
