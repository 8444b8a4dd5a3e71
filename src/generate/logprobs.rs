//! Log-probabilities of a step's tokens, as OpenAI's API gives them: the chosen token's and
//! the most likely tokens', read off the step's logits (the model's own distribution, before any
//! temperature or cut), for requests that ask.

/// Most alternatives a request may ask for each token, as OpenAI's API bounds them.
pub const MAX_TOP_LOGPROBS: usize = 20;

/// One token's log-probability, and the most likely tokens' at its step (most likely first;
/// ties: the lower id), natural logarithms.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    /// The token made.
    pub token: i32,
    /// Its log-probability.
    pub logprob: f32,
    /// The `k` most likely tokens and theirs.
    pub top: Vec<(i32, f32)>,
}

/// `token`'s log-probability under `softmax(logits)`, and the `k` most likely tokens'.
pub(crate) fn logprobs(logits: &[f32], token: usize, k: usize) -> TokenLogprobs {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let sum: f64 = logits.iter().map(|&v| f64::from(v - max).exp()).sum();
    let log_sum = f64::from(max) + sum.ln();
    let of = |i: usize| (f64::from(logits[i]) - log_sum) as f32;
    let before = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
    let k = k.min(logits.len());
    let mut top: Vec<usize> = (0..logits.len()).collect();
    if k > 0 && k < top.len() {
        top.select_nth_unstable_by(k - 1, before);
    }
    top.truncate(k);
    top.sort_by(before);
    TokenLogprobs {
        token: token as i32,
        logprob: of(token),
        top: top.into_iter().map(|i| (i as i32, of(i))).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_probabilities_are_log_softmax_and_the_top_is_ordered() {
        // softmax([ln 1, ln 2, ln 3, ln 2]) = [1, 2, 3, 2] / 8.
        let logits = [1f32.ln(), 2f32.ln(), 3f32.ln(), 2f32.ln()];
        let l = logprobs(&logits, 1, 3);
        let close = |a: f32, b: f64| (f64::from(a) - b).abs() < 1e-6;
        assert!(close(l.logprob, (2.0f64 / 8.0).ln()), "{l:?}");
        let ids: Vec<i32> = l.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, [2, 1, 3], "ties go to the lower id");
        assert!(close(l.top[0].1, (3.0f64 / 8.0).ln()));
        assert_eq!(logprobs(&logits, 0, 0).top, []);
        assert_eq!(logprobs(&logits, 0, 10).top.len(), 4);
        // Large logits do not overflow.
        let l = logprobs(&[1000.0, 1000.0], 0, 1);
        assert!(close(l.logprob, 0.5f64.ln()), "{l:?}");
    }
}
