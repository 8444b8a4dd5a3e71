//! The LAPACK library behind jaxlib's custom calls: found at run time (`dlopen`), its routines
//! resolved once by their Fortran names, and called with every argument passed by address, the
//! way the Fortran ABI wants, plus gfortran's hidden lengths of character arguments.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::OnceLock;

/// The environment variable that names the LAPACK library to load.
pub const LAPACK_LIBRARY_ENV: &str = "PJRT_ACTORS_LAPACK";

/// What is tried when the environment names nothing: the system's LAPACK (reference LAPACK from
/// Debian's `liblapack3`, or whatever provider its alternatives point at), then OpenBLAS.
const CANDIDATES: &[&str] = &["liblapack.so.3", "liblapack.so", "libopenblas.so.0"];

/// The routine families, by their names without the type letter.
const FAMILIES: &[&str] = &[
    "trsm", "getrf", "geqrf", "geqp3", "potrf", "gesdd", "gesvd", "geev", "gees", "gehrd", "gtsv",
];
/// Families whose complex routine has another name (`ungqr` for `orgqr`, ...).
const REAL_COMPLEX_FAMILIES: &[(&str, &str)] = &[
    ("orgqr", "ungqr"),
    ("ormqr", "unmqr"),
    ("syevd", "heevd"),
    ("sytrd", "hetrd"),
];

/// A loaded LAPACK: every routine the kernels call, by its Fortran symbol (`dgetrf_`).
pub struct Lapack {
    /// Kept open for the rest of the process: the routines point into it.
    _library: libloading::Library,
    routines: HashMap<String, usize>,
    /// Where it came from, for messages.
    pub path: String,
}

/// The process's LAPACK, loaded on first use; `Err` says what was tried.
pub fn lapack() -> Result<&'static Lapack, String> {
    static LOADED: OnceLock<Result<Lapack, String>> = OnceLock::new();
    LOADED
        .get_or_init(Lapack::load)
        .as_ref()
        .map_err(Clone::clone)
}

/// Every Fortran symbol the kernels use, in all four type letters.
pub fn symbol_names() -> Vec<String> {
    let mut names = Vec::new();
    for letter in ['s', 'd', 'c', 'z'] {
        let complex = matches!(letter, 'c' | 'z');
        for family in FAMILIES {
            names.push(format!("{letter}{family}_"));
        }
        for (real, cplx) in REAL_COMPLEX_FAMILIES {
            names.push(format!("{letter}{}_", if complex { cplx } else { real }));
        }
    }
    names
}

impl Lapack {
    fn load() -> Result<Lapack, String> {
        let named = std::env::var(LAPACK_LIBRARY_ENV)
            .ok()
            .filter(|v| !v.is_empty());
        let candidates: Vec<String> = match named {
            Some(path) => vec![path],
            None => CANDIDATES.iter().map(|s| s.to_string()).collect(),
        };
        let mut tried = Vec::new();
        for candidate in &candidates {
            // SAFETY: loading a shared library runs its initialisers; LAPACK providers have
            // none beyond their own runtime's (libgfortran, OpenBLAS's thread pool set-up).
            let library = match unsafe { libloading::Library::new(candidate) } {
                Ok(l) => l,
                Err(e) => {
                    tried.push(format!("{candidate}: {e}"));
                    continue;
                }
            };
            let mut routines = HashMap::new();
            let mut missing = Vec::new();
            for name in symbol_names() {
                // SAFETY: only the address is taken here; it is called through `call` with the
                // routine's own argument count.
                match unsafe { library.get::<*const c_void>(name.as_bytes()) } {
                    Ok(symbol) => {
                        routines.insert(name, *symbol as usize);
                    }
                    Err(_) => missing.push(name),
                }
            }
            if !missing.is_empty() {
                tried.push(format!("{candidate}: lacks {}", missing.join(", ")));
                continue;
            }
            single_threaded(&library);
            return Ok(Lapack {
                _library: library,
                routines,
                path: candidate.clone(),
            });
        }
        Err(format!(
            "no LAPACK library found (tried {}); install Debian's liblapack3 (scripts/bootstrap \
             does) or name one in {LAPACK_LIBRARY_ENV}",
            tried.join("; ")
        ))
    }

    /// The address of routine `name` (`dgetrf_`); every name `symbol_names` lists is present.
    pub fn routine(&self, name: &str) -> Result<usize, String> {
        self.routines
            .get(name)
            .copied()
            .ok_or_else(|| format!("LAPACK routine {name} is not loaded"))
    }
}

/// An OpenBLAS provider starts a thread per core for each call: the plugin already runs custom
/// calls on its own threads, so OpenBLAS is told to use the calling thread only.
fn single_threaded(library: &libloading::Library) {
    // SAFETY: `openblas_set_num_threads(int)` is OpenBLAS's documented entry; reference LAPACK
    // has no such symbol and is single-threaded already.
    unsafe {
        if let Ok(set) = library.get::<unsafe extern "C" fn(i32)>(b"openblas_set_num_threads") {
            set(1);
        }
    }
}

/// Calls a Fortran routine with `args`: addresses, then the hidden lengths (1) of its character
/// arguments. Every argument is one machine word, so the routine's type is fixed by the count.
///
/// # Safety
/// `routine` must be the address of a LAPACK or BLAS routine whose Fortran signature takes
/// exactly `args.len()` words, and each address in `args` must point at live memory of the
/// type and size that routine reads or writes there.
pub unsafe fn call(routine: usize, args: &[usize]) {
    macro_rules! arity {
        ($($n:literal => ($($i:literal),*)),* $(,)?) => {
            match args.len() {
                $($n => {
                    type F = unsafe extern "C" fn($(arity!(@word $i)),*);
                    // SAFETY: guaranteed by the caller: a routine of exactly this many words.
                    let f: F = unsafe { std::mem::transmute::<usize, F>(routine) };
                    // SAFETY: as above.
                    unsafe { f($(args[$i]),*) }
                })*
                n => unreachable!("no LAPACK routine takes {n} arguments"),
            }
        };
        (@word $i:literal) => { usize };
    }
    arity!(
        6 => (0, 1, 2, 3, 4, 5),
        8 => (0, 1, 2, 3, 4, 5, 6, 7),
        9 => (0, 1, 2, 3, 4, 5, 6, 7, 8),
        10 => (0, 1, 2, 3, 4, 5, 6, 7, 8, 9),
        11 => (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
        12 => (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11),
        13 => (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12),
        14 => (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13),
        15 => (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14),
        16 => (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        17 => (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16),
        18 => (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17),
    );
}
