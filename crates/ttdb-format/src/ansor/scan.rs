//! A small, strict, allocation-light JSON reader for record lines.
//!
//! Why not serde_json::Value: a record line is ~700 bytes holding ~100 JSON values, and
//! building a generic tree for each costs more than everything else an import does. This
//! reader walks the line once, the record parser pulls exactly the fields it expects, and
//! strings without escapes are borrowed. It accepts exactly RFC 8259 JSON.
use std::borrow::Cow;

pub struct Scanner<'a> {
    /// The text; `s` is its bytes. Positions at ASCII bytes are always char boundaries, so
    /// slicing `text` there never needs a UTF-8 re-check.
    text: &'a str,
    s: &'a [u8],
    pub pos: usize,
}

/// A parse error at a byte offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanError {
    pub pos: usize,
    pub msg: String,
}

pub type Scan<T> = Result<T, ScanError>;

/// The kind of the next value, from its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object,
}

impl<'a> Scanner<'a> {
    pub fn new(s: &'a str) -> Scanner<'a> {
        Scanner {
            text: s,
            s: s.as_bytes(),
            pos: 0,
        }
    }

    pub fn err<T>(&self, msg: impl Into<String>) -> Scan<T> {
        Err(ScanError {
            pos: self.pos,
            msg: msg.into(),
        })
    }

    pub fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.pos) {
            self.pos += 1;
        }
    }

    pub fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.pos).copied()
    }

    pub fn at_end(&mut self) -> bool {
        self.peek().is_none()
    }

    pub fn expect(&mut self, c: u8) -> Scan<()> {
        match self.peek() {
            Some(b) if b == c => {
                self.pos += 1;
                Ok(())
            }
            Some(b) => self.err(format!("expected '{}', found '{}'", c as char, b as char)),
            None => self.err(format!("expected '{}', found end of line", c as char)),
        }
    }

    /// Consumes `word` if the next value is exactly that word (followed by a delimiter),
    /// for the few non-JSON literals a caller chooses to read (see `record::cost`).
    pub fn eat_word(&mut self, word: &str) -> bool {
        self.ws();
        let end = self.pos + word.len();
        let here = self.s[self.pos..].starts_with(word.as_bytes());
        if here && !self.s.get(end).is_some_and(|b| b.is_ascii_alphanumeric()) {
            self.pos = end;
            return true;
        }
        false
    }

    pub fn kind(&mut self) -> Scan<Kind> {
        Ok(match self.peek() {
            Some(b'n') => Kind::Null,
            Some(b't' | b'f') => Kind::Bool,
            Some(b'-' | b'0'..=b'9') => Kind::Number,
            Some(b'"') => Kind::String,
            Some(b'[') => Kind::Array,
            Some(b'{') => Kind::Object,
            Some(b) => return self.err(format!("unexpected character '{}'", b.escape_ascii())),
            None => return self.err("unexpected end of line"),
        })
    }

    /// Steps through the items of an array: call after `[` has been consumed; returns
    /// false at `]` (consumed). Handles the commas.
    pub fn next_item(&mut self, first: &mut bool) -> Scan<bool> {
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(false);
        }
        if !*first {
            self.expect(b',')?;
            if self.peek() == Some(b']') {
                return self.err("trailing comma");
            }
        }
        *first = false;
        Ok(true)
    }

    fn literal(&mut self, word: &str) -> Scan<()> {
        if self.s[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(())
        } else {
            self.err("invalid literal")
        }
    }

    /// The text of a number, validated against the JSON grammar.
    pub fn number_text(&mut self) -> Scan<&'a str> {
        self.ws();
        let start = self.pos;
        let s = self.s;
        let digits = |p: &mut usize| {
            let b = *p;
            while s.get(*p).is_some_and(u8::is_ascii_digit) {
                *p += 1;
            }
            *p > b
        };
        let mut p = self.pos;
        if s.get(p) == Some(&b'-') {
            p += 1;
        }
        if s.get(p) == Some(&b'0') {
            p += 1;
        } else if !digits(&mut p) {
            return self.err("invalid number");
        }
        if s.get(p) == Some(&b'.') {
            p += 1;
            if !digits(&mut p) {
                self.pos = p;
                return self.err("invalid number: no digits after '.'");
            }
        }
        if let Some(b'e' | b'E') = s.get(p) {
            p += 1;
            if let Some(b'+' | b'-') = s.get(p) {
                p += 1;
            }
            if !digits(&mut p) {
                self.pos = p;
                return self.err("invalid number: no exponent digits");
            }
        }
        self.pos = p;
        Ok(&self.text[start..p])
    }

    /// An integer; `Err` names a non-integer or out-of-range number.
    pub fn int(&mut self) -> Scan<i64> {
        let start = self.pos;
        let t = self.number_text()?;
        if t.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
            self.pos = start;
            return self.err(format!("{t} is not an integer"));
        }
        t.parse::<i64>().or_else(|_| {
            self.pos = start;
            self.err(format!("{t} is out of range"))
        })
    }

    pub fn float(&mut self) -> Scan<f64> {
        let t = self.number_text()?;
        // Any JSON number parses as an f64 (huge exponents become infinity).
        let x: f64 = t.parse().expect("JSON numbers are valid Rust floats");
        if x.is_finite() {
            Ok(x)
        } else {
            self.err(format!("{t} is out of range for a double"))
        }
    }

    pub fn string(&mut self) -> Scan<Cow<'a, str>> {
        self.expect(b'"')?;
        let start = self.pos;
        let s = self.s;
        // Fast path: no escapes.
        loop {
            match s.get(self.pos) {
                None => return self.err("unterminated string"),
                Some(b'"') => {
                    let text = &self.text[start..self.pos];
                    self.pos += 1;
                    return Ok(Cow::Borrowed(text));
                }
                Some(b'\\') => break,
                Some(&b) if b < 0x20 => return self.err("control character in string"),
                Some(_) => self.pos += 1,
            }
        }
        let mut out = String::from(&self.text[start..self.pos]);
        let mut run = self.pos;
        loop {
            match s.get(self.pos) {
                None => return self.err("unterminated string"),
                Some(b'"') => {
                    out.push_str(&self.text[run..self.pos]);
                    self.pos += 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {
                    out.push_str(&self.text[run..self.pos]);
                    self.pos += 1;
                    let c = match s.get(self.pos) {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            self.pos += 1;
                            let hi = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&hi) {
                                if s.get(self.pos..self.pos + 2) != Some(b"\\u") {
                                    return self.err("unpaired surrogate in \\u escape");
                                }
                                self.pos += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return self.err("invalid low surrogate in \\u escape");
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else {
                                hi
                            };
                            let c = char::from_u32(code)
                                .map_or_else(|| self.err("invalid \\u escape"), Ok)?;
                            out.push(c);
                            run = self.pos;
                            continue;
                        }
                        _ => return self.err("invalid escape"),
                    };
                    out.push(c);
                    self.pos += 1;
                    run = self.pos;
                }
                Some(&b) if b < 0x20 => return self.err("control character in string"),
                Some(_) => self.pos += 1,
            }
        }
    }

    fn hex4(&mut self) -> Scan<u32> {
        let h = self
            .s
            .get(self.pos..self.pos + 4)
            .and_then(|h| std::str::from_utf8(h).ok());
        let v = h
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .map_or_else(|| self.err("invalid \\u escape"), Ok)?;
        self.pos += 4;
        Ok(v)
    }

    /// Skips one value of any kind (validating it), with a depth limit against stack abuse.
    pub fn skip_value(&mut self) -> Scan<()> {
        self.skip_depth(0)
    }

    fn skip_depth(&mut self, depth: usize) -> Scan<()> {
        if depth > 64 {
            return self.err("nesting too deep");
        }
        match self.kind()? {
            Kind::Null => self.literal("null"),
            Kind::Bool => {
                if self.s[self.pos] == b't' {
                    self.literal("true")
                } else {
                    self.literal("false")
                }
            }
            Kind::Number => self.number_text().map(|_| ()),
            Kind::String => self.string().map(|_| ()),
            Kind::Array => {
                self.expect(b'[')?;
                let mut first = true;
                while self.next_item(&mut first)? {
                    self.skip_depth(depth + 1)?;
                }
                Ok(())
            }
            Kind::Object => {
                self.expect(b'{')?;
                let mut first = true;
                while self.next_key(&mut first)?.is_some() {
                    self.skip_depth(depth + 1)?;
                }
                Ok(())
            }
        }
    }

    /// Steps through an object's members: call after `{`; returns the next key (the ':'
    /// consumed) or None at `}` (consumed).
    pub fn next_key(&mut self, first: &mut bool) -> Scan<Option<Cow<'a, str>>> {
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(None);
        }
        if !*first {
            self.expect(b',')?;
        }
        *first = false;
        let k = self.string()?;
        self.expect(b':')?;
        Ok(Some(k))
    }

    /// Parses a null literal.
    pub fn null(&mut self) -> Scan<()> {
        self.ws();
        self.literal("null")
    }

    pub fn boolean(&mut self) -> Scan<bool> {
        self.ws();
        if self.s.get(self.pos) == Some(&b't') {
            self.literal("true").map(|_| true)
        } else {
            self.literal("false").map(|_| false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_values() {
        let mut s =
            Scanner::new(r#" [1, -2.5e-3, "a\"b\u00e9\ud83d\ude00", true, null, {"k": [ ]}] "#);
        s.expect(b'[').unwrap();
        let mut first = true;
        assert!(s.next_item(&mut first).unwrap());
        assert_eq!(s.int().unwrap(), 1);
        assert!(s.next_item(&mut first).unwrap());
        assert_eq!(s.float().unwrap(), -2.5e-3);
        assert!(s.next_item(&mut first).unwrap());
        assert_eq!(s.string().unwrap(), "a\"bé😀");
        assert!(s.next_item(&mut first).unwrap());
        assert!(s.boolean().unwrap());
        assert!(s.next_item(&mut first).unwrap());
        s.null().unwrap();
        assert!(s.next_item(&mut first).unwrap());
        s.skip_value().unwrap();
        assert!(!s.next_item(&mut first).unwrap());
        assert!(s.at_end());
    }

    #[test]
    fn rejects_what_json_rejects() {
        for bad in [
            "01",
            "1.",
            "-",
            "1e",
            "\"\\x\"",
            "\"a\u{1}\"",
            "[1,]",
            "[1 2]",
            "tru",
            "\"\\ud800\"",
            "{\"a\" 1}",
        ] {
            let mut s = Scanner::new(bad);
            assert!(s.skip_value().is_err() || !s.at_end(), "{bad}");
        }
        assert!(Scanner::new("1.5").int().is_err());
        assert!(Scanner::new("99999999999999999999").int().is_err());
        assert!(Scanner::new("1e999").float().is_err());
        let deep = "[".repeat(100) + &"]".repeat(100);
        assert!(Scanner::new(&deep).skip_value().is_err());
    }

    /// The scanner agrees with serde_json on what is valid JSON.
    #[test]
    fn agrees_with_serde_json() {
        for text in [
            "[]",
            "{}",
            "[1,[2,[3]]]",
            "{\"a\":{\"b\":[]}}",
            "\"\\/\"",
            "-0",
            "0.5E+2",
            "[\"\\u0041\"]",
            "{\"a\":1,}",
            "[,1]",
            "  7  ",
        ] {
            let ours = {
                let mut s = Scanner::new(text);
                s.skip_value().is_ok() && s.at_end()
            };
            let theirs = serde_json::from_str::<serde_json::Value>(text).is_ok();
            assert_eq!(ours, theirs, "{text}");
        }
    }
}
