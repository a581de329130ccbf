/// jemalloc for Rust and, through its unprefixed `malloc`, for LLVM too: kernel builds are
/// allocation-heavy (see Cargo.toml).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    std::process::exit(ttdb::cli::main());
}
