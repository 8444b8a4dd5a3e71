//! Inputs on which reference LAPACK ends or hangs the process (issue 22, B4, B5 and A2): a NaN
//! or infinity into the SVD and eigen kernels, and empty matrices whose factors LAPACK never
//! writes. Each call is checked in a child process, since XERBLA's exit has status 0 and would
//! read as a pass; the outputs must be what jaxlib gives: `info` -4 and NaN, or identities.

mod cpu_plugin {
    use std::time::Duration;

    use pjrt_actors::host_data::HostArray;
    use pjrt_actors::{Client, ElementType};

    use crate::jax_lapack::{custom_call, load, run, values};

    /// One call: the target's type letter and name, the mode, the operand's rows and columns.
    struct Call {
        letter: char,
        target: &'static str,
        mode: u8,
        m: i64,
        n: i64,
    }

    impl Call {
        fn elem(&self) -> (&'static str, &'static str, ElementType) {
            match self.letter {
                's' => ("f32", "f32", ElementType::F32),
                'd' => ("f64", "f64", ElementType::F64),
                'c' => ("complex<f32>", "f32", ElementType::C64),
                _ => ("complex<f64>", "f64", ElementType::C128),
            }
        }

        /// `lapack_?gesdd_ffi` / `gesvd` with jaxlib's signature for `mode`.
        fn svd_program(&self) -> String {
            let (t, real, _) = self.elem();
            let (m, n, k) = (self.m, self.n, self.m.min(self.n));
            let shape = |r: i64, c: i64| format!("tensor<{r}x{c}x{t}>");
            let (u, vt) = match self.mode {
                b'A' => (shape(m, m), shape(n, n)),
                b'S' => (shape(m, k), shape(k, n)),
                _ => (shape(1, 1), shape(1, 1)),
            };
            let x = shape(m, n);
            let s = format!("tensor<{k}x{real}>");
            custom_call(
                &format!("lapack_{}{}_ffi", self.letter, self.target),
                &[&x],
                &[&x, &s, &u, &vt, "tensor<i32>"],
                &format!("mode = {} : ui8", self.mode),
            )
        }

        /// `lapack_?geev_ffi`, both eigenvector sets.
        fn geev_program(&self) -> String {
            let (t, _, _) = self.elem();
            let n = self.n;
            let x = format!("tensor<{n}x{n}x{t}>");
            let w = format!("tensor<{n}x{t}>");
            let complex = if self.letter == 's' || self.letter == 'c' {
                "complex<f32>"
            } else {
                "complex<f64>"
            };
            let v = format!("tensor<{n}x{n}x{complex}>");
            let results: Vec<&str> = if matches!(self.letter, 'c' | 'z') {
                vec![&w, &v, &v, "tensor<i32>"]
            } else {
                vec![&w, &w, &v, &v, "tensor<i32>"]
            };
            custom_call(
                &format!("lapack_{}geev_ffi", self.letter),
                &[&x],
                &results,
                "compute_left = 86 : ui8, compute_right = 86 : ui8",
            )
        }

        /// A well-conditioned m x n operand, with `bad` at one entry when given.
        fn input(&self, bad: Option<f64>) -> HostArray {
            let (_, _, dtype) = self.elem();
            let count = (self.m * self.n) as usize;
            let parts = if matches!(self.letter, 'c' | 'z') {
                2
            } else {
                1
            };
            let mut v: Vec<f64> = (0..count * parts)
                .map(|i| ((i * 37 % 101) as f64) / 50.0 - 1.0)
                .collect();
            if let Some(bad) = bad {
                // Near the middle, where the red team put it.
                v[count * parts / 2] = bad;
            }
            let bytes = match dtype {
                ElementType::F32 | ElementType::C64 => {
                    v.iter().flat_map(|x| (*x as f32).to_le_bytes()).collect()
                }
                _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            };
            HostArray {
                dtype,
                dims: vec![self.m, self.n],
                bytes,
            }
        }
    }

    fn info(out: &HostArray) -> i32 {
        values(out)[0] as i32
    }

    fn all_nan(out: &HostArray) -> bool {
        values(out).iter().all(|v| v.is_nan())
    }

    /// Runs every non-finite case and checks `info` -4 and NaN outputs; the client goes on.
    fn non_finite_cases(client: &Client) {
        let mut cases = Vec::new();
        for letter in ['s', 'd', 'c', 'z'] {
            for (target, mode) in [
                ("gesdd", b'A'),
                ("gesdd", b'S'),
                ("gesdd", b'N'),
                ("gesvd", b'A'),
                ("gesvd", b'S'),
                ("gesvd", b'N'),
            ] {
                for bad in [f64::INFINITY, f64::NAN] {
                    cases.push((
                        Call {
                            letter,
                            target,
                            mode,
                            m: 26,
                            n: 26,
                        },
                        bad,
                    ));
                }
            }
        }
        for (call, bad) in &cases {
            let what = format!(
                "{}{} mode {} with {bad}",
                call.letter, call.target, call.mode as char
            );
            let exe = load(client, call.svd_program().as_bytes()).unwrap();
            let out =
                run(&exe, &[call.input(Some(*bad))]).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(info(&out[4]), -4, "{what}");
            assert!(
                all_nan(&out[1]),
                "{what}: singular values {:?}",
                values(&out[1])
            );
            if call.mode != b'N' {
                assert!(
                    all_nan(&out[2]) && all_nan(&out[3]),
                    "{what}: U or V^H not NaN"
                );
            }
        }
        for letter in ['s', 'd', 'c', 'z'] {
            let call = Call {
                letter,
                target: "geev",
                mode: b'V',
                m: 4,
                n: 4,
            };
            let exe = load(client, call.geev_program().as_bytes()).unwrap();
            let out = run(&exe, &[call.input(Some(f64::NAN))]).unwrap();
            let last = out.len() - 1;
            assert_eq!(info(&out[last]), -4, "{letter}geev");
            // No stale memory (6.9e-310 was seen): NaN in every value and vector.
            for (i, o) in out[..last].iter().enumerate() {
                assert!(all_nan(o), "{letter}geev output {i}: {:?}", &values(o)[..4]);
            }
        }
        // The same calls on finite input still factor.
        let call = Call {
            letter: 'd',
            target: "gesvd",
            mode: b'A',
            m: 26,
            n: 26,
        };
        let exe = load(client, call.svd_program().as_bytes()).unwrap();
        let out = run(&exe, &[call.input(None)]).unwrap();
        assert_eq!(info(&out[4]), 0);
        assert!(values(&out[1]).iter().all(|v| v.is_finite() && *v >= 0.0));
    }

