//! The parser and writer on every real log of the corpus.
use crate::common;
use ttdb::ansor::{parse_line, LogLine, Record};

#[test]
fn every_corpus_line_parses_and_round_trips() {
    let mut total = 0;
    let mut byte_identical = 0;
    for path in common::ansor_files() {
        let buf = std::fs::read(&path).unwrap();
        let mut records = 0;
        let mut content_lines = 0;
        for (ln, bytes) in ttdb::ansor::log::lines(&buf) {
            match parse_line(bytes) {
                LogLine::Blank | LogLine::Comment => {}
                LogLine::Record { raw, record } => {
                    content_lines += 1;
                    records += 1;
                    let written = record.to_line();
                    let back = Record::parse(&written).unwrap_or_else(|e| {
                        panic!(
                            "{}:{ln}: rewritten line does not parse: {e}",
                            path.display()
                        )
                    });
                    assert_eq!(
                        back,
                        *record,
                        "{}:{ln}: round trip changed the record",
                        path.display()
                    );
                    byte_identical += (written == raw) as usize;
                }
                LogLine::Bad { reason, .. } => panic!("{}:{ln}: {reason}", path.display()),
            }
        }
        let expected = String::from_utf8_lossy(&buf)
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .count();
        assert_eq!(records, expected, "{}", path.display());
        assert_eq!(content_lines, records);
        total += records;
    }
    assert_eq!(
        total, 78_621,
        "records in the corpus (curated logs: 5,701 CPU + 25 CUDA; full tuning histories: \
         16,365 resnet_18 + 25,366 resnet_50 + 31,164 mobilenet_v2)"
    );
    // The writer follows TVM's layout (dmlc separators, `%g` floats): every real line comes
    // back byte for byte, not only as an equal value.
    assert_eq!(
        byte_identical, total,
        "rewritten lines that are byte-identical to the source"
    );
}
