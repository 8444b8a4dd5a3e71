//! Choosing the next token from a step's logits: greedy (the first of the largest, as
//! `np.argmax`), or sampled at a temperature from the top-k and top-p of the distribution with
//! a seeded generator of the request's own, so that a seed repeats its tokens.

/// How a request's tokens are chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampling {
    /// The most likely token each step (ties: the lowest id).
    Greedy,
    /// Sampled from `softmax(logits / temperature)`, cut to the `top_k` most likely tokens
    /// (0: all) and then to the smallest set whose probability reaches `top_p` (1.0: all).
    Random {
        /// Above 0: lower sharpens the distribution, higher flattens it.
        temperature: f32,
        /// Keep only this many most likely tokens (0: all).
        top_k: usize,
        /// Keep the fewest most likely tokens whose probability reaches this (1.0: all).
        top_p: f32,
        /// The request's random stream: the same seed, the same tokens.
        seed: u64,
    },
}

impl Sampling {
    /// Checks the parameters: a temperature above 0 and finite, `top_p` in (0, 1].
    pub fn check(&self) -> Result<(), String> {
        match *self {
            Sampling::Greedy => Ok(()),
            Sampling::Random {
                temperature, top_p, ..
            } => {
                if !(temperature > 0.0 && temperature.is_finite()) {
                    return Err(format!("temperature {temperature} is not above 0"));
                }
                if !(top_p > 0.0 && top_p <= 1.0) {
                    return Err(format!("top_p {top_p} is not in (0, 1]"));
                }
                Ok(())
            }
        }
    }
}

/// A request's random numbers: splitmix64 over its seed (small, fast and the same everywhere).
#[derive(Clone, Debug)]
pub struct TokenRng(u64);

impl TokenRng {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> Self {
        TokenRng(seed)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The first index of the largest value (NaN never wins).
pub fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] || logits[best].is_nan() && !v.is_nan() {
            best = i;
        }
    }
    best
}

/// The next token of one sequence from its step's `logits`.
pub fn choose(logits: &[f32], sampling: &Sampling, rng: &mut TokenRng) -> usize {
    let Sampling::Random {
        temperature,
        top_k,
        top_p,
        ..
    } = *sampling
    else {
        return argmax(logits);
    };
    // Candidates, most likely first (ties by id, so the order is the same everywhere).
    let mut order: Vec<usize> = (0..logits.len()).filter(|&i| !logits[i].is_nan()).collect();
    if order.is_empty() {
        return 0;
    }
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    if top_k > 0 {
        order.truncate(top_k);
    }
    let top = logits[order[0]] as f64;
    let mut weights: Vec<f64> = (order.iter())
        .map(|&i| ((logits[i] as f64 - top) / temperature as f64).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    // Keep the smallest prefix whose probability reaches top_p.
    let mut kept = 0;
    let mut mass = 0.0;
    for w in &weights {
        kept += 1;
        mass += w / total;
        if mass >= top_p as f64 {
            break;
        }
    }
    weights.truncate(kept);
    let total: f64 = weights.iter().sum();
    let mut x = rng.next_f64() * total;
    for (w, &i) in weights.iter().zip(&order) {
        if x < *w {
            return i;
        }
        x -= w;
    }
    order[kept - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_largest_as_numpy_does() {
        let table: &[(&[f32], usize)] = &[
            (&[0.0, 3.0, 1.0], 1),
            (&[2.0, 2.0, 1.0], 0),
            (&[f32::NAN, -1.0, -2.0], 1),
            (&[-5.0], 0),
            (&[1.0, f32::INFINITY, f32::INFINITY], 1),
        ];
        for &(logits, want) in table {
            let got = choose(logits, &Sampling::Greedy, &mut TokenRng::new(0));
            assert_eq!(got, want, "{logits:?}");
        }
    }

    fn random(temperature: f32, top_k: usize, top_p: f32) -> Sampling {
        Sampling::Random {
            temperature,
            top_k,
            top_p,
            seed: 0,
        }
    }

    #[test]
    fn top_k_and_top_p_keep_only_the_most_likely() {
        let logits = [0.0, 5.0, 4.9, -3.0, 1.0];
        let mut rng = TokenRng::new(42);
        for _ in 0..500 {
            // top_k 1 is greedy whatever the temperature.
            assert_eq!(choose(&logits, &random(10.0, 1, 1.0), &mut rng), 1);
            // top_k 2: only 1 or 2.
            let t = choose(&logits, &random(1.0, 2, 1.0), &mut rng);
            assert!(t == 1 || t == 2, "{t}");
            // top_p small: only the most likely.
            assert_eq!(choose(&logits, &random(1.0, 0, 0.1), &mut rng), 1);
        }
    }

    #[test]
    fn sampling_follows_the_distribution_and_a_seed_repeats() {
        let logits = [0.0f32, (3.0f32).ln()];
        let mut rng = TokenRng::new(7);
        let ones = (0..20_000)
            .filter(|_| choose(&logits, &random(1.0, 0, 1.0), &mut rng) == 1)
            .count();
        // P(1) = 3/4.
        assert!((ones as f64 / 20_000.0 - 0.75).abs() < 0.02, "{ones}");
        let draw = |seed| {
            let mut rng = TokenRng::new(seed);
            (0..32)
                .map(|_| choose(&[0.1, 0.2, 0.3, 0.4], &random(1.0, 0, 1.0), &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(random(0.0, 0, 1.0).check().is_err());
        assert!(random(f32::NAN, 0, 1.0).check().is_err());
        assert!(random(1.0, 0, 0.0).check().is_err());
        assert!(random(1.0, 0, 1.5).check().is_err());
        assert!(random(0.7, 40, 0.9).check().is_ok());
    }
}
