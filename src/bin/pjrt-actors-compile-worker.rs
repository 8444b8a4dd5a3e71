//! The compile worker: a process that loads a PJRT plugin, compiles the programs it is sent on
//! stdin and answers with serialized executables on stdout, so that a program that crashes the
//! compiler kills this process and not the client (see `pjrt_actors_core::compile::worker`).

#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use pjrt_actors_core::compile::program_check::COMPILE_STACK_BYTES;
use pjrt_actors_core::compile::worker::{
    PROTOCOL, READY, START_FAILED, decode_option, read_frame, write_frame,
};
use pjrt_actors_core::pjrt::os::{die_with_parent, limit_address_space};
use pjrt_actors_core::pjrt::{PjrtClient, Plugin};

fn serve(
    plugin: PathBuf,
    options: Vec<(String, pjrt_actors_core::pjrt::NamedValue)>,
) -> Result<(), String> {
    let (mut input, mut output) = (std::io::stdin().lock(), std::io::stdout().lock());
    let start = || -> Result<PjrtClient, String> {
        let plugin = Plugin::load(&plugin).map_err(|e| e.to_string())?;
        // Programs that call host callbacks name the FFI handler; it must be registered to
        // compile.
        let _ = plugin.host_callbacks();
        PjrtClient::create(plugin, &options).map_err(|e| e.to_string())
    };
    // The first byte says whether this worker started, and if not why: the client then blames
    // no program for it.
    let client = match start() {
        Ok(client) => {
            output
                .write_all(&[READY])
                .and_then(|()| output.flush())
                .map_err(|e| e.to_string())?;
            client
        }
        Err(why) => {
            let _ = output
                .write_all(&[START_FAILED])
                .and_then(|()| write_frame(&mut output, why.as_bytes()))
                .and_then(|()| output.flush());
            return Err(why);
        }
    };
    loop {
        // The client closing our stdin is the end of the work.
        let Ok(code) = read_frame(&mut input) else {
            return Ok(());
        };
        let compile_options = read_frame(&mut input).map_err(|e| e.to_string())?;
        let answer = client
            .compile(&code, "mlir", &compile_options)
            .and_then(|exe| exe.serialize());
        let written = match answer {
            Ok(executable) => output
                .write_all(&[0])
                .and_then(|()| write_frame(&mut output, &executable)),
            // The plugin's code, then its own words: the client rebuilds the same error.
            Err(e) => output.write_all(&[1]).and_then(|()| {
                let code = e.pjrt_code().map_or(0, |c| c.to_raw());
                write_frame(&mut output, &code.to_le_bytes())?;
                write_frame(&mut output, e.detail_of_plugin().as_bytes())
            }),
        };
        written
            .and_then(|()| output.flush())
            .map_err(|e| e.to_string())?;
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (mut plugin, mut options) = (None, Vec::new());
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--plugin", Some(path)) => plugin = Some(PathBuf::from(path)),
            ("--protocol", Some(v)) if v == PROTOCOL => {}
            ("--protocol", Some(v)) => {
                return fail(&format!(
                    "this worker speaks protocol {PROTOCOL}; its client asked for {v} (a worker binary of another build)"
                ));
            }
            // Die with the client: SIGKILL when its thread ends, and a watch on the parent.
            ("--parent", Some(pid)) => match pid.parse() {
                Ok(pid) => {
                    if let Err(e) = die_with_parent(pid) {
                        return fail(&e.to_string());
                    }
                    watch_parent(pid);
                }
                Err(_) => return fail(&format!("--parent: bad process id `{pid}`")),
            },
            ("--memory-limit", Some(bytes)) => match bytes.parse().map(limit_address_space) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return fail(&format!("--memory-limit: {e}")),
                Err(_) => return fail(&format!("--memory-limit: bad byte count `{bytes}`")),
            },
            ("--option", Some(text)) => match decode_option(&text) {
                Ok(option) => options.push(option),
                Err(e) => return fail(&e),
            },
            _ => return fail(&format!("unexpected argument `{arg}`")),
        }
    }
    let Some(plugin) = plugin else {
        return fail("--plugin PATH is required");
    };
    // Compiles run on a thread with the stack the client's own compile workers get.
    let worker = std::thread::Builder::new()
        .name("pjrt-actors-compile-worker".into())
        .stack_size(COMPILE_STACK_BYTES)
        .spawn(move || serve(plugin, options));
    match worker.map(|w| w.join()) {
        Ok(Ok(Ok(()))) => ExitCode::SUCCESS,
        Ok(Ok(Err(e))) => fail(&e),
        Ok(Err(_)) => fail("the compile thread panicked"),
        Err(e) => fail(&format!("cannot start the compile thread: {e}")),
    }
}

/// Ends this process when its parent changes (the parent died and it was reparented): the
/// kernel's death signal follows the parent's thread, and this covers whatever it misses.
fn watch_parent(pid: u32) {
    let _ = std::thread::Builder::new()
        .name("pjrt-actors-parent-watch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(std::time::Duration::from_millis(200));
                if std::os::unix::process::parent_id() != pid {
                    std::process::exit(1);
                }
            }
        });
}

fn fail(message: &str) -> ExitCode {
    eprintln!("pjrt-actors-compile-worker: {message}");
    ExitCode::FAILURE
}
