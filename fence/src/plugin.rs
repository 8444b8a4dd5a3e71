//! Loading a PJRT plugin: discovery, the version check, initialisation, and turning a returned
//! `PJRT_Error*` into our `Error`. A plugin is loaded once per process and never unloaded, since
//! unloading the CPU plugin segfaults in its exit handlers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use pjrt_sys as sys;

use super::abi::{self, Api};
use super::ffi_abi::FfiSupport;
use super::values::{NamedValue, read_named_values};
use crate::error::{Error, PluginError, Result};

/// The environment variable that names a plugin file.
pub const PLUGIN_PATH_ENV: &str = "PJRT_PLUGIN_PATH";

/// Where `scripts/bootstrap` installs the CPU plugins, relative to the workspace root, the
/// default first: jaxlib 0.11.2's (PJRT C API 0.115, the ABI of jax's CUDA plugin, and the
/// StableHLO current JAX writes), then the older `xla-cpu-pjrt` one (0.81).
const BOOTSTRAP_PLUGINS: [&str; 2] = [
    ".pjrt/xla_cpu_0115/pjrt_c_api_cpu_plugin.so",
    ".pjrt/xla_cpu_pjrt/xla_cpu_pjrt.so",
];

/// A loaded, initialised PJRT plugin. Lives for the rest of the process.
pub struct Plugin {
    api: &'static Api,
    path: PathBuf,
    major: i32,
    minor: i32,
    attributes: Vec<(String, NamedValue)>,
    /// Host-callback support, registered with the plugin on first use.
    ffi: OnceLock<Result<FfiSupport>>,
}

// SAFETY: the PJRT API table is immutable after `GetPjrtApi` and its functions are thread-safe
// by the PJRT contract; `Plugin` holds nothing else that is not Send + Sync.
unsafe impl Send for Plugin {}
// SAFETY: as above.
unsafe impl Sync for Plugin {}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("path", &self.path)
            .field("version", &(self.major, self.minor))
            .finish()
    }
}

fn registry() -> &'static Mutex<HashMap<PathBuf, Arc<Plugin>>> {
    static LOADED: OnceLock<Mutex<HashMap<PathBuf, Arc<Plugin>>>> = OnceLock::new();
    LOADED.get_or_init(Default::default)
}

/// The plugin file the environment names; an empty value counts as unset.
fn env_plugin() -> Option<PathBuf> {
    std::env::var_os(PLUGIN_PATH_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The places that cost nothing to look at: the env var, then the bootstrap folder.
fn quick_candidates() -> Vec<PathBuf> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    env_plugin()
        .into_iter()
        .chain(BOOTSTRAP_PLUGINS.map(|p| workspace.join(p)))
        .collect()
}

/// `xla_plugins/*/*.so` under Python's site-packages: asking Python where those are starts a
/// `python3` process (about 80 ms, and a fork from a multi-threaded process), so it is looked
/// at last, only when nothing else is found.
fn python_candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for site in python_site_packages() {
        if let Ok(entries) = std::fs::read_dir(site.join("xla_plugins")) {
            let mut found: Vec<PathBuf> = entries
                .flatten()
                .filter(|e| e.path().is_dir())
                .flat_map(|e| std::fs::read_dir(e.path()).into_iter().flatten().flatten())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "so"))
                .collect();
            found.sort();
            out.extend(found);
        }
    }
    out
}

fn python_site_packages() -> Vec<PathBuf> {
    let output = std::process::Command::new("python3")
        .args([
            "-c",
            "import site,sys; print('\\n'.join(site.getsitepackages()+[site.getusersitepackages()]))",
        ])
        .stderr(std::process::Stdio::null())
        .output();
    match output {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(PathBuf::from)
            .collect(),
        _ => Vec::new(),
    }
}

