/// jemalloc for Rust and, through its unprefixed `malloc`, for LLVM too: kernel builds are
/// allocation-heavy (see Cargo.toml).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's run-time options, read at its first allocation: its memory is backed by
/// transparent huge pages where the kernel allows them (`madvise` mode, Debian's default). A
/// model's weights are streamed from memory once per run, tens of MB of them: in 4 KiB pages
/// every page is a TLB miss. ResNet-50 ran 3.2% faster, distilbert_like 2.6% (medians of six
/// runs each, side by side). The symbol is jemalloc's `malloc_conf` (unprefixed build).
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[export_name = "malloc_conf"]
pub static MALLOC_CONF: &[u8; 11] = b"thp:always\0";

fn main() {
    std::process::exit(ttdb::cli::main());
}
