//! The cases `conformance` runs with no `--suite`: a subset of StableHLO's interpreter test
//! data (one case per op and result type it covers) and pjrt-actors' own cases beside it.

#[path = "builtin_own.rs"]
mod own;
#[path = "builtin_stablehlo.rs"]
mod stablehlo;

/// Every built-in case: (name, text).
pub fn cases() -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    stablehlo::CASES.iter().chain(own::CASES)
}
