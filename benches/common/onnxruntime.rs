//! Runs a Python script of `benches/` that times onnxruntime (`pip install onnx onnxruntime`,
//! benchmarks only) and returns the first number it prints: its median milliseconds.
//! None when Python, the packages or the script fail.
use std::path::Path;

pub fn script_ms(script: &str, args: &[&str]) -> Option<f64> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("benches")
        .join(script);
    let out = std::process::Command::new("python3")
        .arg(path)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
