//! What the batcher serves: a program per batch size (a function, a `{batch}` template, or a
//! program respecialised from its own batch size), its fixed inputs and host callbacks, and,
//! for an export, its parameter order and its one batch size.

use std::sync::Arc;

use crate::host_data::HostArray;

/// A served model: its program for each batch size, and the parameters that are not batched.
#[derive(Clone)]
pub struct BatchModel {
    pub(super) name: String,
    /// The program (text or bytecode) for a batch size.
    pub(super) program: Arc<dyn Fn(usize) -> Vec<u8> + Send + Sync>,
    pub(super) batched_inputs: usize,
    pub(super) fixed: Vec<HostArray>,
    pub(super) callbacks: Vec<crate::HostCallback>,
    /// Where each input goes among the program's parameters: the batched ones, then the fixed
    /// ones. `None`: in that order (a jax.export's batched argument may come anywhere).
    pub(super) order: Option<Vec<usize>>,
    /// The one batch size the program runs at, where it cannot be respecialised (an export's
    /// module is bytecode, its shapes fixed when JAX exported it).
    pub(super) only_size: Option<usize>,
}

impl BatchModel {
    /// A model given as a function from batch size (rows) to program text. The program's first
    /// `batched_inputs` parameters and every result have the batch as their leading dimension;
    /// the remaining parameters are the [`fixed_input`](Self::fixed_input)s, in order.
    pub fn from_fn(
        name: impl Into<String>,
        batched_inputs: usize,
        program: impl Fn(usize) -> String + Send + Sync + 'static,
    ) -> Self {
        BatchModel {
            name: name.into(),
            program: Arc::new(move |rows| program(rows).into_bytes()),
            batched_inputs,
            fixed: Vec::new(),
            callbacks: Vec::new(),
            order: None,
            only_size: None,
        }
    }

    /// A model of one program that runs batches of exactly `size` rows, whose parameter
    /// `order[k]` is input k (the batched inputs, then `fixed`, in order).
    pub(crate) fn at_one_size(
        name: String,
        program: Vec<u8>,
        size: usize,
        batched_inputs: usize,
        fixed: Vec<HostArray>,
        order: Vec<usize>,
    ) -> Self {
        let program = Arc::new(program);
        BatchModel {
            name,
            program: Arc::new(move |_| program.as_ref().clone()),
            batched_inputs,
            fixed,
            callbacks: Vec::new(),
            order: Some(order),
            only_size: Some(size),
        }
    }

    /// The one batch size its program runs at, where it cannot be respecialised (an export).
    pub fn fixed_batch_size(&self) -> Option<usize> {
        self.only_size
    }

    /// The program parameter input `k` (batched first, then fixed) is passed as.
    pub(crate) fn parameter_of(&self, k: usize) -> usize {
        self.order.as_ref().map_or(k, |order| order[k])
    }

    /// A model given as one program whose batch dimension is written `{batch}` wherever it
    /// appears (`tensor<{batch}x16xf32>`), specialised per allowed size.
    pub fn from_template(
        name: impl Into<String>,
        batched_inputs: usize,
        text: impl Into<String>,
    ) -> Self {
        let text: String = text.into();
        Self::from_fn(name, batched_inputs, move |b| {
            text.replace("{batch}", &b.to_string())
        })
    }

    /// A model given as one program compiled for batch size `batch`: its tensors that lead
    /// with `batch` (`tensor<4x16xf32>` for `batch` 4) are respecialised per allowed size.
    /// The rewrite is textual: give a `batch` no other tensor's leading dimension equals.
    pub fn from_program(
        name: impl Into<String>,
        batched_inputs: usize,
        text: impl Into<String>,
        batch: usize,
    ) -> Self {
        let template = text
            .into()
            .replace(&format!("tensor<{batch}x"), "tensor<{batch}x");
        Self::from_template(name, batched_inputs, template)
    }

    /// Adds a parameter that every batch shares (weights), uploaded once to each device.
    pub fn fixed_input(mut self, input: HostArray) -> Self {
        self.fixed.push(input);
        self
    }

    /// Host callbacks the program calls (the same at every batch size).
    pub fn callbacks(mut self, callbacks: Vec<crate::HostCallback>) -> Self {
        self.callbacks = callbacks;
        self
    }

    /// The model's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}
