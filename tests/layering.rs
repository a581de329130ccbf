//! The data flows one way: each module of `src/` may use only the modules before it in
//! [`LAYERS`] (the order `src/lib.rs` documents). Checked on the source text: every
//! `crate::<module>` outside comments, in production code and in unit tests alike. Also:
//! SQL stays in `store/`.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Modules in data-flow order. Modules on one line are independent of each other.
const LAYERS: &[&[&str]] = &[
    &["ansor", "signature", "atomic_file"],
    &["host"],
    &["ir"],
    &["ops"],
    &["schedule"],
    &["recognize"],
    &["store"],
    &["loopnest"],
    &["lower"],
    &["codegen"],
    &["measure"],
    &["evaluate"],
    &["onnx"],
    &["matcher"],
    &["search"],
    &["tune"],
    &["bundle"],
    &["cli"],
];

/// What the crate root offers every module (not a stage).
const ROOT_ITEMS: &[&str] = &["version"];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
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

/// `crate::x` paths used outside comments: (line number, x).
fn crate_uses(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        let code = line.split(" // ").next().unwrap_or(line);
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
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
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut unknown = BTreeMap::new();
    let mut backwards = Vec::new();
    for f in &files {
        let Some(module) = module_of(&src, f) else {
            continue;
        };
        let Some(mine) = rank(&module) else {
            unknown.insert(module, f.display().to_string());
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        for (line, used) in crate_uses(&text) {
            if used == module || ROOT_ITEMS.contains(&used.as_str()) {
                continue;
            }
            match rank(&used) {
                Some(r) if r < mine => {}
                Some(_) => backwards.push(format!(
                    "{}:{line}: `{module}` uses `crate::{used}`, which stands at or after it",
                    f.strip_prefix(&src).unwrap().display()
                )),
                None => {
                    unknown.insert(used, f.display().to_string());
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "modules missing from LAYERS (add them where they stand in the data flow): {unknown:?}"
    );
    assert!(
        backwards.is_empty(),
        "imports against the data flow:\n{}",
        backwards.join("\n")
    );
}

#[test]
fn sql_lives_in_the_store() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut outside = Vec::new();
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
    assert!(outside.is_empty(), "SQL outside store/: {outside:?}");
}

#[test]
fn the_checker_sees_uses() {
    let uses = crate_uses("use crate::lower::x;\n// crate::cli in a comment\nlet a = crate::ir::Dag::new(); // crate::tune\n");
    assert_eq!(uses, [(1, "lower".to_string()), (3, "ir".to_string())]);
    assert!(rank("cli") > rank("store"));
}
