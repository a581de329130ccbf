//! `ttdb build`: ResNet-18 with stored schedules compiled into DIR/libmodel.so, run by the C
//! example in a clean environment, must give exactly `ttdb run`'s bytes; the library
//! refuses to open on a host without the ISA it was compiled for; its thread pool gives the
//! same bytes however its workers are found (spinning, parked, on two handles at once).
use crate::common;

use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn ttdb(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .args(args)
        .output()
        .unwrap()
}

fn ok(o: &std::process::Output) -> String {
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A command with nothing of ttdb's, LLVM's or Rust's environment: PATH only, and
/// LD_LIBRARY_PATH holding only `lib_dir`.
fn clean(program: &Path, lib_dir: &Path, cwd: &Path) -> Command {
    let mut c = Command::new(program);
    c.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LD_LIBRARY_PATH", lib_dir)
        .current_dir(cwd);
    c
}

#[test]
fn a_built_resnet18_runs_without_ttdb_and_matches_ttdb_run_bytewise() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let db = db.to_str().unwrap();
    let log = common::corpus_dir().join("ansor/tvm_ansor_bench_nchwc/resnet_18.best.json");
    ok(&ttdb(&[
        "--db",
        db,
        "import",
        log.to_str().unwrap(),
        "--json",
    ]));
    let model = common::corpus_dir().join("onnx/torchvision_graph_only/resnet18.onnx");
    let model = model.to_str().unwrap();
    let out = dir.path().join("lib");
    let report: Value = serde_json::from_str(&ok(&ttdb(&[
        "--db",
        db,
        "build",
        model,
        "-o",
        out.to_str().unwrap(),
        "--json",
    ])))
    .unwrap();
    assert_eq!(report["built"]["kernels"], 43, "{report}");
    assert!(
        report["stored_schedules"].as_u64().unwrap() >= 12,
        "{report}"
    );
    let lib = out.join("libmodel.so");
    assert!(lib.exists() && out.join("ttdb_model.h").exists());
    // only the library and its header: the build's scratch folder is gone
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["libmodel.so", "ttdb_model.h"]);

    // no LLVM, no Rust runtime: the library needs libc (and libm) only
    let ldd = String::from_utf8_lossy(&Command::new("ldd").arg(&lib).output().unwrap().stdout)
        .into_owned();
    assert!(!ldd.to_lowercase().contains("llvm"), "{ldd}");
    for line in ldd.lines() {
        let l = line.trim();
        assert!(
            ["linux-vdso", "libc.so", "libm.so", "ld-linux", "libpthread"]
                .iter()
                .any(|ok| l.starts_with(ok) || l.contains(&format!("/{ok}"))),
            "unexpected dependency: {l}\n{ldd}"
        );
    }

    // the C example, compiled against the library, in a folder away from the source tree
    let run_dir = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/run_model.c");
    let exe = run_dir.path().join("run_model");
    let cc = Command::new("cc")
        .arg(&example)
        .arg("-I")
        .arg(&out)
        .arg("-L")
        .arg(&out)
        .args(["-lmodel", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    ok(&cc);

    // one input, as .npy for ttdb run and raw for the example
    let x: Vec<f32> = ttdb::onnx::fill::input_floats("a built model's input", 3 * 224 * 224);
    let npy = ttdb::npy::Array::from_f32(vec![1, 3, 224, 224], &x).unwrap();
    let input_npy = dir.path().join("x.npy");
    std::fs::write(&input_npy, ttdb::npy::write(&npy)).unwrap();
    std::fs::write(run_dir.path().join("x.bin"), &npy.data).unwrap();
    let run_out = dir.path().join("run");
    ok(&ttdb(&[
        "--db",
        db,
        "run",
        model,
        "--input",
        &format!("input={}", input_npy.display()),
        "-o",
        run_out.to_str().unwrap(),
    ]));
    let want = ttdb::npy::read(&std::fs::read(run_out.join("output.npy")).unwrap()).unwrap();

    let o = clean(&exe, &out, run_dir.path())
        .arg("x.bin")
        .output()
        .unwrap();
    let printed = ok(&o);
    assert!(printed.starts_with("output [1, 1000]:"), "{printed}");
    let got = std::fs::read(run_dir.path().join("output0.bin")).unwrap();
    assert_eq!(got.len(), want.data.len());
    assert!(
        got == want.data,
        "libmodel.so's output differs from ttdb run's"
    );

    // the example refuses a short input file instead of reading past it
    std::fs::write(run_dir.path().join("short.bin"), [0u8; 12]).unwrap();
    let o = clean(&exe, &out, run_dir.path())
        .arg("short.bin")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("expected exactly 602112 bytes"));

    // two handles at once share one copy of the weights (45 MB: in huge pages), and give the
    // bytes of a one-thread handle
    stress(&out, 8);
}

