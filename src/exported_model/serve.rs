//! Serving an export through the batcher: the batched inputs named by path, every other kept
//! input a fixed one from the resident weights, in the module's parameter order.

use pjrt_actors_core::Result;
use pjrt_actors_core::formats::exported::Dim;

use super::{ExportedModel, Held, platform_index_data, refused};
use crate::serving::BatchModel;

impl ExportedModel {
    /// A [`BatchModel`] that serves this export through a [`Batcher`](crate::serving::Batcher):
    /// `batched` names the inputs each request gives (as weights are named: `[0][1]`, `0.1`,
    /// or a unique dotted suffix), their rows leading; every other input the module keeps must
    /// have come from [`load_params`](Self::load_params), and is served as a fixed input
    /// (read back here once, then uploaded to each serving device). The module's shapes were
    /// fixed when JAX exported it, so every batch runs at the batched inputs' leading
    /// dimension: requests of fewer rows are batched up to it, the rest padded.
    pub fn batch_model(&self, name: impl Into<String>, batched: &[&str]) -> Result<BatchModel> {
        let e = &self.exported;
        let inputs: Vec<usize> = (batched.iter())
            .map(|b| self.input_named(b, "batched input"))
            .collect::<Result<_>>()?;
        let mut order = Vec::new();
        let mut rows = None;
        for &i in &inputs {
            let path = &self.paths[i];
            let j = self.module_param(i).ok_or_else(|| {
                refused(format!(
                    "the batched input {path} is one the module does not use"
                ))
            })?;
            let lead = match e.in_avals[i].dims.first() {
                Some(Dim::Known(n)) if *n > 0 => *n as usize,
                _ => {
                    return Err(refused(format!(
                        "the batched input {path} has no rows to batch"
                    )));
                }
            };
            if rows.is_some_and(|r| r != lead) {
                return Err(refused(format!(
                    "the batched inputs differ in rows ({path} has {lead})"
                )));
            }
            rows = Some(lead);
            order.push(j);
        }
        let Some(rows) = rows else {
            return Err(refused("no batched input named".into()));
        };
        let mut fixed = Vec::new();
        if let Some(index) = self.platform_index {
            fixed.push(platform_index_data(index));
            order.push(0);
        }
        for (i, held) in self.resident.iter().enumerate() {
            let Some(j) = self.module_param(i) else {
                continue;
            };
            if inputs.contains(&i) {
                continue;
            }
            let data = match held {
                Some(Held::OnDevice(a)) => a.to_host_array()?,
                Some(Held::Sharded(s)) => s.to_host()?,
                None => {
                    return Err(refused(format!(
                        "{} is neither batched nor loaded as a weight",
                        self.paths[i]
                    )));
                }
            };
            fixed.push(data);
            order.push(j);
        }
        Ok(BatchModel::at_one_size(
            name.into(),
            e.module.clone(),
            rows,
            inputs.len(),
            fixed,
            order,
        ))
    }
}
