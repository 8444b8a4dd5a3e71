//! Op and dtype pairs that one plugin build computes wrong, each with the conformance case that
//! shows it (`known_defects.tsv`, written by `pjrt-actors conformance --write-defects`). Where a
//! compile option avoids the defect, a program using the op gets it; else it is refused.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::cache::CompileKey;
use super::options::CompileOptions;
use super::xla_options::XlaOption;
use crate::error::{Error, Result};
use crate::formats::mlir_text_ops;
use crate::formats::program_ops::op_names;
pub use crate::formats::program_ops::ops_used;
use crate::lock_rank::{PLUGIN_DIGESTS, RankedMutex};

/// The table, one entry a line (tab-separated; `#` starts a comment).
const TABLE: &str = include_str!("known_defects.tsv");

/// The columns of a line of the table, in order.
pub const COLUMNS: [&str; 9] = [
    "platform",
    "pjrt_api",
    "stablehlo",
    "plugin_sha256",
    "op",
    "dtype",
    "case",
    "right_on",
    "fix",
];

/// One op and dtype pair that one plugin build computes wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownDefect {
    /// The plugin's platform name (`cpu`).
    pub platform: String,
    /// Its PJRT C API version (`0.115`).
    pub pjrt_api: String,
    /// The newest StableHLO it parses (`1.20.0`).
    pub stablehlo: String,
    /// The sha256 of its `.so`: the build, not only its versions.
    pub plugin_sha256: String,
    /// The operation (`chlo.atan`).
    pub op: String,
    /// The element type of its result (`f64`).
    pub dtype: String,
    /// The conformance case that shows it (`atan_float64_20_20_chlo`).
    pub case: String,
    /// A plugin that computes it right.
    pub right_on: String,
    /// XLA debug options under which this build computes it right, `name=value` separated by
    /// spaces (`xla_cpu_prefer_vector_width=128`); empty where none is known (then refused).
    pub fix: String,
}

impl KnownDefect {
    /// The entry as one line of the table.
    pub fn to_line(&self) -> String {
        [
            &self.platform,
            &self.pjrt_api,
            &self.stablehlo,
            &self.plugin_sha256,
            &self.op,
            &self.dtype,
            &self.case,
            &self.right_on,
            &self.fix,
        ]
        .map(|s| s.replace(['\t', '\n'], " "))
        .join("\t")
    }

    /// A line of the table; the `fix` column may be left off (none known).
    fn from_line(line: &str) -> Option<Self> {
        let f: Vec<&str> = line.split('\t').map(str::trim).collect();
        let (platform, pjrt_api, stablehlo, sha, op, dtype, case, right_on, fix) = match f[..] {
            [a, b, c, d, e, g, h, i] => (a, b, c, d, e, g, h, i, ""),
            [a, b, c, d, e, g, h, i, j] => (a, b, c, d, e, g, h, i, j),
            _ => return None,
        };
        Some(KnownDefect {
            platform: platform.into(),
            pjrt_api: pjrt_api.into(),
            stablehlo: stablehlo.into(),
            plugin_sha256: sha.into(),
            op: op.into(),
            dtype: dtype.into(),
            case: case.into(),
            right_on: right_on.into(),
            fix: fix.into(),
        })
    }

    /// The fix's XLA debug options, each value read as a bool, an integer, a float or text.
    pub fn fix_options(&self) -> Vec<(String, XlaOption)> {
        (self.fix.split_whitespace())
            .filter_map(|pair| pair.split_once('='))
            .map(|(name, value)| {
                let value = match value {
                    "true" => XlaOption::Bool(true),
                    "false" => XlaOption::Bool(false),
                    v => (v.parse().map(XlaOption::Int))
                        .or_else(|_| v.parse().map(XlaOption::Float))
                        .unwrap_or_else(|_| XlaOption::Text(v.to_string())),
                };
                (name.to_string(), value)
            })
            .collect()
    }
}

/// Every entry of the table.
pub fn known_defects() -> &'static [KnownDefect] {
    static ENTRIES: OnceLock<Vec<KnownDefect>> = OnceLock::new();
    ENTRIES.get_or_init(|| {
        TABLE
            .lines()
            .map(str::trim_end)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(KnownDefect::from_line)
            .collect()
    })
}

