//! Reading a log file: line classification and per-line results, never aborting on a bad
//! line. Lines are byte slices so that invalid UTF-8 is reported, not fatal.
use super::record::{Record, RecordError};

/// What one physical line of a log is.
#[derive(Debug)]
pub enum LogLine<'a> {
    /// Empty or whitespace only (TVM's reader has undefined behaviour here; we skip).
    Blank,
    /// First byte `#` or ` `: TVM's `RecordReader` skips these.
    Comment,
    /// A record, with the raw text (without the line terminator) kept verbatim.
    Record { raw: &'a str, record: Box<Record> },
    /// A line that is neither: the reason, and the raw bytes for the report.
    Bad { raw: &'a [u8], reason: RecordError },
}

/// Classifies and parses one line (without its `\n`).
pub fn parse_line(bytes: &[u8]) -> LogLine<'_> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return LogLine::Blank;
    }
    if matches!(bytes[0], b'#' | b' ') {
        return LogLine::Comment;
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            return LogLine::Bad {
                raw: bytes,
                reason: RecordError(format!(
                    "not UTF-8 (invalid byte at column {})",
                    e.valid_up_to() + 1
                )),
            }
        }
    };
    match Record::parse(text) {
        Ok(record) => LogLine::Record {
            raw: text,
            record: Box::new(record),
        },
        Err(reason) => LogLine::Bad { raw: bytes, reason },
    }
}

/// Splits a buffer into lines: `(1-based line number, bytes without "\n")`. A final line
/// without a terminator is still a line.
pub fn lines(buf: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let body = buf.strip_suffix(b"\n").unwrap_or(buf);
    let empty = buf.is_empty();
    body.split(|&b| b == b'\n')
        .enumerate()
        .filter(move |_| !empty)
        .map(|(i, l)| (i + 1, l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_lines() {
        assert!(matches!(parse_line(b""), LogLine::Blank));
        assert!(matches!(parse_line(b"  \r"), LogLine::Blank));
        assert!(matches!(parse_line(b"# resnet"), LogLine::Comment));
        assert!(matches!(parse_line(b" {\"i\": 1}"), LogLine::Comment));
        assert!(matches!(parse_line(b"{\"i\""), LogLine::Bad { .. }));
        assert!(matches!(parse_line(b"\xff\xfe"), LogLine::Bad { .. }));
    }

    #[test]
    fn splits_lines_with_numbers() {
        let v: Vec<_> = lines(b"a\n\nb").collect();
        assert_eq!(v, vec![(1, &b"a"[..]), (2, &b""[..]), (3, &b"b"[..])]);
        assert_eq!(lines(b"a\n").count(), 1);
        assert_eq!(lines(b"").count(), 0);
    }
}
