//! The Prometheus text exposition format, written in one place: metric families (HELP, TYPE),
//! samples whose label values are always escaped, and histograms from per-bucket counts. The
//! client's metrics, the batchers' and `pjrt-actors serve`'s `/metrics` all write through it.

use std::fmt::{Display, Write as _};

/// A metric family's type, as the TYPE line names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (`_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Cumulative buckets, a sum and a count.
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// `text` as a Prometheus label value: backslash, double quote and newline escaped, as the
/// text format asks, so that no name (a model folder named `a"b`) breaks the page or forges a
/// label.
pub fn label_value(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// `{a="1",b="x"}` for these labels, every value escaped; empty for none.
fn label_set(labels: &[(&str, &str)], extra: Option<(&str, &str)>) -> String {
    let mut out = String::new();
    for (i, (key, value)) in labels.iter().chain(extra.as_ref()).enumerate() {
        out.push_str(if i == 0 { "{" } else { "," });
        let _ = write!(out, "{key}=\"{}\"", label_value(value));
    }
    if !out.is_empty() {
        out.push('}');
    }
    out
}

/// A page being written: families in the order given, each followed by its samples.
#[derive(Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// An empty page.
    pub fn new() -> Self {
        Exposition::default()
    }

    /// A family's HELP and TYPE lines; its samples follow.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let _ = writeln!(
            self.out,
            "# HELP {name} {help}\n# TYPE {name} {}",
            kind.name()
        );
    }

    /// One sample of a counter or gauge.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        let _ = writeln!(self.out, "{name}{} {value}", label_set(labels, None));
    }

    /// One histogram's samples: cumulative buckets for `bounds` from `per_bucket` (one count
    /// per bound, not cumulative), the +Inf bucket and `_count` as `count`, and `_sum`.
    pub fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        bounds: &[f64],
        per_bucket: impl IntoIterator<Item = u64>,
        count: u64,
        sum: f64,
    ) {
        let mut cumulative = 0;
        for (bound, n) in bounds.iter().zip(per_bucket) {
            cumulative += n;
            let le = bound.to_string();
            let _ = writeln!(
                self.out,
                "{name}_bucket{} {cumulative}",
                label_set(labels, Some(("le", &le)))
            );
        }
        let plain = label_set(labels, None);
        let _ = writeln!(
            self.out,
            "{name}_bucket{} {count}\n{name}_sum{plain} {sum}\n{name}_count{plain} {count}",
            label_set(labels, Some(("le", "+Inf")))
        );
    }

    /// The page's text.
    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_samples_and_histograms_are_written_as_the_text_format_says() {
        let mut page = Exposition::new();
        page.family("jobs_total", Kind::Counter, "Jobs done.");
        page.sample("jobs_total", &[("model", "a\"b"), ("outcome", "ok")], 3);
        page.sample("jobs_total", &[], 1.5);
        page.family("wait_seconds", Kind::Histogram, "Waits.");
        page.histogram(
            "wait_seconds",
            &[("model", "m")],
            &[0.5, 1.0],
            [2, 1],
            4,
            7.25,
        );
        assert_eq!(
            page.finish(),
            "# HELP jobs_total Jobs done.\n# TYPE jobs_total counter\n\
             jobs_total{model=\"a\\\"b\",outcome=\"ok\"} 3\n\
             jobs_total 1.5\n\
             # HELP wait_seconds Waits.\n# TYPE wait_seconds histogram\n\
             wait_seconds_bucket{model=\"m\",le=\"0.5\"} 2\n\
             wait_seconds_bucket{model=\"m\",le=\"1\"} 3\n\
             wait_seconds_bucket{model=\"m\",le=\"+Inf\"} 4\n\
             wait_seconds_sum{model=\"m\"} 7.25\n\
             wait_seconds_count{model=\"m\"} 4\n"
        );
    }

    #[test]
    fn label_values_escape_what_the_text_format_escapes_and_nothing_else() {
        let cases = [
            ("lm", "lm"),
            ("a\"b", "a\\\"b"),
            ("a\\b", "a\\\\b"),
            ("a\nb", "a\\nb"),
            ("é", "é"),
        ];
        for (name, want) in cases {
            assert_eq!(label_value(name), want, "{name:?}");
        }
    }
}
