//! What must agree within a serialized `Exported` for it to be called: its trees and avals,
//! its kept arguments, its shardings against the avals and the device count, its module's form.

use crate::Result;
use crate::exported::{Exported, ExportedSharding, bad};

impl Exported {
    /// What must agree within an artifact for it to be called.
    pub(crate) fn check(&self) -> Result<()> {
        let leaves = self.in_tree.leaves();
        if leaves != self.in_avals.len() || self.out_tree.leaves() != self.out_avals.len() {
            return Err(bad(format!(
                "its trees have {leaves} inputs and {} outputs, its avals {} and {}",
                self.out_tree.leaves(),
                self.in_avals.len(),
                self.out_avals.len()
            )));
        }
        if let Some(&i) = (self.module_kept_var_idx.iter()).find(|&&i| i as usize >= leaves) {
            return Err(bad(format!("it keeps argument {i} of {leaves}")));
        }
        // JAX keeps a sorted set; out of order, two arguments of one type could swap unseen.
        if self.module_kept_var_idx.windows(2).any(|w| w[0] >= w[1]) {
            return Err(bad(format!(
                "its kept arguments {:?} are not in increasing order",
                self.module_kept_var_idx
            )));
        }
        for (side, shardings, avals) in [
            ("input", &self.in_shardings, &self.in_avals),
            ("output", &self.out_shardings, &self.out_avals),
        ] {
            if !shardings.is_empty() && shardings.len() != avals.len() {
                return Err(bad(format!(
                    "it has {} {side} shardings for {} {side}s",
                    shardings.len(),
                    avals.len()
                )));
            }
            for (i, (s, aval)) in shardings.iter().zip(avals.iter()).enumerate() {
                let Some(ExportedSharding::Named { mesh, spec }) = s else {
                    continue;
                };
                // Checked: a garbled artifact's sizes may overflow.
                let size = (mesh.iter()).try_fold(1usize, |a, (_, n)| a.checked_mul(*n));
                if size != Some(self.nr_devices as usize) {
                    let size = size.map_or("more than can be counted".into(), |s| s.to_string());
                    return Err(bad(format!(
                        "{side} {i}'s mesh has {size} devices; the export is for {}",
                        self.nr_devices
                    )));
                }
                if spec.len() > aval.dims.len() {
                    return Err(bad(format!(
                        "{side} {i} ({aval}) is split over {} dimensions",
                        spec.len()
                    )));
                }
                let axis = spec
                    .iter()
                    .flatten()
                    .find(|a| !mesh.iter().any(|(n, _)| n == *a));
                if let Some(axis) = axis {
                    return Err(bad(format!(
                        "{side} {i} is split over `{axis}`, not a mesh axis"
                    )));
                }
            }
        }
        if !self.module.starts_with(b"ML\xefR") {
            return Err(bad("its module is not MLIR bytecode"));
        }
        Ok(())
    }
}
