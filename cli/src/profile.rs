//! `pjrt-actors profile`: a small workload, then a pprof heap profile of what it left alive.

use std::path::Path;

use pjrt_actors::{CompileOptions, Result};

use crate::common::{GlobalArgs, open, usage};

/// A small workload: weights on every device, a few compiled programs, some results kept.
pub fn profile(cli: &GlobalArgs, out: &Path) -> Result<()> {
    let client = open(cli)?;
    let mut keep = Vec::new();
    for device in client.devices() {
        keep.push(device.put(&vec![0.5f32; 256 * 256], &[256, 256])?);
        keep.push(device.put(&vec![1i32; 1024], &[1024])?);
    }
    let program = "module @square {\n  func.func public @main(%x: tensor<256x256xf32>) -> tensor<256x256xf32> {\n    %0 = stablehlo.multiply %x, %x : tensor<256x256xf32>\n    return %0 : tensor<256x256xf32>\n  }\n}\n";
    let exe = client.compile_and_load(program, &CompileOptions::default())?;
    keep.extend(exe.execute(&[&keep[0]])?);
    let bytes = client.heap_profile()?;
    std::fs::write(out, &bytes).map_err(|e| usage(format!("writing {}: {e}", out.display())))?;
    out!(
        "wrote {} ({} bytes): {} arrays, 1 executable; open with `go tool pprof -http=: {}`",
        out.display(),
        bytes.len(),
        keep.len(),
        out.display()
    );
    Ok(())
}
