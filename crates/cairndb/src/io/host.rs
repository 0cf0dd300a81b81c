//! The host as the engine sees it, besides its files: how much memory the
//! process could still take. Every question the engine asks of the machine
//! goes through [`Host`], reached from the file system backend
//! ([`Fs::host`](super::Fs::host)): [`Machine`] asks the running kernel,
//! and a simulated file system answers for itself, so a simulated run does
//! not depend on the machine it runs on.

/// What the engine asks of the machine it runs on.
pub trait Host: Send + Sync {
    /// Memory this process could still take, in bytes (page cache the
    /// kernel may drop included); `None` where it cannot be told.
    fn mem_available(&self) -> Option<u64>;
}

/// The machine the process runs on, asked through `/proc` and the memory
/// cgroup files under `/sys/fs/cgroup`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Machine;

impl Host for Machine {
    fn mem_available(&self) -> Option<u64> {
        probe_mem_available()
    }
}

/// Memory this process could still take, in bytes: `MemAvailable` from
/// `/proc/meminfo` (what the kernel could give without swapping, page
/// cache it may drop included), or less where a memory cgroup the
/// process runs in has a limit (`cgroup_room`): a container's cap, not
/// the machine's memory, is what the page cache can hold for it.
fn probe_mem_available() -> Option<u64> {
    let machine = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| parse_mem_available(&text));
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|text| cgroup_room(&text, std::path::Path::new("/sys/fs/cgroup")));
    match (machine, cgroup) {
        (Some(m), Some(c)) => Some(m.min(c)),
        (m, c) => m.or(c),
    }
}

/// The least room left under any memory limit on the way from the
/// process's cgroups (`proc_cgroup`: the text of `/proc/self/cgroup`) up
/// to the hierarchy's root under `root` (`/sys/fs/cgroup`): a limit less
/// the anonymous memory charged below it (the page cache inside a limit
/// is reclaimed before the limit is hit, as `MemAvailable` counts it).
/// cgroup v1 (`memory.limit_in_bytes`, `total_rss`, under `memory/`) and
/// v2 (`memory.max`, `anon`, at `root` or under `unified/`). `None` if no
/// limit applies or none could be read.
fn cgroup_room(proc_cgroup: &str, root: &std::path::Path) -> Option<u64> {
    let mut room: Option<u64> = None;
    for line in proc_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (base, limit_file, anon_key) = if controllers.split(',').any(|c| c == "memory") {
            (root.join("memory"), "memory.limit_in_bytes", "total_rss")
        } else if id == "0" && controllers.is_empty() {
            let base = if root.join("cgroup.controllers").exists() {
                root.to_path_buf()
            } else {
                root.join("unified")
            };
            (base, "memory.max", "anon")
        } else {
            continue;
        };
        let mut dir = base.join(path.trim_start_matches('/'));
        loop {
            if let Some(r) = cgroup_level_room(&dir, limit_file, anon_key) {
                room = Some(room.map_or(r, |least| least.min(r)));
            }
            if dir == base || !dir.pop() {
                break;
            }
        }
    }
    room
}

/// Room under one cgroup's memory limit (`cgroup_room`); `None` without
/// a limit ("max" in v2, a near-`i64::MAX` in v1) or its files.
fn cgroup_level_room(dir: &std::path::Path, limit_file: &str, anon_key: &str) -> Option<u64> {
    let limit: u64 = std::fs::read_to_string(dir.join(limit_file))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    if limit >= 1 << 60 {
        return None;
    }
    let stat = std::fs::read_to_string(dir.join("memory.stat")).unwrap_or_default();
    let anon = stat
        .lines()
        .find_map(|l| {
            l.strip_prefix(anon_key)?
                .strip_prefix(' ')?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);
    Some(limit.saturating_sub(anon))
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut words = line.split_whitespace().skip(1);
    let kib: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => kib.checked_mul(1024),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_read_in_bytes() {
        let text = "MemTotal:       24600000 kB\nMemFree:  100 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(parse_mem_available(text), Some(2 << 20));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: 5 MB\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: x kB\n"), None);
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_memory_cgroup_limit_bounds_the_room() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let write = |path: &str, text: &str| {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        // cgroup v1: no limit at the root or in `a`, 1 GiB on `a/b` with
        // 100 MiB of anonymous memory charged under it.
        write("memory/memory.limit_in_bytes", "9223372036854771712\n");
        write("memory/a/memory.limit_in_bytes", "9223372036854771712\n");
        write("memory/a/b/memory.limit_in_bytes", "1073741824\n");
        write(
            "memory/a/b/memory.stat",
            "cache 5\nrss 7\ntotal_cache 900\ntotal_rss_huge 3\ntotal_rss 104857600\n",
        );
        let v1 = "5:devices:/\n4:memory:/a/b\n0::/\n";
        assert_eq!(cgroup_room(v1, root), Some((1 << 30) - (100 << 20)));
        // A tighter limit above wins.
        write("memory/a/memory.limit_in_bytes", "536870912\n");
        write("memory/a/memory.stat", "total_rss 0\n");
        assert_eq!(cgroup_room(v1, root), Some(512 << 20));
        // No memory line, or no limit anywhere: nothing known.
        assert_eq!(cgroup_room("5:devices:/\n", root), None);
        assert_eq!(cgroup_room("4:memory:/\n", root), None);
        // cgroup v2 (hybrid: under unified/): "max" is no limit.
        write("unified/x/memory.max", "max\n");
        write("unified/x/y/memory.max", "2147483648\n");
        write(
            "unified/x/y/memory.stat",
            "anon_thp 9\nanon 1073741824\nfile 12\n",
        );
        assert_eq!(cgroup_room("0::/x\n", root), None);
        assert_eq!(cgroup_room("0::/x/y\n", root), Some(1 << 30));
        // Both: the least room.
        assert_eq!(
            cgroup_room("4:memory:/a/b\n0::/x/y\n", root),
            Some(512 << 20)
        );
        // Pure v2, mounted at the root.
        write("cgroup.controllers", "memory\n");
        write("z/memory.max", "1048576\n");
        assert_eq!(cgroup_room("0::/z\n", root), Some(1 << 20));
    }
}
