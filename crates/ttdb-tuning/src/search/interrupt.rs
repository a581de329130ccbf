//! Ctrl-C during a search: the first SIGINT asks long work to stop at its next check and
//! keep (store) what it measured; a second one exits at once.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Installs the handler (once per process; later calls do nothing).
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let installed = ctrlc::set_handler(|| {
            if REQUESTED.swap(true, Ordering::SeqCst) {
                eprintln!("\nttdb: interrupted again, exiting now");
                std::process::exit(130);
            }
            eprintln!("\nttdb: interrupted: finishing the current run and storing what was measured (Ctrl-C again to quit now)");
        });
        if let Err(e) = installed {
            eprintln!("ttdb: cannot handle Ctrl-C ({e}); an interrupt will lose the current batch");
        }
    });
}

/// Has an interrupt been asked for?
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}

/// Asks long work to stop as Ctrl-C does (a run whose queue failed stops this way, keeping
/// what it measured).
pub fn request() {
    REQUESTED.store(true, Ordering::SeqCst);
}
