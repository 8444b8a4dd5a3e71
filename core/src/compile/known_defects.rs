//! Op and dtype pairs that one plugin build computes wrong, each with the conformance case that
//! shows it (`known_defects.tsv`, written by `pjrt-actors conformance --write-defects`). A program
//! that uses one is refused before that plugin compiles it, unless the caller allows it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use super::cache::CompileKey;
use crate::error::{Error, Result};
use crate::formats::mlir_bytecode_ops::{ops_with_result_types, shaped_element};

/// The table, one entry a line (tab-separated; `#` starts a comment).
const TABLE: &str = include_str!("known_defects.tsv");

/// The columns of a line of the table, in order.
pub const COLUMNS: [&str; 8] = [
    "platform",
    "pjrt_api",
    "stablehlo",
    "plugin_sha256",
    "op",
    "dtype",
    "case",
    "right_on",
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
        ]
        .map(|s| s.replace(['\t', '\n'], " "))
        .join("\t")
    }

    fn from_line(line: &str) -> Option<Self> {
        let f: Vec<&str> = line.split('\t').map(str::trim).collect();
        let [
            platform,
            pjrt_api,
            stablehlo,
            sha,
            op,
            dtype,
            case,
            right_on,
        ] = f[..]
        else {
            return None;
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
        })
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

impl crate::state::ClientState {
    /// Refuses a program that uses an op and dtype this plugin build is known to compute
    /// wrong, unless the client or the compile (`allowed`) allows it: the one check every
    /// compile path runs.
    pub fn check_known_defects(&self, code: &[u8], allowed: bool) -> Result<()> {
        if allowed || self.allow_known_defects {
            return Ok(());
        }
        let snap = self.snapshot();
        let stablehlo = super::program_check::plugin_stablehlo(&snap.plugin_attributes);
        check_known_defects(
            code,
            &PluginIdentity {
                platform: &snap.platform_name,
                api: snap.plugin_api_version,
                stablehlo: &stablehlo,
                path: &snap.plugin_path,
            },
        )
    }

    /// The compile cache's key for `code` compiled with `options` (their encoding). A compile
    /// that runs a known defect only because it allows it (the client does not) is keyed apart:
    /// a later compile of the same program that is not allowed must not find its executable in
    /// the memory cache, whose hits skip the checks a miss runs. Only such allowed compiles pay
    /// for the check before the cache is asked.
    pub fn compile_key_allowing(&self, code: &[u8], options: &[u8], allowed: bool) -> CompileKey {
        let key = self.compile_key(code, options);
        if allowed && !self.allow_known_defects && self.check_known_defects(code, false).is_err() {
            return key.marked("allowed past a known defect");
        }
        key
    }
}

/// Refuses a program that uses an op and dtype pair the plugin is known to compute wrong
/// (`Error::KnownDefect`). The plugin file's sha256 is read only when the program uses a pair
/// an entry for its versions names (once a process per file: 0.3 s for a 270 MB plugin).
pub fn check_known_defects(code: &[u8], plugin: &PluginIdentity<'_>) -> Result<()> {
    check_against(code, plugin, known_defects(), plugin_sha256)
}

fn check_against(
    code: &[u8],
    plugin: &PluginIdentity<'_>,
    table: &[KnownDefect],
    sha256: impl Fn(&Path) -> Option<String>,
) -> Result<()> {
    let candidates: Vec<&KnownDefect> = (table.iter())
        .filter(|d| plugin.matches_versions(d))
        .collect();
    if candidates.is_empty() {
        return Ok(());
    }
    let used = ops_used(code);
    for defect in candidates {
        if !used
            .iter()
            .any(|(op, dtype)| *op == defect.op && *dtype == defect.dtype)
        {
            continue;
        }
        if !defect.plugin_sha256.is_empty()
            && sha256(plugin.path).as_deref() != Some(defect.plugin_sha256.as_str())
        {
            continue;
        }
        return Err(Error::KnownDefect {
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
        });
    }
    Ok(())
}

