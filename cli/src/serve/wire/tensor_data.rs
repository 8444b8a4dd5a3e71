//! A JSON tensor's `data` read straight into little-endian bytes of its datatype, without a
//! tree of JSON values: flat, or nested exactly as its shape (a ragged list is refused), each
//! value read as the input literals read theirs (`parse_value`: exact, range-checked).

use crate::literal::parse_value;
use pjrt_actors::ElementType;

use super::shown;

/// Reads `text`, a JSON value already checked to be well formed, as `count` values of `dtype`
/// laid out as `dims`, appending their bytes to `out`.
pub fn read_json_data(
    text: &str,
    dtype: ElementType,
    dims: &[i64],
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let count: usize = dims.iter().map(|&d| d as usize).product();
    out.reserve(count * dtype.byte_size());
    let mut r = Scanner {
        bytes: text.as_bytes(),
        at: 0,
        dtype,
        out,
    };
    r.space();
    if dims.is_empty() {
        // A scalar: the value, or a list of it.
        match r.eat(b'[') {
            true => {
                r.value()?;
                r.space();
                r.expect_end_of_list("data", 1)?;
            }
            false => r.value()?,
        }
        return r.finish();
    }
    if !r.eat(b'[') {
        return Err(format!("`data` is {}, not a list", r.rest_shown()));
    }
    r.space();
    match r.peek() == Some(b'[') && dims.len() > 1 {
        true => r.nested(dims, &mut Vec::new())?,
        false => r.flat(count, dims)?,
    }
    r.finish()
}

struct Scanner<'a, 'o> {
    bytes: &'a [u8],
    at: usize,
    dtype: ElementType,
    out: &'o mut Vec<u8>,
}

