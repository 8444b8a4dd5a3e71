//! Element types: what a dtype is called in XLA, MLIR, NumPy and JAX, how wide it is, and its
//! XLA primitive number. Plain data, so the readers and the fence share one enum.

/// An array element type the runtime supports (every dense type the CPU plugin takes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementType {
    /// Boolean (`pred`, MLIR `i1`).
    Pred,
    /// Signed 8-bit integer.
    S8,
    /// Signed 16-bit integer.
    S16,
    /// Signed 32-bit integer.
    S32,
    /// Signed 64-bit integer.
    S64,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// IEEE half-precision float.
    F16,
    /// bfloat16 (8-bit exponent, 7-bit mantissa).
    BF16,
    /// IEEE single-precision float.
    F32,
    /// IEEE double-precision float.
    F64,
    /// Complex of two `f32` (real, imaginary).
    C64,
    /// Complex of two `f64` (real, imaginary).
    C128,
    /// 8-bit float with 5 exponent and 2 mantissa bits, infinities and NaNs as in IEEE
    /// (`float8_e5m2` in ml_dtypes and JAX).
    F8E5M2,
    /// 8-bit float with 4 exponent and 3 mantissa bits, finite only: no infinities, one NaN
    /// pattern per sign (`float8_e4m3fn` in ml_dtypes and JAX).
    F8E4M3FN,
}

impl ElementType {
    /// Every element type, in XLA order.
    pub const ALL: [ElementType; 17] = [
        ElementType::Pred,
        ElementType::S8,
        ElementType::S16,
        ElementType::S32,
        ElementType::S64,
        ElementType::U8,
        ElementType::U16,
        ElementType::U32,
        ElementType::U64,
        ElementType::F16,
        ElementType::BF16,
        ElementType::F32,
        ElementType::F64,
        ElementType::C64,
        ElementType::C128,
        ElementType::F8E5M2,
        ElementType::F8E4M3FN,
    ];

    /// Bytes per element.
    pub fn byte_size(self) -> usize {
        use ElementType::*;
        match self {
            Pred | S8 | U8 | F8E5M2 | F8E4M3FN => 1,
            S16 | U16 | F16 | BF16 => 2,
            S32 | U32 | F32 => 4,
            S64 | U64 | F64 | C64 => 8,
            C128 => 16,
        }
    }

    /// The short name XLA and StableHLO use (`f32`, `pred`, `bf16`, `c64`...).
    pub fn name(self) -> &'static str {
        use ElementType::*;
        match self {
            Pred => "pred",
            S8 => "s8",
            S16 => "s16",
            S32 => "s32",
            S64 => "s64",
            U8 => "u8",
            U16 => "u16",
            U32 => "u32",
            U64 => "u64",
            F16 => "f16",
            BF16 => "bf16",
            F32 => "f32",
            F64 => "f64",
            C64 => "c64",
            C128 => "c128",
            F8E5M2 => "f8e5m2",
            F8E4M3FN => "f8e4m3fn",
        }
    }

    /// The MLIR spelling of the element type, as in `tensor<4xf32>`.
    pub fn mlir_name(self) -> &'static str {
        use ElementType::*;
        match self {
            Pred => "i1",
            S8 => "i8",
            S16 => "i16",
            S32 => "i32",
            S64 => "i64",
            U8 => "ui8",
            U16 => "ui16",
            U32 => "ui32",
            U64 => "ui64",
            F16 => "f16",
            BF16 => "bf16",
            F32 => "f32",
            F64 => "f64",
            C64 => "complex<f32>",
            C128 => "complex<f64>",
            F8E5M2 => "f8E5M2",
            F8E4M3FN => "f8E4M3FN",
        }
    }

    /// Parses `name()` (and the MLIR and NumPy spellings where they differ).
    pub fn from_name(name: &str) -> Option<Self> {
        let t = match name {
            "i1" | "bool" => ElementType::Pred,
            "i8" | "int8" => ElementType::S8,
            "i16" | "int16" => ElementType::S16,
            "i32" | "int32" => ElementType::S32,
            "i64" | "int64" => ElementType::S64,
            "ui8" | "uint8" => ElementType::U8,
            "ui16" | "uint16" => ElementType::U16,
            "ui32" | "uint32" => ElementType::U32,
            "ui64" | "uint64" => ElementType::U64,
            "float16" => ElementType::F16,
            "bfloat16" => ElementType::BF16,
            "float32" => ElementType::F32,
            "float64" => ElementType::F64,
            "complex64" => ElementType::C64,
            "complex128" => ElementType::C128,
            "f8E5M2" | "float8_e5m2" => ElementType::F8E5M2,
            "f8E4M3FN" | "float8_e4m3fn" => ElementType::F8E4M3FN,
            other => return Self::ALL.into_iter().find(|t| t.name() == other),
        };
        Some(t)
    }

    /// From XLA's `PrimitiveType` number (as in `ShapeProto.element_type`).
    pub fn from_xla(primitive: i32) -> Option<Self> {
        use ElementType::*;
        Some(match primitive {
            1 => Pred,
            2 => S8,
            3 => S16,
            4 => S32,
            5 => S64,
            6 => U8,
            7 => U16,
            8 => U32,
            9 => U64,
            10 => F16,
            11 => F32,
            12 => F64,
            15 => C64,
            16 => BF16,
            18 => C128,
            19 => F8E5M2,
            20 => F8E4M3FN,
            _ => return None,
        })
    }
}

impl std::fmt::Display for ElementType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