/// The (op, result element type) pairs a program uses: from its text, or its MLIR bytecode's
/// IR. Bytecode that cannot be read to its end says nothing (the plugin's parser decides).
pub fn ops_used(code: &[u8]) -> Vec<(String, String)> {
    if code.starts_with(b"ML\xefR") {
        return (ops_with_result_types(code).unwrap_or_default().into_iter())
            .flat_map(|op| {
                let name = stablehlo_name(&op.name);
                op.results.into_iter().map(move |t| (name.clone(), t))
            })
            .collect();
    }
    text_ops_used(&String::from_utf8_lossy(code))
}

/// A portable artifact's op under its StableHLO name: `vhlo.atan2_v1` is `stablehlo.atan2`.
fn stablehlo_name(name: &str) -> String {
    match name.strip_prefix("vhlo.") {
        Some(rest) => {
            let base = match rest.rsplit_once("_v") {
                Some((base, v)) if !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()) => base,
                _ => rest,
            };
            format!("stablehlo.{base}")
        }
        None => name.to_string(),
    }
}

/// Ops in text, custom form (`%1 = chlo.atan %0 : tensor<4xf64> -> tensor<4xf64>`) or generic
/// (`%1 = "chlo.atan"(%0) : (tensor<4xf64>) -> tensor<4xf64>`), each with the element types
/// of its results: those after its `->`, or, with none, its one `:` type. A name in a string
/// (`stablehlo.composite "chlo.atan"`, whose decomposition runs instead) is not an op.
fn text_ops_used(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for line in text.lines() {
        let line = line.trim_start();
        let rest = match line.find(" = ") {
            Some(at) if line.starts_with('%') => &line[at + 3..],
            _ => line,
        };
        let (name, after) = match rest.strip_prefix('"') {
            Some(quoted) => match quoted.split_once("\"(") {
                Some((name, after)) => (name, after),
                None => continue,
            },
            None => {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
                    .unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            }
        };
        if !name.contains('.') || name.starts_with('.') {
            continue;
        }
        let types = match after.rfind("->") {
            Some(at) => &after[at + 2..],
            None => after.rsplit_once(" : ").map_or("", |(_, t)| t),
        };
        for element in element_types(types) {
            found.push((name.to_string(), element));
        }
    }
    found
}

/// The element types of the `tensor<…>` types (or bare scalar types) in `types`.
fn element_types(types: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = types;
    while let Some(at) = rest.find("tensor<") {
        let body = &rest[at + "tensor<".len()..];
        let mut depth = 1;
        let end = body
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '<' => depth += 1,
                    '>' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .map_or(body.len(), |(i, _)| i);
        out.push(shaped_element(&body[..end]).to_string());
        rest = &body[end..];
    }
    if out.is_empty() {
        let t = types.trim().trim_matches(|c| c == '(' || c == ')');
        if matches!(t, "f16" | "bf16" | "f32" | "f64")
            || t.starts_with('i') && t[1..].parse::<u32>().is_ok()
        {
            out.push(t.to_string());
        }
    }
    out
}

