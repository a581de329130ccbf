//! Differential test against the Python reference simulator
//! (`../shared/tools/ansor_state_sim.py`): for every distinct key of the CPU logs (and the
//! CUDA gallery logs), the initial Ansor state the simulator builds — stage names,
//! placeholder shapes, iterator names, extents and kinds — must equal ttdb's
//! `Dag::initial_stages()` of the recognized DAG.
//!
//! Adaptive-pool reduce extents and sparse row lengths are expressions, not constants, in
//! TVM; the simulator prints `?` for them and ttdb reports `None`: both mean "no integer
//! range" and compare equal. The simulator is driven in one batch process through its own
//! `build()` / `State.dump()` functions.
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use ttdb::ansor::WorkloadKey;
use ttdb::ir::IterKind;
use ttdb::recognize::recognize_uncached;

fn shared() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared");
    assert!(
        dir.join("corpus/ansor").is_dir(),
        "the shared corpus is missing under {}",
        dir.display()
    );
    assert!(
        dir.join("tools/ansor_state_sim.py").is_file(),
        "the reference simulator is missing under {}/tools",
        dir.display()
    );
    dir
}

fn all_keys() -> Vec<String> {
    let root = shared().join("corpus/ansor");
    let mut keys = BTreeSet::new();
    for sub in std::fs::read_dir(&root).unwrap() {
        let sub = sub.unwrap().path();
        for f in std::fs::read_dir(&sub).unwrap() {
            let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
            for line in text.lines() {
                if line.trim().is_empty() || line.starts_with('#') || line.starts_with(' ') {
                    continue;
                }
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                keys.insert(v["i"][0][0].as_str().unwrap().to_string());
            }
        }
    }
    keys.into_iter().collect()
}

const DRIVER: &str = r#"
import sys
sys.path.insert(0, sys.argv[1])
import ansor_state_sim as S
for line in sys.stdin:
    key = line.rstrip("\n")
    print("KEY " + key)
    try:
        print(S.State(S.build(key)).dump())
    except Exception as e:
        print("ERROR %s: %s" % (type(e).__name__, e))
    print("END")
"#;

/// Simulator dumps, one per key (in order).
fn sim_dumps(keys: &[String]) -> Vec<String> {
    let tools = shared().join("tools");
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(DRIVER)
        .arg(&tools)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 is required to run the reference simulator");
    {
        let mut stdin = child.stdin.take().unwrap();
        for k in keys {
            writeln!(stdin, "{k}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "simulator failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut dumps = Vec::new();
    let mut cur: Option<String> = None;
    for line in text.lines() {
        if line.starts_with("KEY ") {
            cur = Some(String::new());
        } else if line == "END" {
            dumps.push(cur.take().expect("END after KEY"));
        } else if let Some(c) = cur.as_mut() {
            c.push_str(line);
            c.push('\n');
        }
    }
    assert_eq!(dumps.len(), keys.len(), "one simulator dump per key");
    dumps
}

/// ttdb's initial state in the simulator's dump format (`dump_state` of a fresh state).
fn ttdb_dump(key: &WorkloadKey) -> Result<String, String> {
    let r = recognize_uncached(key).map_err(|e| e.to_string())?;
    let mut out = String::new();
    for (i, s) in r.dag.initial_stages().iter().enumerate() {
        if s.is_placeholder {
            let dims: Vec<String> = s.shape.iter().map(i64::to_string).collect();
            out.push_str(&format!(
                "{i} {} placeholder [{}]\n",
                s.name,
                dims.join(",")
            ));
        } else {
            let iters: Vec<String> = s
                .iters
                .iter()
                .map(|it| {
                    let ext = it.extent.map_or("?".to_string(), |e| e.to_string());
                    let kind = match it.kind {
                        IterKind::Spatial => "S",
                        IterKind::Reduction => "R",
                    };
                    format!("{}={ext}:{kind}", it.name)
                })
                .collect();
            out.push_str(&format!(
                "{i} {} root unroll=0 : {}\n",
                s.name,
                iters.join(" ")
            ));
        }
    }
    Ok(out)
}

#[test]
fn initial_stages_equal_the_simulator() {
    let keys = all_keys();
    assert!(
        keys.len() > 500,
        "expected the whole corpus, got {} keys",
        keys.len()
    );
    let sims = sim_dumps(&keys);
    let mut mismatches = Vec::new();
    let mut sim_unknown = 0;
    for (key, sim) in keys.iter().zip(&sims) {
        if sim.starts_with("ERROR") {
            sim_unknown += 1;
            mismatches.push(format!("simulator cannot build {key}: {sim}"));
            continue;
        }
        let parsed = WorkloadKey::parse(key).unwrap();
        match ttdb_dump(&parsed) {
            Ok(ours) if &ours == sim => {}
            Ok(ours) => mismatches.push(format!("{key}\n--- simulator\n{sim}--- ttdb\n{ours}")),
            Err(e) => mismatches.push(format!("{key}: ttdb: {e}")),
        }
    }
    println!(
        "{} keys compared, {} differ, simulator unknown {sim_unknown}",
        keys.len(),
        mismatches.len()
    );
    assert!(
        mismatches.is_empty(),
        "{} keys differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}
