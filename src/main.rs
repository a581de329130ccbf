fn main() {
    std::process::exit(ttdb::cli::main());
}