/// The sha256 of a plugin file, read once a process per path.
pub fn plugin_sha256(path: &Path) -> Option<String> {
    // Process-wide, as the plugin file itself is: one read per file, whichever client asks.
    static SEEN: OnceLock<Mutex<HashMap<PathBuf, Option<String>>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    if let Some(hit) = seen.lock().ok()?.get(path) {
        return hit.clone();
    }
    let digest = sha256_file(path);
    seen.lock().ok()?.insert(path.to_owned(), digest.clone());
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
mod tests {
    use super::*;

    #[test]
    fn text_ops_are_read_with_their_result_element_types() {
        let table: &[(&str, &[(&str, &str)])] = &[
            (
                "%2 = chlo.atan %0 : tensor<20x20xf64> -> tensor<20x20xf64>",
                &[("chlo.atan", "f64")],
            ),
            (
                "%1 = \"chlo.atan\"(%0) : (tensor<4xf32>) -> tensor<4xf32>",
                &[("chlo.atan", "f32")],
            ),
            (
                "%3 = stablehlo.atan2 %0, %1 : tensor<400xf64>",
                &[("stablehlo.atan2", "f64")],
            ),
            (
                "%0 = stablehlo.add %a, %b : tensor<2xcomplex<f32>>",
                &[("stablehlo.add", "complex<f32>")],
            ),
            // A composite named after the op runs its decomposition, not the op.
            (
                "%0 = stablehlo.composite \"chlo.atan\" %arg0 {decomposition = @d} : (tensor<4xf64>) -> tensor<4xf64>",
                &[("stablehlo.composite", "f64")],
            ),
            ("%0 = call @inputs() : () -> tensor<4xf64>", &[]),
        ];
        for (line, want) in table {
            let got = text_ops_used(line);
            let want: Vec<(String, String)> = (want.iter())
                .map(|(o, t)| (o.to_string(), t.to_string()))
                .collect();
            assert_eq!(got, want, "{line}");
        }
        assert_eq!(stablehlo_name("vhlo.atan2_v1"), "stablehlo.atan2");
        assert_eq!(stablehlo_name("vhlo.composite_v2"), "stablehlo.composite");
        assert_eq!(stablehlo_name("chlo.atan"), "chlo.atan");
    }

    fn entry(sha: &str) -> KnownDefect {
        KnownDefect::from_line(&format!(
            "cpu\t0.115\t1.20.0\t{sha}\tchlo.atan\tf64\tatan_float64_20_20_chlo\tanother"
        ))
        .unwrap()
    }

    #[test]
    fn a_program_is_refused_only_on_the_build_and_the_pair_an_entry_names() {
        let f64_program = b"%1 = chlo.atan %0 : tensor<4xf64> -> tensor<4xf64>";
        let f32_program = b"%1 = chlo.atan %0 : tensor<4xf32> -> tensor<4xf32>";
        let path = Path::new("/plugin.so");
        let plugin = |api, stablehlo| PluginIdentity {
            platform: "cpu",
            api,
            stablehlo,
            path,
        };
        let sha = |_: &Path| Some("abc".to_string());
        let table = [entry("abc")];
        let refused = check_against(f64_program, &plugin((0, 115), "1.20.0"), &table, sha);
        match refused {
            Err(Error::KnownDefect {
                op,
                dtype,
                case,
                right_on,
                ..
            }) => {
                assert_eq!((op.as_str(), dtype.as_str()), ("chlo.atan", "f64"));
                assert_eq!(
                    (case.as_str(), right_on.as_str()),
                    ("atan_float64_20_20_chlo", "another")
                );
            }
            other => panic!("{other:?}"),
        }
        // Another dtype, another version, another build of the same versions: compiled.
        assert!(check_against(f32_program, &plugin((0, 115), "1.20.0"), &table, sha).is_ok());
        assert!(check_against(f64_program, &plugin((0, 106), "1.20.0"), &table, sha).is_ok());
        assert!(check_against(f64_program, &plugin((0, 115), "1.16.1"), &table, sha).is_ok());
        let other_build = |_: &Path| Some("def".to_string());
        assert!(
            check_against(
                f64_program,
                &plugin((0, 115), "1.20.0"),
                &table,
                other_build
            )
            .is_ok()
        );
        // An entry without a sha256 holds for every build of its versions.
        let any_build = [entry("")];
        assert!(
            check_against(
                f64_program,
                &plugin((0, 115), "1.20.0"),
                &any_build,
                other_build
            )
            .is_err()
        );
    }

    #[test]
    fn the_shipped_table_reads_whole_and_lines_round_trip() {
        let table = known_defects();
        assert!(table.len() >= 4, "{table:?}");
        for d in table {
            assert_eq!(KnownDefect::from_line(&d.to_line()).as_ref(), Some(d));
            assert_eq!(d.plugin_sha256.len(), 64, "{d:?}");
        }
        assert_eq!(COLUMNS.len(), table[0].to_line().split('\t').count());
    }
}