impl Plugin {
    /// Loads the plugin at `path`, or returns the one this process already loaded from there.
    pub fn load(path: &Path) -> Result<Arc<Plugin>> {
        if !path.is_file() {
            return Err(PluginError::NotFound {
                path: path.to_owned(),
            }
            .into());
        }
        let key = path.canonicalize().unwrap_or_else(|_| path.to_owned());
        let mut loaded = registry().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(plugin) = loaded.get(&key) {
            return Ok(plugin.clone());
        }
        let plugin = Arc::new(Self::open(&key)?);
        loaded.insert(key, plugin.clone());
        Ok(plugin)
    }

    /// Finds a plugin in the documented order: env `PJRT_PLUGIN_PATH`, the bootstrap folder,
    /// `xla_plugins/*/` in Python's site-packages (asked of Python only if nothing came before).
    pub fn discover() -> Result<Arc<Plugin>> {
        Self::discover_from(env_plugin(), quick_candidates(), python_candidates)
    }

    fn discover_from(
        env: Option<PathBuf>,
        quick: Vec<PathBuf>,
        slow: impl FnOnce() -> Vec<PathBuf>,
    ) -> Result<Arc<Plugin>> {
        // An explicit env var is a promise: if it names nothing, say so rather than fall back.
        if let Some(env_path) = env {
            return Self::load(&env_path);
        }
        if let Some(found) = quick.iter().find(|c| c.is_file()) {
            return Self::load(found);
        }
        let slow = slow();
        if let Some(found) = slow.iter().find(|c| c.is_file()) {
            return Self::load(found);
        }
        let searched = (quick.iter().chain(&slow))
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        Err(PluginError::NoneDiscovered { searched }.into())
    }

    fn open(path: &Path) -> Result<Plugin> {
        let not_a_plugin = |reason: String| PluginError::NotAPlugin {
            path: path.to_owned(),
            reason,
        };
        // SAFETY: loading a shared object runs its initialisers; that is what loading a plugin
        // means, and the caller named this file as a plugin.
        let library = unsafe { libloading::Library::new(path) }
            .map_err(|e| not_a_plugin(format!("cannot be loaded as a shared object ({e})")))?;
        type GetPjrtApi = unsafe extern "C" fn() -> *const Api;
        // SAFETY: `GetPjrtApi` is the PJRT plugin entry point with this exact signature.
        let get_api = unsafe { library.get::<GetPjrtApi>(b"GetPjrtApi\0") }
            .map_err(|_| not_a_plugin("it exports no `GetPjrtApi` symbol".into()))?;
        // SAFETY: the entry point takes no arguments and returns a pointer to a static table.
        let api_ptr = unsafe { get_api() };
        // Never unload: the plugin's exit handlers crash if it is gone before exit.
        std::mem::forget(library);
        if api_ptr.is_null() {
            return Err(PluginError::InitFailed {
                path: path.to_owned(),
                reason: "GetPjrtApi returned null".into(),
            }
            .into());
        }
        // SAFETY: non-null, and the plugin keeps the table alive for the life of the process
        // (the library is never unloaded). We read only `base` until its size is checked.
        let api: &'static Api = unsafe { &*api_ptr };
        let major = api.base.pjrt_api_version.major_version;
        let minor = api.base.pjrt_api_version.minor_version;
        if major != 0 || minor < abi::MIN_MINOR {
            return Err(PluginError::AbiMismatch {
                path: path.to_owned(),
                major,
                minor,
                min_minor: abi::MIN_MINOR,
            }
            .into());
        }
        let mut plugin = Plugin {
            api,
            path: path.to_owned(),
            major,
            minor,
            attributes: Vec::new(),
            ffi: OnceLock::new(),
        };
        let init_failed = |e: Error| PluginError::InitFailed {
            path: path.to_owned(),
            reason: e.to_string(),
        };
        let mut init = sys::PJRT_Plugin_Initialize_Args {
            struct_size: size_of::<sys::PJRT_Plugin_Initialize_Args>(),
            ..Default::default()
        };
        // SAFETY: `PJRT_Plugin_Initialize` is called with an args struct of its own layout, filled in
        // above, whose pointers stay live across the call.
        unsafe {
            plugin.call(
                "PJRT_Plugin_Initialize",
                api.base.PJRT_Plugin_Initialize,
                &mut init,
            )
        }
        .map_err(init_failed)?;
        let mut attrs = abi::Plugin_Attributes_Args {
            struct_size: size_of::<abi::Plugin_Attributes_Args>(),
            extension_start: std::ptr::null_mut(),
            attributes: std::ptr::null(),
            num_attributes: 0,
        };
        // SAFETY: the 0.81 args layout is at least as large as any plugin of minor >= 54 expects.
        let f = api.base.PJRT_Plugin_Attributes.map(|f| unsafe {
            std::mem::transmute::<
                unsafe extern "C" fn(*mut sys::PJRT_Plugin_Attributes_Args) -> *mut sys::PJRT_Error,
                unsafe extern "C" fn(*mut abi::Plugin_Attributes_Args) -> *mut sys::PJRT_Error,
            >(f)
        });
        // SAFETY: `PJRT_Plugin_Attributes` is called with an args struct of its own layout, filled in
        // above, whose pointers stay live across the call.
        unsafe { plugin.call("PJRT_Plugin_Attributes", f, &mut attrs) }.map_err(init_failed)?;
        // SAFETY: the plugin returned `num_attributes` values that live as long as the plugin.
        plugin.attributes = unsafe { read_named_values(attrs.attributes, attrs.num_attributes) };
        Ok(plugin)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The plugin's PJRT C API version as (major, minor).
    pub fn api_version(&self) -> (i32, i32) {
        (self.major, self.minor)
    }

    /// Plugin attributes such as `xla_version` and the StableHLO versions it accepts.
    pub fn attributes(&self) -> &[(String, NamedValue)] {
        &self.attributes
    }

    /// Where host-callback support is kept once registered (see `ffi.rs`).
    pub(crate) fn ffi_cell(&self) -> &OnceLock<Result<FfiSupport>> {
        &self.ffi
    }

    pub(crate) fn api(&self) -> &'static Api {
        self.api
    }