/// A small C program that opens the library as a host with only `host_isa` would.
const OPEN_AS: &str = r#"
#include "ttdb_model.h"
#include <stdio.h>
int main(int argc, char **argv) {
    char error[512] = "";
    ttdb_model *m = ttdb_model_open(1, argc > 1 ? argv[1] : NULL, error, sizeof error);
    if (!m) { printf("refused: %s\n", error); return 3; }
    printf("opened: %s\n", ttdb_model_isa());
    ttdb_model_close(m);
    return 0;
}
"#;

#[test]
fn a_library_refuses_to_open_on_a_host_without_its_isa() {
    // any model carries the ISA record; alexnet builds in seconds
    let dir = tempfile::tempdir().unwrap();
    let model = common::corpus_dir().join("onnx/torchvision_graph_only/alexnet.onnx");
    let out = dir.path().join("lib");
    let report: Value = serde_json::from_str(&ok(&ttdb(&[
        "build",
        model.to_str().unwrap(),
        "--naive",
        "-o",
        out.to_str().unwrap(),
        "--json",
    ])))
    .unwrap();
    let required: Vec<String> = report["built"]["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    // every x86-64 host ttdb targets has at least SSE2; the widest vector ISA is what a
    // lesser host lacks
    let widest = ["avx512f", "avx2", "avx", "sse4.2"]
        .into_iter()
        .find(|f| required.iter().any(|r| r == f))
        .unwrap_or_else(|| panic!("no vector ISA among {required:?}"));
    let src = dir.path().join("open_as.c");
    std::fs::write(&src, OPEN_AS).unwrap();
    let exe = dir.path().join("open_as");
    ok(&Command::new("cc")
        .arg(&src)
        .arg("-I")
        .arg(&out)
        .arg("-L")
        .arg(&out)
        .args(["-lmodel", "-o"])
        .arg(&exe)
        .output()
        .unwrap());
    // this CPU: opens
    let o = clean(&exe, &out, dir.path()).output().unwrap();
    assert!(ok(&o).starts_with("opened: "));
    // a host fingerprint with everything but the widest vector ISA: refused, naming it
    let lesser: Vec<&str> = required
        .iter()
        .map(String::as_str)
        .filter(|f| *f != widest && !f.starts_with("avx512"))
        .collect();
    let o = clean(&exe, &out, dir.path())
        .arg(lesser.join(","))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{said}");
    // every AVX-512 extension is gone too: the first one checked is named
    let missing = if widest.starts_with("avx512") {
        "avx512"
    } else {
        widest
    };
    assert!(
        said.contains(&format!("refused: the host lacks `{missing}"))
            && said.contains("which this library was compiled for"),
        "{said}"
    );
    // the full fingerprint opens
    let o = clean(&exe, &out, dir.path())
        .arg(required.join(","))
        .output()
        .unwrap();
    assert!(ok(&o).starts_with("opened: "));
}

/// Runs a built model on two handles at once, from two threads, with naps between some runs
/// (the workers park) and none between others (they are still spinning), and checks every
/// output against a one-thread run; then opens and closes handles, idle and right after a
/// run (workers spinning or parked when told to stop; the last handle frees the shared
/// weights, the next one copies them again).
const POOL_STRESS: &str = r#"
#include "ttdb_model.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifndef RUNS
#define RUNS 60
#endif
struct ctx { ttdb_model *m; void **in; void **out; unsigned char *want; size_t bytes; int bad; };
static void nap(long us) { struct timespec t = {0, us * 1000}; nanosleep(&t, NULL); }
static void *runs(void *p) {
    struct ctx *c = p;
    char error[256];
    for (int r = 0; r < RUNS && !c->bad; r++) {
        if (r % 5 == 4) nap(4000); /* longer than the workers spin */
        memset(c->out[0], 0xff, c->bytes);
        if (ttdb_model_run(c->m, (const void *const *)c->in, c->out, error, sizeof error)) {
            fprintf(stderr, "run %d: %s\n", r, error);
            c->bad = 1;
        } else if (memcmp(c->out[0], c->want, c->bytes)) {
            fprintf(stderr, "run %d: output differs from the one-thread run\n", r);
            c->bad = 2;
        }
    }
    return NULL;
}
static ttdb_model *open_or_die(int threads) {
    char error[256];
    ttdb_model *m = ttdb_model_open(threads, NULL, error, sizeof error);
    if (!m) { fprintf(stderr, "open: %s\n", error); exit(3); }
    return m;
}
static void **buffers(ttdb_model *m, int n, size_t (*bytes)(const ttdb_model *, int)) {
    void **b = calloc((size_t)n, sizeof(void *));
    for (int i = 0; i < n; i++) {
        size_t len = bytes(m, i);
        b[i] = malloc(len ? len : 1);
        memset(b[i], 0, len ? len : 1);
    }
    return b;
}
int main(void) {
    char error[256];
    ttdb_model *one = open_or_die(1);
    int ni = ttdb_model_num_inputs(one), no = ttdb_model_num_outputs(one);
    if (ttdb_model_input_dtype(one, 0) != TTDB_FLOAT32) { fprintf(stderr, "float input expected\n"); return 4; }
    void **in = buffers(one, ni, ttdb_model_input_bytes);
    float *x = in[0];
    for (size_t k = 0; k < ttdb_model_input_bytes(one, 0) / 4; k++) x[k] = (float)(k % 13) * 0.125f - 0.75f;
    void **want = buffers(one, no, ttdb_model_output_bytes);
    if (ttdb_model_run(one, (const void *const *)in, want, error, sizeof error)) { fprintf(stderr, "%s\n", error); return 5; }
    struct ctx c[2];
    pthread_t t[2];
    for (int h = 0; h < 2; h++) {
        c[h] = (struct ctx){open_or_die(3), in, buffers(one, no, ttdb_model_output_bytes), want[0],
                            ttdb_model_output_bytes(one, 0), 0};
        pthread_create(&t[h], NULL, runs, &c[h]);
    }
    for (int h = 0; h < 2; h++) {
        pthread_join(t[h], NULL);
        ttdb_model_close(c[h].m);
        if (c[h].bad) return 10 + c[h].bad;
    }
    ttdb_model_close(one); /* the last user of the shared weights: they are freed */
    for (int k = 0; k < 20; k++) {
        ttdb_model *m = open_or_die(2 + k % 3);
        if (k % 2 && ttdb_model_run(m, (const void *const *)in, c[0].out, error, sizeof error)) {
            fprintf(stderr, "%s\n", error);
            return 6;
        }
        if (k % 4 == 1) nap(4000);
        ttdb_model_close(m);
    }
    printf("ok %d runs\n", 2 * RUNS);
    return 0;
}
"#;

#[test]
fn a_built_model_gives_the_same_bytes_on_two_handles_with_workers_spinning_and_parked() {
    let dir = tempfile::tempdir().unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/models/tiny_mobilenet.onnx");
    let out = dir.path().join("lib");
    // no database (the default place, empty): default schedules, with parallel loops
    let built = Command::new(env!("CARGO_BIN_EXE_ttdb"))
        .env_remove("TTDB_DB")
        .env("XDG_DATA_HOME", dir.path())
        .args([
            "build",
            model.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--json",
        ])
        .output()
        .unwrap();
    let report: Value = serde_json::from_str(&ok(&built)).unwrap();
    assert!(report["built"]["kernels"].as_u64().unwrap() > 1, "{report}");
    stress(&out, 60);
}

/// Compiles POOL_STRESS against the library in `lib` and runs it, `runs` runs a handle.
fn stress(lib: &Path, runs: usize) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("pool_stress.c");
    std::fs::write(&src, POOL_STRESS).unwrap();
    let exe = dir.path().join("pool_stress");
    ok(&Command::new("cc")
        .arg(format!("-DRUNS={runs}"))
        .arg(&src)
        .arg("-I")
        .arg(lib)
        .arg("-L")
        .arg(lib)
        .args(["-lmodel", "-lpthread", "-o"])
        .arg(&exe)
        .output()
        .unwrap());
    let o = clean(&exe, lib, dir.path()).output().unwrap();
    assert_eq!(ok(&o).trim(), format!("ok {} runs", 2 * runs));
}
