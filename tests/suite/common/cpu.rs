//! The CPU time this process's threads have used, to the nanosecond (each thread's
//! `schedstat`); threads that have ended no longer count. Shared by the idle-client test and
//! `cargo bench --bench execute` (which includes this file by path).

/// The CPU time every live thread of this process has used, in nanoseconds.
pub fn process_cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    (tasks.flatten())
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}
