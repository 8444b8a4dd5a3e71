//! The disk cache against hostile files (issue 22, C11–C13): a FIFO, a device or a link at an
//! entry's path never blocks or exhausts a compile, a failed write leaves no temporary file,
//! and clearing deletes only entries of ours.

use std::time::Duration;

use pjrt_actors::{Client, CompileOptions, DiskCache};

use crate::common::{cache_entries, check_distinct, distinct_module, scratch_dir, within};

/// Compiles module `n` through a fresh client on `dir` within 20 s, checks its results, and
/// returns the client's (disk hits, compiles, corrupt entries).
fn compile_on(dir: &std::path::Path, n: usize) -> (u64, u64, u64) {
    let dir = dir.to_owned();
    within(Duration::from_secs(20), move || {
        let client = Client::builder()
            .compile_cache_dir(&dir)
            .memory_cache_entries(0)
            .open()
            .unwrap();
        let (program, dims) = distinct_module(n, 1);
        let exe = client
            .compile_and_load(&program, &CompileOptions::default())
            .unwrap();
        check_distinct(&exe, &client.devices()[0], &dims, 1);
        let s = client.compile_cache_stats();
        (s.disk_hits, s.compiles, s.corrupt_entries)
    })
}

#[test]
fn a_fifo_a_device_or_a_link_at_an_entrys_path_is_removed_not_read() {
    let dir = scratch_dir("hostile-entries");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    assert_eq!(compile_on(&dir, 800), (0, 1, 0));
    let entry = cache_entries(&dir).remove(0);
    let saved = std::fs::read(&entry).unwrap();
    assert_eq!(compile_on(&dir, 800), (1, 0, 0), "a real entry hits");
    // A good entry outside the directory, linked in: still not followed.
    let outside = scratch_dir("hostile-outside").join("entry.pjx");
    std::fs::write(&outside, &saved).unwrap();
    let mkfifo = |p: &std::path::Path| {
        assert!(
            std::process::Command::new("mkfifo")
                .arg(p)
                .status()
                .unwrap()
                .success()
        );
    };
    type Plant = Box<dyn Fn(&std::path::Path)>;
    let plants: [(&str, Plant); 3] = [
        ("a FIFO (blocked the compile for ever)", Box::new(mkfifo)),
        (
            "a link to /dev/zero (read until memory ran out)",
            Box::new(|p| std::os::unix::fs::symlink("/dev/zero", p).unwrap()),
        ),
        (
            "a link to an entry outside the directory",
            Box::new(move |p| std::os::unix::fs::symlink(&outside, p).unwrap()),
        ),
    ];
    for (what, plant) in plants {
        std::fs::remove_file(&entry).unwrap();
        plant(&entry);
        assert_eq!(compile_on(&dir, 800), (0, 1, 1), "{what}");
        // Recompiled and stored anew, as a regular file.
        let meta = std::fs::symlink_metadata(&entry).unwrap();
        assert!(meta.file_type().is_file(), "{what}: {:?}", meta.file_type());
    }
}

/// The child side of `a_failed_write_leaves_no_temporary_file`: a store past the file size
/// limit its parent set (`ulimit -f`) fails, and leaves nothing behind.
#[test]
#[ignore = "a child process of a_failed_write_leaves_no_temporary_file"]
fn failed_store_child() {
    let dir = std::path::PathBuf::from(std::env::var("PJRT_ACTORS_TEST_STORE_DIR").unwrap());
    let cache = DiskCache::open(&dir, 1 << 30, Default::default()).unwrap();
    let key = pjrt_actors_core::compile::cache::CompileKey::new("test", b"program", b"options");
    let err = cache.store(&key, &vec![7u8; 64 << 10]).unwrap_err();
    assert!(err.to_string().contains("File too large"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_failed_write_leaves_no_temporary_file() {
    let dir = scratch_dir("failed-store");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The shell sets a 4 KiB file size limit and ignores SIGXFSZ, so the write fails (EFBIG)
    // as on a full disk, instead of the signal ending the process.
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 8; exec \"$0\" --exact disk_cache::failed_store_child --ignored --nocapture")
        .arg(&exe)
        .env("PJRT_ACTORS_TEST_STORE_DIR", &dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