/// Who the plugin is, as the table keys it.
pub struct PluginIdentity<'a> {
    pub platform: &'a str,
    pub api: (i32, i32),
    /// The newest StableHLO it parses, as `plugin_stablehlo` reads it.
    pub stablehlo: &'a str,
    pub path: &'a Path,
}

impl PluginIdentity<'_> {
    fn matches_versions(&self, d: &KnownDefect) -> bool {
        d.platform == self.platform
            && d.pjrt_api == format!("{}.{}", self.api.0, self.api.1)
            && d.stablehlo == self.stablehlo
    }
}

impl crate::client::state::ClientState {
    fn plugin_identity<R>(&self, with: impl FnOnce(&PluginIdentity<'_>) -> R) -> R {
        let snap = self.snapshot();
        let stablehlo = super::program_check::plugin_stablehlo(&snap.plugin_attributes);
        with(&PluginIdentity {
            platform: &snap.platform_name,
            api: snap.plugin_api_version,
            stablehlo: &stablehlo,
            path: &snap.plugin_path,
        })
    }

    /// Refuses a program that uses an op and dtype this plugin build is known to compute
    /// wrong where no compile option avoids it, unless the client or the compile (`allowed`)
    /// allows it: the one check every compile path runs.
    pub fn check_known_defects(&self, code: &[u8], allowed: bool) -> Result<()> {
        if allowed || self.allow_known_defects {
            return Ok(());
        }
        self.plugin_identity(|plugin| check_known_defects(code, plugin))
    }

    /// Adds to `options` the XLA debug options that make this plugin build compute right the
    /// known defects `code` runs into, where the caller has not set them: the one place every
    /// compile path applies them, before its cache key is made, so a fixed compile is keyed
    /// apart from every other. A program using none of the ops is left exactly as it was; so
    /// is every program where known defects are allowed (compiled as written).
    pub fn fix_known_defects(&self, code: &[u8], options: &mut CompileOptions) {
        if options.allow_known_defects || self.allow_known_defects {
            return;
        }
        let fixes = self
            .plugin_identity(|plugin| fixes_against(code, plugin, known_defects(), plugin_sha256));
        for (name, value) in fixes {
            if !options.xla_options.iter().any(|(n, _)| *n == name) {
                options.xla_options.push((name, value));
            }
        }
    }

    /// The compile cache's key for `code` compiled with `options` (their encoding). A compile
    /// that runs a known defect only because it allows it (the client does not) is keyed apart:
    /// a later compile of the same program that is not allowed must not find its executable in
    /// the memory cache, whose hits skip the checks a miss runs. Only such allowed compiles pay
    /// for the check before the cache is asked.
    pub fn compile_key_allowing(&self, code: &[u8], options: &[u8], allowed: bool) -> CompileKey {
        // A fixable program needs no mark: compiled as written, its options lack the fix the
        // same program gets when not allowed, so the keys differ already.
        let key = self.compile_key(code, options);
        if allowed && !self.allow_known_defects && self.check_known_defects(code, false).is_err() {
            return key.marked("allowed past a known defect");
        }
        key
    }
}

/// Refuses a program that uses an op and dtype pair the plugin is known to compute wrong and
/// no option avoids (`Error::KnownDefect`). The plugin file's sha256 is read only when the
/// program uses a pair an entry for its versions names (once a process per file: 0.3 s for a
/// 270 MB plugin).
pub fn check_known_defects(code: &[u8], plugin: &PluginIdentity<'_>) -> Result<()> {
    check_against(code, plugin, known_defects(), plugin_sha256)
}

/// The entries for `plugin`'s versions whose op `code` runs (by name, whatever its types) and,
/// with `by_dtype`, on that result type (an unreadable type counts as any), on its very build.
fn entries_used<'t>(
    code: &[u8],
    plugin: &PluginIdentity<'_>,
    table: impl Iterator<Item = &'t KnownDefect>,
    by_dtype: bool,
    sha256: impl Fn(&Path) -> Option<String>,
) -> Vec<&'t KnownDefect> {
    let candidates: Vec<&KnownDefect> = table.filter(|d| plugin.matches_versions(d)).collect();
    // Cheap first, and it runs on every compile (a memory-cache hit too, since the fix is part
    // of the key): an op's short name absent from the bytes (text, or bytecode's string table)
    // is not used, and most programs use none. Each distinct name is looked for once.
    let mut mentioned: Vec<(&'t str, bool)> = Vec::new();
    let mut is_mentioned = |op: &'t str| {
        let short = op.rsplit('.').next().unwrap_or(op);
        if let Some((_, seen)) = mentioned.iter().find(|(s, _)| *s == short) {
            return *seen;
        }
        let seen = !short.is_empty() && memchr::memmem::find(code, short.as_bytes()).is_some();
        mentioned.push((short, seen));
        seen
    };
    let candidates: Vec<&KnownDefect> = (candidates.into_iter())
        .filter(|d| is_mentioned(d.op.as_str()))
        .collect();
    if candidates.is_empty() {
        return candidates;
    }
    // A fix needs the op's name only; a refusal reads its result types too.
    let used = match by_dtype {
        true => ops_used(code),
        false => op_names(code),
    };
    candidates
        .into_iter()
        .filter(|d| match &used {
            // Bytecode that cannot be read to its end: the op may be there.
            None => true,
            Some(used) => used.iter().any(|(op, dtype)| {
                *op == d.op && (!by_dtype || *dtype == d.dtype || dtype == mlir_text_ops::UNKNOWN)
            }),
        })
        .filter(|d| {
            d.plugin_sha256.is_empty()
                || sha256(plugin.path).as_deref() == Some(d.plugin_sha256.as_str())
        })
        .collect()
}

