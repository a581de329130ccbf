//! Reading a bundle's text as a stream: decompression within caps (the declared zstd size,
//! `Limits::max_bytes`, a bounded window), then one line at a time with the sha256 of the
//! text before it. Nothing holds more than one line and the decoder's window, so a
//! decompression bomb is refused in bounded memory (`format::read_from` checks the lines).
use super::format::{at, is_zstd, whole, FormatError, Limits};
use sha2::{Digest, Sha256};
use std::fmt;
use std::io::BufRead;
use ttdb_format::signature::hex;

/// The largest zstd window a bundle may need (2^24 = 16 MiB): the decoder allocates the
/// window a frame asks for, so a hostile frame must not choose it. ttdb's own bundles,
/// compressed whole at level 9, need at most a few MiB.
const ZSTD_WINDOW_LOG_MAX: u32 = 24;

/// The text of a bundle file read from `file`, decompressed if it is zstd, as a stream that
/// fails once it passes `limits.max_bytes`, or the size its zstd frame declares. Nothing is
/// held but the decoder's window: a decompression bomb is refused after at most
/// `max_bytes` of output, without that output ever being in memory.
pub(super) fn text_stream<'a, R: std::io::BufRead + 'a>(
    mut file: R,
    limits: &Limits,
) -> Result<Box<dyn std::io::BufRead + 'a>, FormatError> {
    let head = file
        .fill_buf()
        .map_err(|e| whole(format!("cannot read: {e}")))?;
    if !is_zstd(head) {
        return Ok(Box::new(Capped::new(file, limits.max_bytes, None)));
    }
    // The frame's declared content size (ttdb writes it): over the limit, the bundle is
    // refused before a byte is decompressed.
    // An unreadable header (cut short, or corrupt) is the decoder's to report.
    let declared = zstd::zstd_safe::get_frame_content_size(head).unwrap_or(None);
    if let Some(n) = declared.filter(|&n| n > limits.max_bytes) {
        return Err(whole(format!(
            "the zstd frame declares {n} bytes of text, over the limit of {} (a decompression bomb?)",
            limits.max_bytes
        )));
    }
    let mut decoder =
        zstd::stream::read::Decoder::with_buffer(file).map_err(|e| whole(format!("zstd: {e}")))?;
    decoder
        .window_log_max(ZSTD_WINDOW_LOG_MAX)
        .map_err(|e| whole(format!("zstd: {e}")))?;
    Ok(Box::new(Capped::new(
        std::io::BufReader::new(decoder.single_frame()),
        limits.max_bytes,
        declared,
    )))
}

/// A reader that fails past `max` bytes, and (when `declared` is known) unless it ends at
/// exactly that many.
struct Capped<R> {
    inner: R,
    read: u64,
    max: u64,
    declared: Option<u64>,
}

impl<R> Capped<R> {
    fn new(inner: R, max: u64, declared: Option<u64>) -> Self {
        Capped {
            inner,
            read: 0,
            max,
            declared,
        }
    }
}

impl<R: std::io::BufRead> std::io::Read for Capped<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = {
            let buf = self.fill_buf()?;
            let n = buf.len().min(out.len());
            out[..n].copy_from_slice(&buf[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl<R: std::io::BufRead> std::io::BufRead for Capped<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        let bomb =
            |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, CapError(what));
        let (read, max, declared) = (self.read, self.max, self.declared);
        let buf = self.inner.fill_buf()?;
        if buf.is_empty() {
            if let Some(d) = declared.filter(|&d| d != read) {
                return Err(bomb(format!(
                    "the text is {read} bytes, not the {d} its zstd frame declares (corrupt)"
                )));
            }
        } else if read + buf.len() as u64 > declared.unwrap_or(max).min(max) {
            return Err(bomb(match declared {
                Some(d) if d <= max => {
                    format!("the text runs past the {d} bytes its zstd frame declares (corrupt)")
                }
                _ => format!("the text is over the limit of {max} bytes (a decompression bomb?)"),
            }));
        }
        Ok(buf)
    }

    fn consume(&mut self, n: usize) {
        self.read += n as u64;
        self.inner.consume(n);
    }
}

/// A limit or declared size the text broke (inside an `io::Error` from [`Capped`]).
#[derive(Debug)]
struct CapError(String);

impl fmt::Display for CapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CapError {}

pub(super) fn stream_error(e: std::io::Error) -> FormatError {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<CapError>())
    {
        Some(cap) => whole(cap.0.clone()),
        None => whole(format!("zstd: {e} (truncated or corrupt compressed data)")),
    }
}

/// One line of a bundle's text at a time, with the sha256 of everything before it.
pub(super) struct Lines<R> {
    text: R,
    number: usize,
    /// sha256 of the lines before the one last returned.
    before: Sha256,
    /// The line last returned, with its newline (hashed when the next is read).
    last: Vec<u8>,
}

impl<R: std::io::BufRead> Lines<R> {
    pub(super) fn new(text: R) -> Self {
        Lines {
            text,
            number: 0,
            before: Sha256::new(),
            last: Vec::new(),
        }
    }

    /// sha256 (hex) of the text before the line last returned.
    pub(super) fn hash_before(&self) -> String {
        hex(&self.before.clone().finalize())
    }

    pub(super) fn next(&mut self, limits: &Limits) -> Option<Result<(usize, String), FormatError>> {
        self.before.update(&self.last);
        self.last.clear();
        self.number += 1;
        let number = self.number;
        loop {
            let buf = match self.text.fill_buf() {
                Ok(b) => b,
                Err(e) => return Some(Err(stream_error(e))),
            };
            if buf.is_empty() {
                if self.last.is_empty() {
                    return None;
                }
                return Some(Err(at(
                    number,
                    None,
                    "the last line has no newline: the file is truncated",
                )));
            }
            let (take, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            if self.last.len() + take > limits.max_line + 1 {
                return Some(Err(at(
                    number,
                    None,
                    format!("a line over the limit of {} bytes", limits.max_line),
                )));
            }
            self.last.extend_from_slice(&buf[..take]);
            self.text.consume(take);
            if done {
                break;
            }
        }
        let line = &self.last[..self.last.len() - 1];
        Some(match std::str::from_utf8(line) {
            Ok(s) => Ok((number, s.to_string())),
            Err(e) => Err(at(
                number,
                None,
                format!("not UTF-8 (invalid byte at column {})", e.valid_up_to() + 1),
            )),
        })
    }
}
