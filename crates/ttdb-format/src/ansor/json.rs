//! A tiny JSON writer that reproduces the layout of TVM's dmlc `JSONWriter` as used by
//! `WriteMeasureRecords`: arrays as `[a, b, c]`, objects as `{"i": ..., "r": ...}`.
//! (serde_json's compact form omits the spaces, which TVM accepts but which is not what
//! TVM writes; keeping TVM's layout makes exported files diff cleanly against real logs.)

pub struct JsonWriter {
    out: String,
    /// One flag per open container: has it received an item yet?
    open: Vec<bool>,
}

/// A value the writer knows how to emit.
pub trait JsonItem {
    fn write_json(&self, out: &mut String);
}

impl JsonItem for u32 {
    fn write_json(&self, out: &mut String) {
        push_int(out, *self as i64);
    }
}
impl JsonItem for u8 {
    fn write_json(&self, out: &mut String) {
        push_int(out, *self as i64);
    }
}
impl JsonItem for i64 {
    fn write_json(&self, out: &mut String) {
        push_int(out, *self);
    }
}
/// Flags are written as TVM writes them: `0` / `1`.
impl JsonItem for bool {
    fn write_json(&self, out: &mut String) {
        out.push(if *self { '1' } else { '0' });
    }
}
impl JsonItem for f64 {
    fn write_json(&self, out: &mut String) {
        push_float(out, *self);
    }
}
impl JsonItem for str {
    fn write_json(&self, out: &mut String) {
        push_string(out, self);
    }
}
impl JsonItem for String {
    fn write_json(&self, out: &mut String) {
        push_string(out, self);
    }
}
impl<T: JsonItem> JsonItem for Vec<T> {
    fn write_json(&self, out: &mut String) {
        out.push('[');
        for (i, x) in self.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            x.write_json(out);
        }
        out.push(']');
    }
}
impl<T: JsonItem + ?Sized> JsonItem for &T {
    fn write_json(&self, out: &mut String) {
        (**self).write_json(out);
    }
}

fn push_int(out: &mut String, i: i64) {
    use std::fmt::Write;
    let _ = write!(out, "{i}");
}

/// Floats as TVM writes them (C++ `ostream << double`, i.e. `%g` with precision 6:
/// `0.000576575`, `2.521e-06`, `1e+10`, `15`), except that the precision grows to the
/// shortest digit count that parses back to the same f64, so nothing is lost.
/// JSON has no NaN or infinity: those are written as Python's `json` writes them (`NaN`,
/// `Infinity`, `-Infinity`), which the record reader takes back in costs (and only there:
/// such a record is a failed measurement).
pub fn push_float(out: &mut String, x: f64) {
    if x.is_nan() {
        out.push_str("NaN");
        return;
    }
    if x.is_infinite() {
        out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    if x == 0.0 {
        out.push_str(if x.is_sign_negative() { "-0" } else { "0" });
        return;
    }
    // Shortest round-trip digits and decimal exponent, from Rust's `{:e}` ("2.521e-6").
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("exponent is an int");
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let precision = (digits.len() as i32).max(6);
    if x.is_sign_negative() {
        out.push('-');
    }
    if (-4..precision).contains(&exp) {
        // Fixed notation without trailing zeros.
        if exp < 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        } else {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        use std::fmt::Write;
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
}

pub fn push_string(out: &mut String, s: &str) {
    // serde_json's escaping is standard JSON; write into a small buffer to reuse it.
    out.push_str(&serde_json::to_string(s).expect("strings always serialize"));
}

impl JsonWriter {
    pub fn new() -> Self {
        JsonWriter {
            out: String::with_capacity(512),
            open: Vec::new(),
        }
    }

    fn separator(&mut self) {
        if let Some(has_item) = self.open.last_mut() {
            if *has_item {
                self.out.push_str(", ");
            }
            *has_item = true;
        }
    }

    pub fn begin_array(&mut self) {
        self.separator();
        self.out.push('[');
        self.open.push(false);
    }

    pub fn end_array(&mut self) {
        self.open.pop();
        self.out.push(']');
    }

    pub fn begin_object(&mut self) {
        self.separator();
        self.out.push('{');
        self.open.push(false);
    }

    pub fn end_object(&mut self) {
        self.open.pop();
        self.out.push('}');
    }

    /// An object key; the next item is its value.
    pub fn key(&mut self, k: &str) {
        self.separator();
        push_string(&mut self.out, k);
        self.out.push_str(": ");
        // The value that follows must not get a separator of its own.
        if let Some(has_item) = self.open.last_mut() {
            *has_item = false;
        }
    }

    pub fn item<T: JsonItem + ?Sized>(&mut self, v: &T) {
        self.separator();
        v.write_json(&mut self.out);
        // After a key's value, the object has an item.
        if let Some(has_item) = self.open.last_mut() {
            *has_item = true;
        }
    }

    /// Raw JSON text as one item (already valid JSON).
    pub fn raw(&mut self, json: &str) {
        self.separator();
        self.out.push_str(json);
    }

    pub fn finish(self) -> String {
        self.out
    }
}

impl Default for JsonWriter {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_dmlc() {
        let mut w = JsonWriter::new();
        w.begin_object();
        w.key("i");
        w.begin_array();
        w.item("a\"b");
        w.item(&vec![1i64, 2]);
        w.end_array();
        w.key("v");
        w.item("v0.6");
        w.end_object();
        assert_eq!(w.finish(), r#"{"i": ["a\"b", [1, 2]], "v": "v0.6"}"#);
    }

    #[test]
    fn floats_round_trip_in_tvm_layout() {
        let cases = [
            (0.000576575, "0.000576575"),
            (2.521e-06, "2.521e-06"),
            (1e10, "1e+10"),
            (0.759554, "0.759554"),
            (15.0, "15"),
            (0.0001, "0.0001"),
            (123456789.123, "123456789.123"),
            (1234567.0, "1234567"),
            (-3.5e-7, "-3.5e-07"),
            (1e-300, "1e-300"),
            (0.1 + 0.2, "0.30000000000000004"),
        ];
        for (x, want) in cases {
            let mut s = String::new();
            push_float(&mut s, x);
            assert_eq!(s, want);
            assert_eq!(s.parse::<f64>().unwrap(), x, "{s}");
        }
    }
}