    /// The child side of `non_finite_svd_and_eig_inputs_are_refused_not_fatal`.
    #[test]
    #[ignore = "a child process of non_finite_svd_and_eig_inputs_are_refused_not_fatal"]
    fn lapack_non_finite_child() {
        non_finite_cases(&Client::open().unwrap());
    }

    #[test]
    fn non_finite_svd_and_eig_inputs_are_refused_not_fatal() {
        crate::common::run_child_test(
            "lapack_guards::cpu_plugin::lapack_non_finite_child",
            &[],
            Duration::from_secs(120),
        );
    }

    #[test]
    fn empty_svd_factors_are_identities_not_stale_memory() {
        if crate::common::new_abi() {
            // The 0.115 CPU compiler divides by zero (SIGFPE) on a custom call with an empty
            // operand and an empty result in a tuple: refused before it compiles, in this
            // process too, with a typed error.
            let client = Client::open().unwrap();
            for (m, n) in [(0, 3), (3, 0)] {
                let call = Call {
                    letter: 's',
                    target: "gesdd",
                    mode: b'A',
                    m,
                    n,
                };
                let err = load(&client, call.svd_program().as_bytes())
                    .map(|_| ())
                    .unwrap_err();
                assert!(
                    matches!(err, pjrt_actors::Error::InvalidArgument(_))
                        && err.to_string().contains("divides by zero"),
                    "{err:?}"
                );
            }
            return;
        }
        let client = Client::open().unwrap();
        for letter in ['s', 'd', 'c', 'z'] {
            for target in ["gesdd", "gesvd"] {
                for (m, n) in [(0, 3), (3, 0)] {
                    let call = Call {
                        letter,
                        target,
                        mode: b'A',
                        m,
                        n,
                    };
                    let what = format!("{letter}{target} {m}x{n}");
                    let exe = load(&client, call.svd_program().as_bytes()).unwrap();
                    let out = run(&exe, &[call.input(None)]).unwrap();
                    assert_eq!(info(&out[4]), 0, "{what}");
                    for (factor, size) in [(&out[2], m), (&out[3], n)] {
                        let v = values(factor);
                        let parts = if matches!(letter, 'c' | 'z') { 2 } else { 1 };
                        let want: Vec<f64> = (0..size * size * parts)
                            .map(|i| {
                                let (e, part) = (i / parts, i % parts);
                                if part == 0 && e / size == e % size {
                                    1.0
                                } else {
                                    0.0
                                }
                            })
                            .collect();
                        assert_eq!(v, want, "{what}: not the identity");
                    }
                }
            }
        }
    }

    #[test]
    fn a_lapack_call_in_any_layout_but_column_major_is_refused_at_compile() {
        let client = Client::open().unwrap();
        let good = custom_call(
            "lapack_dgetrf_ffi",
            &["tensor<3x4x4xf64>"],
            &["tensor<3x4x4xf64>", "tensor<3x4xi32>", "tensor<3xi32>"],
            "",
        );
        let column_major = "dense<[1, 2, 0]> : tensor<3xindex>";
        assert!(good.contains(column_major), "{good}");
        load(&client, good.as_bytes()).expect("jaxlib's layout compiles");
        let start = good.find("operand_layouts").unwrap();
        let end = good[start..].find("]}").unwrap() + start + 1;
        let cases = [
            (
                "row-major operand",
                good.replacen(column_major, "dense<[2, 1, 0]> : tensor<3xindex>", 1),
                "operand 0",
            ),
            (
                "batch dim inside",
                good.replacen(column_major, "dense<[1, 0, 2]> : tensor<3xindex>", 1),
                "operand 0",
            ),
            (
                "row-major result",
                {
                    let at = good.find("result_layouts").unwrap();
                    format!(
                        "{}{}",
                        &good[..at],
                        good[at..].replacen(column_major, "dense<[2, 1, 0]> : tensor<3xindex>", 1)
                    )
                },
                "result 0",
            ),
            (
                "no layouts at all",
                format!("{}{}", &good[..start].trim_end_matches(", "), &good[end..]),
                "operand 0",
            ),
        ];
        for (what, program, names) in cases {
            let err = load(&client, program.as_bytes()).map(|_| ()).unwrap_err();
            let text = err.to_string();
            assert!(
                matches!(err, pjrt_actors::Error::InvalidArgument(_)),
                "{what}: {err:?}"
            );
            assert!(
                text.contains(names) && text.contains("column-major"),
                "{what}: {text}"
            );
        }
    }
}
