//! The data flows one way: each module uses only the modules before it in the order
//! `docs/architecture.md` gives (its `layers` block). The layers are crates, so Cargo already
//! refuses a crate that uses a later one; this checks the order of the modules inside the
//! crates too, on the source text: every `crate::<module>` and `ttdb_<layer>::<module>` path
//! outside comments, in production code and in unit tests alike. Also: SQL stays in `store/`.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The module order of `docs/architecture.md`: one entry per line of its `layers` block.
fn layers() -> Vec<Vec<String>> {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md");
    let text = std::fs::read_to_string(&doc).expect("docs/architecture.md");
    let block = text
        .split("```layers\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a ```layers block in docs/architecture.md");
    block
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// What a crate root offers every module (not a stage): `ttdb_format::version`, the step
/// dispatch macro, the store's tests-on-both-backends macro (`ttdb_store::on_both_backends`).
const ROOT_ITEMS: &[&str] = &["version", "each_step", "on_both_backends"];

/// Where the modules' sources are: each crate's `src/`, and the root package's.
fn source_roots() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = vec![root.join("src")];
    for e in std::fs::read_dir(root.join("crates")).unwrap() {
        out.push(e.unwrap().path().join("src"));
    }
    out.sort();
    out
}

fn rank(module: &str) -> Option<usize> {
    layers().iter().position(|l| l.iter().any(|m| m == module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module a file of `src/` belongs to (`src/lower/te.rs` -> `lower`, `src/host.rs` ->
/// `host`); None for the crate root and the binary.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    // The test-support crate is one stage, whatever its files are called.
    if src.parent().is_some_and(|c| c.ends_with("ttdb-testkit")) {
        return Some("testkit".to_string());
    }
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()?
        .as_os_str()
        .to_string_lossy()
        .into_owned();
    let name = first.trim_end_matches(".rs").to_string();
    (name != "lib" && name != "main").then_some(name)
}

/// `crate::x` and `ttdb_<layer>::x` paths used outside comments: (line number, x).
fn crate_uses(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        let code = line.split(" // ").next().unwrap_or(line);
        let mut rest = code;
        while let Some(i) = rest.find("::") {
            let before = &rest[..i];
            let head: String = before
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            rest = &rest[i + 2..];
            if head != "crate" && !head.starts_with("ttdb_") {
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            out.push((n + 1, name));
        }
    }
    out
}

#[test]
fn no_module_uses_a_later_stage() {
    let mut unknown = BTreeMap::new();
    let mut backwards = Vec::new();
    let mut seen = 0;
    for src in source_roots() {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for f in &files {
            let Some(module) = module_of(&src, f) else {
                continue;
            };
            let Some(mine) = rank(&module) else {
                unknown.insert(module, f.display().to_string());
                continue;
            };
            seen += 1;
            let text = std::fs::read_to_string(f).unwrap();
            for (line, used) in crate_uses(&text) {
                if used == module || ROOT_ITEMS.contains(&used.as_str()) {
                    continue;
                }
                match rank(&used) {
                    Some(r) if r < mine => {}
                    Some(_) => backwards.push(format!(
                        "{}:{line}: `{module}` uses `{used}`, which stands at or after it",
                        f.display()
                    )),
                    None => {
                        unknown.insert(used, f.display().to_string());
                    }
                }
            }
        }
    }
    assert!(seen > 150, "the layering check read only {seen} files");
    assert!(
        unknown.is_empty(),
        "modules missing from docs/architecture.md's layers (add them where they stand in the data flow): {unknown:?}"
    );
    assert!(
        backwards.is_empty(),
        "imports against the data flow:\n{}",
        backwards.join("\n")
    );
}

#[test]
fn sql_lives_in_the_store() {
    let mut outside = Vec::new();
    for src in source_roots() {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for f in &files {
            if module_of(&src, f).as_deref() == Some("store") {
                continue;
            }
            let text = std::fs::read_to_string(f).unwrap();
            for (n, line) in text.lines().enumerate() {
                if line.contains("rusqlite") || line.contains("connection_for_tests") {
                    outside.push(format!("{}:{}", f.display(), n + 1));
                }
            }
        }
    }
    assert!(outside.is_empty(), "SQL outside store/: {outside:?}");
}

#[test]
fn the_checker_sees_uses() {
    let uses = crate_uses(
        "use crate::lower::x;\n// crate::cli in a comment\nlet a = crate::ir::Dag::new(); // crate::tune\nuse ttdb_store::bundle::y;\n",
    );
    assert_eq!(
        uses,
        [
            (1, "lower".to_string()),
            (3, "ir".to_string()),
            (4, "bundle".to_string())
        ]
    );
    assert!(rank("cli") > rank("store"));
    assert!(rank("bundle") < rank("loopnest"));
}
