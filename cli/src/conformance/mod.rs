//! `pjrt-actors conformance`: StableHLO's interpreter test data run on the plugin in use, each
//! case's inputs and expected values taken from the file itself, a table by op and dtype. Cases
//! run in a child process, so one that aborts the plugin is reported and the run goes on.

mod builtin;
mod case;
mod compare;
mod report;
mod runner;

use std::path::{Path, PathBuf};

use pjrt_actors::Result;

use crate::common::{GlobalArgs, usage};

/// `conformance`'s flags.
#[derive(clap::Args)]
pub struct ConformanceArgs {
    /// StableHLO's test data: a checkout of openxla/stablehlo (its `stablehlo/testdata` is
    /// read) or a folder of its `.mlir` cases. Default: the built-in subset (one case per op
    /// and dtype the test data covers).
    #[arg(long)]
    suite: Option<PathBuf>,
    /// Only these ops (comma-separated): a case's name op (`atan`) or an op it runs
    /// (`chlo.atan`).
    #[arg(long, value_delimiter = ',')]
    ops: Vec<String>,
    /// Only these dtypes (comma-separated), as the cases name them (`float64`, `int8`).
    #[arg(long, value_delimiter = ',')]
    dtypes: Vec<String>,
    /// Print one JSON object: the plugin, every case, the summary.
    #[arg(long)]
    json: bool,
    /// Give a case this many seconds before its child is killed and it is reported as timed
    /// out.
    #[arg(long, default_value_t = 120.0)]
    case_timeout: f64,
    /// Append the known-defect table's lines for this plugin to FILE: one per failing case
    /// that runs a single op (op, result dtype, the case, the plugin's identity).
    #[arg(long)]
    write_defects: Option<PathBuf>,
    /// A plugin that computes the written defects right, for their `right_on` column.
    #[arg(long, default_value = "another plugin (see pjrt-actors conformance)")]
    right_on: String,
    /// Run each case as any compile runs it: with the options the known-defect table gives a
    /// program that uses an op this plugin computes wrong (its fix), instead of as written.
    /// A case that then passes shows the fix works; one refused has no fix.
    #[arg(long)]
    with_fixes: bool,
    /// Run the cases from this index on, reporting each as a JSON line (the child process).
    #[arg(long, hide = true)]
    child_from: Option<usize>,
}

/// What `--write-defects` FILE holds now: empty where it does not exist yet. Anything but a
/// regular file of UTF-8 text (a folder, a FIFO, a device, bytes that are not text) is refused
/// with a usage error, so a write never replaces what could not be read, nor blocks.
fn defects_file(path: &Path) -> Result<String> {
    let refuse = |why: &str| usage(format!("--write-defects {}: {why}", path.display()));
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
            match parent.map(std::fs::metadata) {
                Some(Ok(m)) if !m.is_dir() => Err(refuse("its folder is not a folder")),
                Some(Err(e)) => Err(refuse(&format!("its folder: {e}"))),
                _ => Ok(String::new()),
            }
        }
        Err(e) => Err(refuse(&e.to_string())),
        Ok(m) if !m.is_file() => Err(refuse("not a regular file (a folder, FIFO or device)")),
        Ok(_) => {
            let bytes = std::fs::read(path).map_err(|e| refuse(&e.to_string()))?;
            String::from_utf8(bytes)
                .map_err(|e| refuse(&format!("not UTF-8 text ({e}); left as it is")))
        }
    }
}

/// One case: its name (the file's stem) and its text.
pub struct Case {
    pub name: String,
    pub text: String,
}

/// The cases asked for, in name order.
fn cases(args: &ConformanceArgs) -> Result<Vec<Case>> {
    let mut all = match &args.suite {
        Some(dir) => read_suite(dir)?,
        None => builtin::cases()
            .map(|(name, text)| Case {
                name: name.to_string(),
                text: text.to_string(),
            })
            .collect(),
    };
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all.retain(|c| {
        let (op, dtype) = case::op_and_dtype(&c.name);
        let bare = op.trim_end_matches(" (chlo)");
        let op_ok = args.ops.is_empty()
            || args.ops.iter().any(|o| {
                o == bare || o == &op || c.text.contains(&format!(" {o} ")) && o.contains('.')
            });
        let dtype_ok = args.dtypes.is_empty() || args.dtypes.contains(&dtype);
        op_ok && dtype_ok
    });
    if all.is_empty() {
        return Err(usage(
            "no case matches --ops and --dtypes (an op is a case's name op, as the table's first \
             column shows it, or an op with its dialect that a case runs: stablehlo.add)"
                .into(),
        ));
    }
    Ok(all)
}

/// The `.mlir` cases of a test-data folder, or of a stablehlo checkout's.
fn read_suite(dir: &Path) -> Result<Vec<Case>> {
    let nested = dir.join("stablehlo/testdata");
    let dir = if nested.is_dir() {
        nested
    } else {
        dir.to_owned()
    };
    let entries =
        std::fs::read_dir(&dir).map_err(|e| usage(format!("--suite {}: {e}", dir.display())))?;
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("mlir") || !path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| usage(format!("{}: {e}", path.display())))?;
        let name = (path.file_stem().and_then(|s| s.to_str()))
            .unwrap_or_default()
            .to_string();
        out.push(Case { name, text });
    }
    Ok(out)
}

/// `conformance`: the cases in child processes, then the table (or JSON), and the defects.
pub fn conformance(cli: &GlobalArgs, args: &ConformanceArgs) -> Result<()> {
    let cases = cases(args)?;
    if let Some(from) = args.child_from {
        return runner::child(cli, &cases, from);
    }
    if !(args.case_timeout > 0.0 && args.case_timeout.is_finite()) {
        return Err(usage(
            "--case-timeout must be a positive number of seconds".into(),
        ));
    }
    // The file is checked before the run (which can take many minutes), and never replaced by
    // a write that lost what it held.
    let defects_before = match &args.write_defects {
        Some(path) => Some(defects_file(path)?),
        None => None,
    };
    let timeout = std::time::Duration::from_secs_f64(args.case_timeout);
    let (results, plugin) = runner::run_all(&cases, timeout, !args.with_fixes)?;
    if let (Some(path), Some(before)) = (&args.write_defects, defects_before) {
        let lines = report::defect_lines(&plugin, &results, &args.right_on);
        let mut text = defects_file(path)?;
        if text != before {
            return Err(usage(format!(
                "--write-defects {}: changed during the run; nothing written",
                path.display()
            )));
        }
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        // A line for a plugin, op and dtype the file already has is not written twice.
        let key = |l: &str| l.split('\t').take(6).collect::<Vec<_>>().join("\t");
        for line in &lines {
            if !text.lines().any(|l| key(l) == key(line)) {
                text.push_str(line);
                text.push('\n');
            }
        }
        std::fs::write(path, text)
            .map_err(|e| usage(format!("--write-defects {}: {e}", path.display())))?;
        eprintln!(
            "pjrt-actors: {} known-defect line(s) for this plugin in {}",
            lines.len(),
            path.display()
        );
    }
    match args.json {
        true => out!("{}", report::json(&plugin, &results)),
        false => {
            for line in report::table(&plugin, &results) {
                out!("{line}");
            }
        }
    }
    Ok(())
}
