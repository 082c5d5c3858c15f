//! metalform binary: parse the command line, run, map the error class to an exit code (DESIGN.md §3).

/// jemalloc for Rust's allocations: with glibc's malloc, allocating and freeing (and waiting
/// on its arena locks) took a fifth of an onboarding wave's CPU. How soon it returns freed
/// memory is set per command (`metalform::memory`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
fn main() -> std::process::ExitCode {
    limit_malloc_arenas();
    metalform::cli::main()
}

/// glibc's malloc still serves the C code (SQLite, ring's and libc's own allocations). It
/// gives each thread that allocates under contention its own heap arena, up to 8 per core, and
/// keeps freed memory in each (measured when it served everything: 10,000 converged nodes,
/// daemon RSS 175 → 137 MiB with 2 arenas; docs/performance.md). Two arenas, unless the
/// operator set `MALLOC_ARENA_MAX` themselves.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; called before any other thread.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
    }
}
