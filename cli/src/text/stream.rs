//! Text as a stream of tokens makes it: each token's new text once its characters are whole (a
//! small model emits a character's UTF-8 bytes over several tokens), so that the deltas joined
//! are exactly the whole answer's text; and stop strings matched across token boundaries, cut
//! before the match and never shown.

use super::TextModel;

/// The replacement character lossy decoding writes for bytes that are not (yet) a character.
const REPLACEMENT: char = '\u{FFFD}';

/// A sequence's decoder: the text of the tokens pushed, a delta at a time. As TGI and vLLM do
/// it: the text of the tokens since the last delta's start is decoded again with the new one,
/// and the new part is given only when it does not end in a character still incomplete.
#[derive(Default)]
pub struct TextStream {
    ids: Vec<i32>,
    /// Where the window decoded again starts, and where its part already given ends.
    prefix: usize,
    read: usize,
}

impl TextStream {
    /// The new text `id` completes (often empty), decoded by `text`.
    pub fn push(&mut self, text: &TextModel, id: i32) -> String {
        self.ids.push(id);
        let given = text.decode(&self.ids[self.prefix..self.read]);
        let now = text.decode(&self.ids[self.prefix..]);
        if now.len() <= given.len() || now.ends_with(REPLACEMENT) || !now.starts_with(&given) {
            return String::new();
        }
        self.prefix = self.read;
        self.read = self.ids.len();
        now[given.len()..].to_string()
    }

    /// The text held back at the end (bytes that never became a character come out as the
    /// tokenizer decodes them).
    pub fn finish(&mut self, text: &TextModel) -> String {
        let given = text.decode(&self.ids[self.prefix..self.read]);
        let now = text.decode(&self.ids[self.prefix..]);
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        match now.strip_prefix(&given) {
            Some(rest) => rest.to_string(),
            None => now,
        }
    }
}

/// Stop strings over a stream of text: text is given on as soon as no stop string can begin
/// in it, and the first match ends the text before it.
#[derive(Default)]
pub struct StopText {
    stops: Vec<String>,
    held: String,
    /// Characters that may begin a match not yet complete: the longest stop's, less one.
    hold: usize,
}

impl StopText {
    pub fn new(stops: Vec<String>) -> StopText {
        let hold = (stops.iter().map(|s| s.chars().count()))
            .max()
            .unwrap_or(1)
            .saturating_sub(1);
        StopText {
            stops,
            held: String::new(),
            hold,
        }
    }

    /// The text that can be given on after `delta`, and whether a stop string matched (then
    /// nothing more is to be given).
    pub fn push(&mut self, delta: &str) -> (String, bool) {
        self.held.push_str(delta);
        let first = (self.stops.iter())
            .filter(|s| !s.is_empty())
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first {
            self.held.truncate(at);
            return (std::mem::take(&mut self.held), true);
        }
        let chars = self.held.chars().count();
        if chars <= self.hold {
            return (String::new(), false);
        }
        let cut = (self.held.char_indices())
            .nth(chars - self.hold)
            .map_or(self.held.len(), |(i, _)| i);
        let rest = self.held.split_off(cut);
        (std::mem::replace(&mut self.held, rest), false)
    }

    /// What is held at the end, no stop string having matched.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}
