//! The operating system's calls the runtime needs beyond std: what a compile worker sets on
//! itself at start (an address-space limit, so a program that makes the compiler grow ends
//! the worker, and death with its parent), and how cache files are opened.

use std::io;

/// `open` flags for a file that must be regular: never through a symbolic link, never waiting
/// for a FIFO's writer (the caller checks the type with `fstat` once open).
pub const NO_LINK_NO_WAIT: i32 = libc::O_NOFOLLOW | libc::O_NONBLOCK;

/// Limits this process's address space (`RLIMIT_AS`) to `bytes`: past it, allocations fail and
/// the compiler aborts (SIGABRT), which the client reads as `CompilerCrashed`.
pub fn limit_address_space(bytes: u64) -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: bytes as libc::rlim_t,
        rlim_max: bytes as libc::rlim_t,
    };
    // SAFETY: setrlimit reads the struct we pass and nothing else.
    if unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks the kernel to SIGKILL this process when the thread that started it ends
/// (`PR_SET_PDEATHSIG`), then checks that the parent is still `expected_parent`: one that died
/// before the request was made would never send the signal.
pub fn die_with_parent(expected_parent: u32) -> io::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes one integer argument; the rest are ignored.
    if unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    match std::os::unix::process::parent_id() {
        p if p == expected_parent => Ok(()),
        p => Err(io::Error::other(format!(
            "the parent that started this process ({expected_parent}) is gone (now {p})"
        ))),
    }
}
