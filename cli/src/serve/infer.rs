//! One inference request for either protocol, from its declared inputs to its answer: the
//! model's checks, the answer's size bound, the memory it reserves, its data read (off the
//! runtime threads when large), and the batcher. What each protocol adds is how it reads data.

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use super::error::ServeError;
use super::kserve::{Answered, Plan, ServedModel, ServerState};
use super::limits::off_thread;
use super::wire::{InputHead, RequestParams};

/// What a request asks, read from its protocol's message.
pub struct Asked {
    pub heads: Vec<InputHead>,
    pub wanted: Vec<String>,
    pub params: RequestParams,
}

/// Memory a request holds until its answer has been written to its connection: carried in
/// the response's extensions and moved into its body by the connection (`listen.rs`).
#[derive(Clone)]
pub struct HeldMemory {
    _reserved: Arc<OwnedSemaphorePermit>,
}

/// Runs `asked` on `model`. `read` reads the inputs' data as the plan places them (on a
/// blocking thread when `big`); `json_text` says which outputs are answered as JSON text,
/// whose size bound is then the text's.
pub async fn infer<R>(
    models: &ServerState,
    model: &ServedModel,
    asked: Asked,
    big: bool,
    json_text: impl Fn(&str) -> bool,
    read: R,
) -> Result<(Vec<Answered>, HeldMemory), ServeError>
where
    R: FnOnce(&Plan) -> Result<Vec<Vec<u8>>, String> + Send + 'static,
{
    let plan = model.plan(&asked.heads)?;
    let which = model.outputs_named(&asked.wanted)?;
    let answer: usize = (which.iter())
        .map(|&k| {
            let (binary, text) = model.answer_bytes(&[k], plan.rows);
            match json_text(&model.outputs[k].name) {
                true => text,
                false => binary,
            }
        })
        .sum();
    let limit = models.limits.body_bytes;
    if answer > limit {
        return Err(ServeError::TooLarge(format!(
            "model `{}`: the answer to {} rows would be up to {answer} bytes; answers are limited to {limit} (--max-body-bytes)",
            model.name, plan.rows
        )));
    }
    let held = (models.memory)
        .reserve(
            model.input_bytes(plan.rows) + answer,
            "the request's inputs and answer",
        )
        .await?;
    let placed = plan.clone();
    let data = (off_thread(big, move || read(&placed)).await?)
        .map_err(|e| ServeError::Invalid(format!("model `{}`: {e}", model.name)))?;
    let request = model.request(plan, data, asked.heads, &asked.params)?;
    let response = model.batcher.infer_async(request).await?;
    // Each output is named at most once (`outputs_named`), so each moves out.
    let mut all: Vec<Option<_>> = response.outputs.into_iter().map(Some).collect();
    let answered = (which.iter())
        .map(|&k| {
            let data = all[k].take().ok_or_else(|| {
                ServeError::Internal(format!("the batcher answered no output {k}"))
            })?;
            Ok(Answered {
                spec: model.outputs[k].clone(),
                data,
            })
        })
        .collect::<Result<_, ServeError>>()?;
    let held = HeldMemory {
        _reserved: Arc::new(held),
    };
    Ok((answered, held))
}