fn check_against(
    code: &[u8],
    plugin: &PluginIdentity<'_>,
    table: &[KnownDefect],
    sha256: impl Fn(&Path) -> Option<String>,
) -> Result<()> {
    let unfixable = table.iter().filter(|d| d.fix.trim().is_empty());
    match entries_used(code, plugin, unfixable, true, sha256).first() {
        None => Ok(()),
        Some(defect) => Err(Error::KnownDefect {
            op: defect.op.clone(),
            dtype: defect.dtype.clone(),
            plugin: format!(
                "{} (PJRT {}, StableHLO {})",
                plugin.path.display(),
                defect.pjrt_api,
                defect.stablehlo
            ),
            case: defect.case.clone(),
            right_on: defect.right_on.clone(),
        }),
    }
}

/// The fix options of every entry with one whose op `code` runs, on any result type: the
/// options only change how the plugin compiles, so a fix applied to a dtype that did not need
/// it costs time, never correctness.
fn fixes_against(
    code: &[u8],
    plugin: &PluginIdentity<'_>,
    table: &[KnownDefect],
    sha256: impl Fn(&Path) -> Option<String>,
) -> Vec<(String, XlaOption)> {
    let fixable = table.iter().filter(|d| !d.fix.trim().is_empty());
    let mut out: Vec<(String, XlaOption)> = Vec::new();
    for d in entries_used(code, plugin, fixable, false, sha256) {
        for (name, value) in d.fix_options() {
            if !out.iter().any(|(n, _)| *n == name) {
                out.push((name, value));
            }
        }
    }
    out
}

/// The sha256 of a plugin file, read once a process per path.
pub fn plugin_sha256(path: &Path) -> Option<String> {
    // Process-wide, as the plugin file itself is: one read per file, whichever client asks.
    static SEEN: OnceLock<RankedMutex<HashMap<PathBuf, Option<String>>>> = OnceLock::new();
    let seen = SEEN.get_or_init(|| RankedMutex::new(PLUGIN_DIGESTS, HashMap::new()));
    if let Some(hit) = seen.lock().get(path) {
        return hit.clone();
    }
    let digest = sha256_file(path);
    seen.lock().insert(path.to_owned(), digest.clone());
    digest
}

fn sha256_file(path: &Path) -> Option<String> {
    use sha2::Digest;
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Some(format!("{:x}", hasher.finalize()))
}

#[cfg(test)]
mod tests;
