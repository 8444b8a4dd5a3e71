//! Each way loading a plugin can fail has its own error: a missing file, a file that is not a
//! plugin (text, or a shared object without `GetPjrtApi`), a plugin that fails to initialise, and
//! a plugin of another ABI major. The broken plugins are tiny C files compiled here with `cc`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use pjrt_actors::{Client, Error, PluginError};

fn compile_fake_plugin(name: &str, body: &str) -> PathBuf {
    let dir = common::scratch_dir("fake-plugins");
    let src = dir.join(format!("{name}.c"));
    let so = dir.join(format!("{name}.so"));
    std::fs::write(&src, body).unwrap();
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .status()
        .expect("cc is needed to build the fake plugins");
    assert!(status.success());
    so
}

/// A fake `GetPjrtApi` returning a table header with the given version.
fn versioned_plugin(name: &str, major: i32, minor: i32) -> PathBuf {
    compile_fake_plugin(
        name,
        &format!(
            r#"
            #include <stddef.h>
            struct Version {{ size_t struct_size; void* ext; int major; int minor; }};
            struct Api {{ size_t struct_size; void* ext; struct Version version; void* fns[118]; }};
            static struct Api api = {{ sizeof(struct Api), 0, {{ sizeof(struct Version), 0, {major}, {minor} }}, {{0}} }};
            const struct Api* GetPjrtApi(void) {{ return &api; }}
            "#
        ),
    )
}

fn open(path: &Path) -> Error {
    Client::builder().plugin_path(path).open().unwrap_err()
}

#[test]
fn a_missing_file() {
    let err = open(Path::new("/nonexistent/xla_cpu_pjrt.so"));
    assert!(
        matches!(err, Error::Plugin(PluginError::NotFound { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("/nonexistent/xla_cpu_pjrt.so"));
}

#[test]
fn a_text_file() {
    let path = common::scratch_dir("text").join("plugin.so");
    std::fs::write(&path, "this is not an ELF file\n").unwrap();
    let err = open(&path);
    assert!(
        matches!(err, Error::Plugin(PluginError::NotAPlugin { .. })),
        "{err}"
    );
}

#[test]
fn a_shared_object_without_the_entry_point() {
    let path = compile_fake_plugin("no_entry", "int not_pjrt(void) { return 1; }");
    let err = open(&path);
    match err {
        Error::Plugin(PluginError::NotAPlugin { reason, .. }) => {
            assert!(reason.contains("GetPjrtApi"))
        }
        other => panic!("wrong error: {other}"),
    }
}

#[test]
fn a_plugin_that_fails_to_initialise() {
    let path = compile_fake_plugin("null_api", "const void* GetPjrtApi(void) { return 0; }");
    let err = open(&path);
    assert!(
        matches!(err, Error::Plugin(PluginError::InitFailed { .. })),
        "{err}"
    );
}

#[test]
fn a_plugin_of_another_major_or_too_old() {
    let err = open(&versioned_plugin("major_one", 1, 0));
    assert!(
        matches!(
            err,
            Error::Plugin(PluginError::AbiMismatch {
                major: 1,
                minor: 0,
                ..
            })
        ),
        "{err}"
    );
    let err = open(&versioned_plugin("too_old", 0, 40));
    assert!(
        matches!(
            err,
            Error::Plugin(PluginError::AbiMismatch { minor: 40, .. })
        ),
        "{err}"
    );
}

/// Clients of one plugin share its one loaded instance, however its path is spelled: a client
/// opened through a symlink to the plugin holds the very `Plugin` loaded from the real path
/// (its reference count grows), not a second load of the same file.
#[test]
fn the_plugin_is_loaded_once_and_shared() {
    use pjrt_actors_core::pjrt::Plugin;
    use std::sync::Arc;
    let a = Client::open().unwrap();
    let plugin = Plugin::load(a.plugin_path()).unwrap();
    let link = common::scratch_dir("plugin-link").join("linked_plugin.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(a.plugin_path(), &link).unwrap();
    assert!(Arc::ptr_eq(&plugin, &Plugin::load(&link).unwrap()));
    let held_before = Arc::strong_count(&plugin);
    let b = Client::builder().plugin_path(&link).open().unwrap();
    assert!(
        Arc::strong_count(&plugin) > held_before,
        "the client opened through {} holds a plugin of its own",
        link.display()
    );
    assert_eq!(b.plugin_api_version(), a.plugin_api_version());
}

/// `scripts/test` names the plugin each of its suite runs is meant to be on
/// (`PJRT_ACTORS_SUITE_PLUGIN`, the PJRT C API minor version): the run checks it is, so a
/// missing 0.115 plugin cannot quietly make both runs the 0.81 one. Run by hand with a plugin
/// named by `PJRT_PLUGIN_PATH`, that very file is the one opened; with none named, the default:
/// the 0.115 plugin bootstrap installs.
#[test]
fn the_suite_runs_on_the_plugin_it_is_meant_to() {
    let client = pjrt_actors::Client::open().unwrap();
    let (_, minor) = client.plugin_api_version();
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
    match std::env::var("PJRT_ACTORS_SUITE_PLUGIN") {
        Ok(meant) => assert_eq!(
            minor.to_string(),
            meant.trim_start_matches("0."),
            "this run is meant for the PJRT C API {meant} plugin"
        ),
        Err(_) => match std::env::var_os("PJRT_PLUGIN_PATH") {
            Some(named) => assert_eq!(
                canonical(client.plugin_path()),
                canonical(Path::new(&named)),
                "PJRT_PLUGIN_PATH names the plugin opened"
            ),
            None => {
                let default = Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join(".pjrt/xla_cpu_0115/pjrt_c_api_cpu_plugin.so");
                assert_eq!(canonical(client.plugin_path()), canonical(&default));
                assert_eq!(minor, 115, "the default plugin is the 0.115 one");
            }
        },
    }
}
