//! The CPU time this process's threads have used, to the nanosecond (each thread's
//! `schedstat`); threads that have ended no longer count. Shared by the idle-client test,
//! `cargo bench --bench execute` and the `serve_protocol` bench (which include it by path).

/// The CPU time every live thread of this process has used, in nanoseconds.
pub fn process_cpu_ns() -> u64 {
    cpu_ns_of("self")
}

/// The CPU time process `pid` (`self`, or a number, as `/proc` names it) has used, threads
/// that have ended included, to the clock tick (10 ms): for runs of seconds whose threads end.
#[allow(dead_code)]
pub fn all_threads_cpu_ns(pid: &str) -> u64 {
    // The fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    stat_ticks(pid, 11) * 10_000_000
}

/// The CPU time the children `pid` has waited for have used (cutime and cstime), likewise.
#[allow(dead_code)]
pub fn waited_children_cpu_ns(pid: &str) -> u64 {
    stat_ticks(pid, 13) * 10_000_000
}

/// Two clock-tick fields of `/proc/PID/stat`, summed: those `skip` fields past the command.
fn stat_ticks(pid: &str, skip: usize) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    (rest.split_whitespace().skip(skip).take(2))
        .filter_map(|f| f.parse::<u64>().ok())
        .sum()
}

fn cpu_ns_of(pid: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    (tasks.flatten())
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}
