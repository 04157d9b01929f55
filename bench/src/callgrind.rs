//! `--instructions`: the bench's server runs under valgrind's callgrind, and every batch that
//! [`crate::workloads::server_hot::hot_of`] measures also reports the instructions the server
//! executed for it, per call.
//!
//! Server µs on a shared 2-core VM move by 2x between runs, which hides any change of a few µs
//! per call (docs/decisions/queue-waiter-fast-paths.md). An instruction count is the same for
//! the same binary, scripts and requests whatever else the machine does, so a change to a
//! script shows as its own difference. It counts work, not time: cache misses and the kernel's
//! share are not in it. Meant for `--only server_hot`; every other workload runs on the slowed
//! server too, and its times mean nothing then.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::BoxResult;

/// The server under callgrind: its pid and the folder of its dump files.
struct Active {
    pid: u32,
    dir: PathBuf,
}

static ACTIVE: Mutex<Option<Active>> = Mutex::new(None);

/// Writes, into `dir`, a script that starts `binary` (with the arguments the launcher gives)
/// under callgrind; returns the script's path.
pub fn wrapper(binary: &str, dir: &Path) -> BoxResult<String> {
    let ok = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        return Err(
            "--instructions needs valgrind on PATH (Debian: apt-get install valgrind)".into(),
        );
    }
    std::fs::create_dir_all(dir)?;
    let script = dir.join("callgrind-server.sh");
    let out = dir.join("cg.out");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file={} {binary} \"$@\"\n",
            out.display()
        ),
    )?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    Ok(script.display().to_string())
}

/// From now on, [`zero`] and [`dump`] work on the server `pid` whose dumps go to `dir`.
pub fn activate(pid: u32, dir: &Path) {
    *ACTIVE.lock().unwrap_or_else(|p| p.into_inner()) = Some(Active {
        pid,
        dir: dir.to_path_buf(),
    });
}

/// Whether the bench's server runs under callgrind.
pub fn active() -> bool {
    ACTIVE.lock().unwrap_or_else(|p| p.into_inner()).is_some()
}

fn control(active: &Active, flag: &str) -> BoxResult<()> {
    let out = Command::new("callgrind_control")
        .arg(flag)
        .arg(active.pid.to_string())
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "callgrind_control {flag} {}: {}",
            active.pid,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(())
}

/// Starts counting from zero (nothing when the server is not under callgrind).
pub fn zero() -> BoxResult<()> {
    match &*ACTIVE.lock().unwrap_or_else(|p| p.into_inner()) {
        Some(active) => control(active, "-z"),
        None => Ok(()),
    }
}

/// The instructions the server executed since [`zero`], or `None` when it is not under
/// callgrind.
pub fn dump() -> BoxResult<Option<u64>> {
    let guard = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(active) = &*guard else {
        return Ok(None);
    };
    control(active, "-d")?;
    // The dump is the newest `cg.out.<n>`; it is read and removed, so it is the only one.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for entry in std::fs::read_dir(&active.dir)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !name.starts_with("cg.out.") {
                continue;
            }
            let text = std::fs::read_to_string(&path)?;
            if let Some(total) = text.lines().find_map(|l| l.strip_prefix("totals:")) {
                std::fs::remove_file(&path)?;
                return Ok(Some(total.trim().parse()?));
            }
        }
        if Instant::now() > deadline {
            return Err(format!("no callgrind dump in {} after 30 s", active.dir.display()).into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