    /// Whether the plugin's function table reaches the 0.81 slot at `offset`.
    pub(crate) fn has_slot(&self, offset: usize) -> bool {
        self.api.base.struct_size > offset
    }

    /// The table's slots past 0.81's, where the plugin's table reaches the one at `offset`
    /// (an offset into `ApiTail`); `None` for an older table, whose memory ends before it.
    pub(crate) fn api_tail(&self, offset: usize) -> Option<&'static abi::ApiTail> {
        // SAFETY: the plugin's table is `struct_size` bytes long and lives for the process;
        // the slots read through the result lie below that size, which is checked here.
        (self.api.base.struct_size >= offset + size_of::<usize>())
            .then(|| unsafe { &*(self.api as *const Api).cast::<abi::ApiTail>() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_is_asked_only_when_nothing_quicker_is_found() {
        let here = std::env::current_exe().unwrap(); // a file, and not a plugin
        let never = || -> Vec<PathBuf> { panic!("python was asked although a candidate exists") };
        let err = Plugin::discover_from(None, vec![here.clone()], never).unwrap_err();
        assert!(
            matches!(err, Error::Plugin(PluginError::NotAPlugin { .. })),
            "{err}"
        );
        let err = Plugin::discover_from(Some(here), vec![], never).unwrap_err();
        assert!(matches!(err, Error::Plugin(PluginError::NotAPlugin { .. })));
        let asked = std::cell::Cell::new(false);
        let err = Plugin::discover_from(None, vec!["/nonexistent/a.so".into()], || {
            asked.set(true);
            vec!["/nonexistent/b.so".into()]
        })
        .unwrap_err();
        assert!(asked.get());
        match err {
            Error::Plugin(PluginError::NoneDiscovered { searched }) => {
                assert_eq!(searched, "/nonexistent/a.so, /nonexistent/b.so")
            }
            other => panic!("{other}"),
        }
    }
}
