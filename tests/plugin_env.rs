//! Discovery honours `PJRT_PLUGIN_PATH` first and does not fall back when it names nothing.
//! Alone in its binary: it changes the process environment.

use pjrt_actors::{Client, Error, PLUGIN_PATH_ENV, PluginError};

#[test]
fn the_env_var_is_used_and_a_bad_one_is_reported() {
    let good = Client::open().unwrap().plugin_path().to_owned();
    // SAFETY of set_var: this binary runs this one test, on one thread.
    unsafe { std::env::set_var(PLUGIN_PATH_ENV, "/nonexistent/from-env.so") };
    let err = Client::open().unwrap_err();
    assert!(
        matches!(err, Error::Plugin(PluginError::NotFound { ref path }) if path.ends_with("from-env.so")),
        "{err}"
    );
    unsafe { std::env::set_var(PLUGIN_PATH_ENV, &good) };
    assert_eq!(Client::open().unwrap().plugin_path(), good);
    unsafe { std::env::remove_var(PLUGIN_PATH_ENV) };
}
