//! `ttdb kernels` end to end on ttdb's own fixtures.
use std::process::Command;

fn ttdb(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn kernels_table_and_json() {
    let (code, out, err) = ttdb(&[
        "kernels",
        "fixtures/models/tiny_resnet.onnx",
        "--no-tophub",
        "--layout-plan",
        "tophub",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("conv2d_nchwc+add+add+relu"), "{out}");
    assert!(
        out.contains("1x4x14x14x4, 4x4x3x3x4x4, 1x4x1x1x4, 1x4x14x14x4 -> 1x4x14x14x4"),
        "{out}"
    );
    assert!(out.contains("4,4 fallback"), "{out}");
    assert!(out.contains("5 tuned"), "{out}");

    let (code, out, err) = ttdb(&[
        "kernels",
        "fixtures/models/tiny_resnet.onnx",
        "--layout",
        "nhwc",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["layout"], "nhwc");
    let classes: Vec<&str> = v["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["class"].as_str().unwrap())
        .collect();
    assert!(classes.contains(&"conv2d_nhwc+add+add+relu"), "{classes:?}");
    let conv = v["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["class"] == "conv2d_nhwc+add+relu")
        .unwrap();
    assert_eq!(conv["kind"]["kind"], "tuned");
    assert_eq!(conv["signature_hash"].as_str().unwrap().len(), 64);
    assert_eq!(conv["occurrences"].as_array().unwrap().len(), 1);
}

#[test]
fn kernels_errors_are_clear() {
    let (code, _, err) = ttdb(&["kernels", "fixtures/models/symbolic_input.onnx"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("`image`") && err.contains("--input-shape"),
        "{err}"
    );
    let (code, out, err) = ttdb(&[
        "kernels",
        "fixtures/models/symbolic_input.onnx",
        "--input-shape",
        "image=1,3,16,16",
        "--mcpu",
        "core-avx2",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("8 lanes"), "{out}");
    let (code, _, err) = ttdb(&["kernels", "fixtures/models/control_flow.onnx"]);
    assert_ne!(code, 0);
    assert!(err.contains("`branch` (If)"), "{err}");
    let (code, _, err) = ttdb(&[
        "kernels",
        "fixtures/models/tiny_resnet.onnx",
        "--layout",
        "nchw4",
    ]);
    assert_eq!(code, 2, "{err}");
}

/// Output piped into a reader that stops early (`ttdb kernels M --json | head -c 10`) ends
/// ttdb quietly by SIGPIPE, as any Unix tool, never with a panic.
#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/corpus/onnx/torchvision_graph_only/densenet121.onnx"
    );
    assert!(
        std::path::Path::new(model).exists(),
        "the corpus is missing: {model}"
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .args(["kernels", model, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    // The pipe's read end is closed now; the JSON (85 kB) does not fit in its buffer.
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        status.signal(),
        Some(13),
        "killed by SIGPIPE: {status} {err}"
    );
}

/// `match` lists the untunable kernels with the reason, and `match --explain` on one says
/// which op of which ONNX nodes makes it untunable (pnet's PReLU is not in the registry).
#[test]
fn match_explains_untunable_kernels() {
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/corpus/onnx/odd/pnet.onnx"
    );
    assert!(
        std::path::Path::new(model).exists(),
        "the corpus is missing: {model}"
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("empty.db");
    // An empty database (reading commands create none).
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, "").unwrap();
    let (code, _, err) = ttdb(&[
        "--db",
        db.to_str().unwrap(),
        "import",
        empty.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let args = |extra: &[&'static str]| {
        let mut a = vec![
            "--db",
            db.to_str().unwrap(),
            "match",
            model,
            "--input-shape",
            "input_1=1,12,12,3",
        ];
        a.extend_from_slice(extra);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let run = |a: Vec<String>| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        ttdb(&a)
    };
    let (code, out, err) = run(args(&[]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("untunable, not matched (3 kernels, 3 occurrences):"),
        "{out}"
    );
    assert!(
        out.contains(
            "conv2d (conv2d+add+prelu): node `p_re_lu` (prelu): fused epilogue op `prelu`"
        ),
        "{out}"
    );
    let (code, out, err) = run(args(&["--explain", "conv2d"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ONNX nodes: conv2d, p_re_lu"), "{out}");
    assert!(
        out.contains("untunable: node `p_re_lu` (prelu): fused epilogue op `prelu`"),
        "{out}"
    );
    let (code, _, err) = run(args(&["--explain", "no_such_node"]));
    assert_eq!(code, 2);
    assert!(err.contains("no kernel named"), "{err}");
}
