fn main() {
    std::process::exit(noisylab::cli::main());
}