impl Scanner<'_, '_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        self.at += hit as usize;
        hit
    }

    fn rest_shown(&self) -> String {
        let rest = String::from_utf8_lossy(&self.bytes[self.at.min(self.bytes.len())..]);
        format!("`{}`", shown(rest.trim()))
    }

    fn finish(&mut self) -> Result<(), String> {
        self.space();
        match self.at >= self.bytes.len() {
            true => Ok(()),
            false => Err(format!(
                "`data` goes on past its end: {}",
                self.rest_shown()
            )),
        }
    }

    /// After a list's items: its `]`, or an error saying the list holds more than `want`.
    fn expect_end_of_list(&mut self, at: &str, want: usize) -> Result<(), String> {
        match self.eat(b']') {
            true => Ok(()),
            false => Err(format!(
                "{at} holds more than the {want} values its shape gives it"
            )),
        }
    }

    /// The items of a list whose `[` is read, each read by `item` (given its index), through
    /// its `]`; how many there were. `place` names the list in messages.
    fn list(
        &mut self,
        place: &str,
        mut item: impl FnMut(&mut Self, usize) -> Result<(), String>,
    ) -> Result<usize, String> {
        let mut n = 0;
        loop {
            self.space();
            if self.eat(b']') {
                return Ok(n);
            }
            if n > 0 && !self.eat(b',') {
                return Err(format!("{place} has {} after item {n}", self.rest_shown()));
            }
            self.space();
            item(self, n)?;
            n += 1;
        }
    }

    /// `count` values in one list (its `[` read).
    fn flat(&mut self, count: usize, dims: &[i64]) -> Result<(), String> {
        let n = self.list("`data`", |s, n| {
            if s.peek() == Some(b'[') {
                return Err(format!(
                    "`data` mixes lists and values (value {n} is a list); give it flat, or nested as the shape {}",
                    super::shown_dims(dims)
                ));
            }
            if n == count {
                return Err(format!(
                    "`data` holds more than the {count} values of the shape {}",
                    super::shown_dims(dims)
                ));
            }
            s.value()
        })?;
        match n == count {
            true => Ok(()),
            false => Err(format!(
                "`data` holds {n} values; the shape {} holds {count}",
                super::shown_dims(dims)
            )),
        }
    }

    /// A list nested as `dims` (its `[` read); `path` is where it lies, for messages.
    fn nested(&mut self, dims: &[i64], path: &mut Vec<usize>) -> Result<(), String> {
        let want = dims[0] as usize;
        let at: String = path.iter().map(|i| format!("[{i}]")).collect();
        let place = format!("`data{at}`");
        let n = self.list(&place, |s, n| {
            if n == want {
                return Err(format!(
                    "{place} holds more than {want} items (the shape is ragged or wrong)"
                ));
            }
            match (dims.len() > 1, s.eat(b'[')) {
                (true, true) => {
                    path.push(n);
                    s.nested(&dims[1..], path)?;
                    path.pop();
                    Ok(())
                }
                (true, false) => Err(format!(
                    "{place} item {n} is a value where a list of {} is due (the data is ragged)",
                    dims[1]
                )),
                (false, true) => Err(format!(
                    "{place} item {n} is a list where a value is due (the data is nested deeper than its shape)"
                )),
                (false, false) => s.value(),
            }
        })?;
        match n == want {
            true => Ok(()),
            false => Err(format!(
                "{place} holds {n} items; the shape gives it {want} (the data is ragged)"
            )),
        }
    }

    /// One value: a number, `true` or `false` for BOOL, or `"NaN"`, `"inf"`, `"-inf"` for a
    /// float (JSON has no such numbers; the answers write them so).
    fn value(&mut self) -> Result<(), String> {
        let floating = matches!(
            self.dtype,
            ElementType::F16 | ElementType::BF16 | ElementType::F32 | ElementType::F64
        );
        if self.eat(b'"') {
            let start = self.at;
            while !matches!(self.peek(), Some(b'"') | None) {
                self.at += 1;
            }
            let word = std::str::from_utf8(&self.bytes[start..self.at]).unwrap_or("");
            self.at += 1;
            let lower = word.to_ascii_lowercase();
            let non_finite = matches!(
                lower.as_str(),
                "nan" | "inf" | "-inf" | "+inf" | "infinity" | "-infinity"
            );
            if !(floating && non_finite) {
                return Err(format!(
                    "the string `\"{}\"` is not a {} value",
                    shown(word),
                    self.dtype
                ));
            }
            return parse_value(self.dtype, word, self.out);
        }
        let start = self.at;
        while !matches!(
            self.peek(),
            Some(b',' | b']' | b' ' | b'\t' | b'\r' | b'\n') | None
        ) {
            self.at += 1;
        }
        let token = std::str::from_utf8(&self.bytes[start..self.at]).unwrap_or("");
        let boolean = matches!(token, "true" | "false");
        if self.dtype == ElementType::Pred && !boolean {
            return Err(format!(
                "`{}` is not a BOOL value (true or false)",
                shown(token)
            ));
        }
        if self.dtype != ElementType::Pred && (boolean || token == "null") {
            return Err(format!("`{token}` is not a {} value", self.dtype));
        }
        parse_value(self.dtype, token, self.out).map_err(|e| shown(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, dtype: ElementType, dims: &[i64]) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        read_json_data(text, dtype, dims, &mut out).map(|()| out)
    }

    fn i32s(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn data_is_read_flat_or_nested_as_its_shape() {
        let want = i32s(&[1, 2, 3, 4, 5, 6]);
        for text in [
            "[1,2,3,4,5,6]",
            " [ 1 , 2,3,4,5, 6 ] ",
            "[[1,2,3],[4,5,6]]",
            "[[1, 2, 3],\n [4, 5, 6]]",
        ] {
            assert_eq!(
                read(text, ElementType::S32, &[2, 3]).unwrap(),
                want,
                "{text}"
            );
        }
        assert_eq!(
            read("[]", ElementType::S32, &[0, 3]).unwrap(),
            Vec::<u8>::new()
        );
        assert_eq!(read("7", ElementType::S32, &[]).unwrap(), i32s(&[7]));
        assert_eq!(read("[7]", ElementType::S32, &[]).unwrap(), i32s(&[7]));
        assert_eq!(
            read("[true,false]", ElementType::Pred, &[2]).unwrap(),
            vec![1, 0]
        );
        let nan = read(r#"["NaN","-inf"]"#, ElementType::F32, &[2]).unwrap();
        assert!(f32::from_le_bytes(nan[..4].try_into().unwrap()).is_nan());
        assert_eq!(
            f32::from_le_bytes(nan[4..].try_into().unwrap()),
            f32::NEG_INFINITY
        );
    }

    #[test]
    fn ragged_wrongly_counted_and_mistyped_data_is_refused_saying_where() {
        // (data, dtype, shape, what the message says)
        let cases: [(&str, ElementType, &[i64], &str); 16] = [
            (
                "[[1,2,3],[4,5]]",
                ElementType::S32,
                &[2, 3],
                "`data[1]` holds 2 items",
            ),
            (
                "[[1,2,3],[4,5,6,7]]",
                ElementType::S32,
                &[2, 3],
                "`data[1]` holds more than 3",
            ),
            (
                "[[1,2,3],4]",
                ElementType::S32,
                &[2, 3],
                "is a value where a list",
            ),
            (
                "[[1,2,3]]",
                ElementType::S32,
                &[2, 3],
                "`data` holds 1 items",
            ),
            (
                "[[[1],[2],[3]],[4,5,6]]",
                ElementType::S32,
                &[2, 3],
                "nested deeper",
            ),
            (
                "[1,2,[3],4,5,6]",
                ElementType::S32,
                &[2, 3],
                "mixes lists and values",
            ),
            (
                "[1,2,3,4,5]",
                ElementType::S32,
                &[2, 3],
                "holds 5 values; the shape [2, 3] holds 6",
            ),
            (
                "[1,2,3,4,5,6,7]",
                ElementType::S32,
                &[2, 3],
                "more than the 6 values",
            ),
            ("[1.0,2]", ElementType::S32, &[2], "`1.0` is not an integer"),
            ("[1,2147483648]", ElementType::S32, &[2], "does not fit in"),
            ("[true,1]", ElementType::S32, &[2], "`true` is not a"),
            ("[1,0]", ElementType::Pred, &[2], "not a BOOL value"),
            (
                r#"["1.5",2]"#,
                ElementType::F32,
                &[2],
                "the string `\"1.5\"`",
            ),
            ("[null,2]", ElementType::F32, &[2], "`null` is not a"),
            ("{\"a\":1}", ElementType::F32, &[1], "not a list"),
            ("[3.5e38]", ElementType::F32, &[1], "out of the range"),
        ];
        for (text, dtype, dims, says) in cases {
            let err = read(text, dtype, dims).unwrap_err();
            assert!(err.contains(says), "{text}: `{err}` lacks `{says}`");
        }
    }

    #[test]
    fn fp64_values_are_read_exactly() {
        let v = -6.241978532667931e240f64;
        let got = read("[-6.241978532667931e+240]", ElementType::F64, &[1]).unwrap();
        assert_eq!(got, v.to_le_bytes());
        let max = read("[3.4028235e38]", ElementType::F32, &[1]).unwrap();
        assert_eq!(max, f32::MAX.to_le_bytes());
    }
}
