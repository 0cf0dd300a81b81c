//! The operator's subcommands: `stats`, `get`, `put`, `delete`, `scan`,
//! `dump`, `load`, `verify`, `compact`, `checkpoint`, `backup` and
//! `repair`, each on a database directory.
//!
//! Keys and values on the command line and in the output are encoded as
//! `--key-encoding` / `--value-encoding` say (utf8, hex, base64); a
//! script asks for `--json`. Each tool opens the database as its one
//! writer (the directory's lock), does its work and closes it.

pub mod backup;
pub mod dump;
pub mod encoding;
pub mod kv;
pub mod repair;

use cairndb::{Db, Keyspace, Options};
use encoding::Encoding;
use std::path::{Path, PathBuf};

pub type ToolResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Where the tool works: the database, and the keyspace addressed.
#[derive(clap::Args, Clone)]
pub struct Target {
    /// The database directory.
    pub db: PathBuf,
    /// The keyspace (default: "default").
    #[arg(long, short = 'k', default_value = "default")]
    pub keyspace: String,
}

/// How keys and values are written on the command line and printed.
#[derive(clap::Args, Clone, Copy)]
pub struct Encodings {
    /// Encoding of keys given and printed.
    #[arg(long, value_enum, default_value_t = Encoding::Utf8)]
    pub key_encoding: Encoding,
    /// Encoding of values given and printed.
    #[arg(long, value_enum, default_value_t = Encoding::Utf8)]
    pub value_encoding: Encoding,
}

/// Opens an existing database (never creates one).
pub fn open(path: &Path) -> ToolResult<Db> {
    let db = Db::open(
        path,
        Options {
            create_if_missing: false,
            ..Options::default()
        },
    )
    .map_err(|e| format!("opening {}: {e}", path.display()))?;
    Ok(db)
}

/// The keyspace `name` of `db`: it must exist (a typo does not create
/// one), except for "default", which always does.
pub fn keyspace(db: &Db, name: &str) -> ToolResult<Keyspace> {
    if !db.keyspaces().iter().any(|k| k == name) {
        return Err(format!(
            "no keyspace {name:?} (the database has {:?})",
            db.keyspaces()
        )
        .into());
    }
    Ok(db.keyspace(name)?)
}

/// Opens `target`'s database, runs `f` on its keyspace, then closes the
/// database (its error reported if `f` succeeded).
pub fn with_keyspace<T>(
    target: &Target,
    f: impl FnOnce(&Keyspace) -> ToolResult<T>,
) -> ToolResult<T> {
    let db = open(&target.db)?;
    let out = f(&keyspace(&db, &target.keyspace)?);
    db.close()?;
    out
}

/// A progress bar on stderr for work of `total` units, hidden when stderr
/// is not a terminal.
pub fn progress(total: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} ({eta})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}
