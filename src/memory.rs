//! How soon the binary's allocator (jemalloc, src/main.rs) gives freed memory back to the
//! system, and which arena threads allocate from, per command (issue 17's memory targets;
//! docs/performance.md). A one-shot `plan` touches as few new pages as it can, since each
//! costs a page fault (several microseconds on a VM): all of its threads, the runtime's and
//! the manifest readers', allocate from the first arena, which keeps freed pages for a while,
//! so what one stage frees the next reuses (the manifests' trees become the observation's
//! rows). Any other arena gives pages back at once. A daemon runs for months: pages
//! freed in a pass go back within a second, not jemalloc's default ten, and a thread of
//! jemalloc's own gives them back: an arena purges when it is used, and the arena of a thread
//! that stopped allocating (a blocking-pool thread after a large store read) kept its freed
//! pages until then. Everything else keeps the default, which spends the least CPU (an `apply`
//! wave allocates and frees all the time).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Whether every thread of the process allocates from the first arena (see
/// [`every_thread_allocates_from_the_first_arena`]).
static FIRST_ARENA_FOR_EVERY_THREAD: AtomicBool = AtomicBool::new(false);

/// Give freed memory back to the system after `delay` (zero: at once), unless the operator
/// configured the allocator through `_RJEM_MALLOC_CONF`. Best effort: a refusal changes
/// nothing but memory use.
pub fn return_freed_memory_after(delay: Duration) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if configured_by_operator() {
            return;
        }
        let ms = milliseconds(delay);
        // The arenas made from now on, then each one made already (an arena not in use
        // refuses; it takes the new default when it is made).
        write_control(c"arenas.dirty_decay_ms", ms);
        for arena in 0..read_control::<u32>(c"arenas.narenas").unwrap_or(0) {
            if let Ok(name) = std::ffi::CString::new(format!("arena.{arena}.dirty_decay_ms")) {
                write_control(&name, ms);
            }
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = delay;
}

/// The first arena keeps freed pages for `delay` (others as [`return_freed_memory_after`] set
/// them), unless the operator configured the allocator through `_RJEM_MALLOC_CONF`. Best
/// effort, as [`return_freed_memory_after`].
pub fn keep_freed_pages_in_the_first_arena(delay: Duration) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if !configured_by_operator() {
        write_control(c"arena.0.dirty_decay_ms", milliseconds(delay));
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = delay;
}

/// The calling thread allocates from the first arena from now on (see the module doc),
/// unless the operator configured the allocator. Best effort.
fn allocate_from_the_first_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if !configured_by_operator() {
        write_control(c"thread.arena", 0u32);
    }
}

/// The calling thread, and each thread that calls [`thread_started`] from now on, allocate from
/// the first arena: memory one stage of a command frees is reused by the next, whichever thread
/// runs it, instead of being given back and touched again (a fresh page costs a page fault).
pub fn every_thread_allocates_from_the_first_arena() {
    FIRST_ARENA_FOR_EVERY_THREAD.store(true, Ordering::Relaxed);
    allocate_from_the_first_arena();
}

/// A thread the process starts calls this first: it then allocates as the command chose (see
/// [`every_thread_allocates_from_the_first_arena`]).
pub fn thread_started() {
    if FIRST_ARENA_FOR_EVERY_THREAD.load(Ordering::Relaxed) {
        allocate_from_the_first_arena();
    }
}

/// Purge freed pages from jemalloc's background thread too (see the module doc), unless the
/// operator configured the allocator through `_RJEM_MALLOC_CONF`. Best effort, as
/// [`return_freed_memory_after`].
pub fn purge_in_the_background() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if !configured_by_operator() {
        write_control(c"background_thread", true);
    }
}

/// A delay as jemalloc's `*_decay_ms` controls take it (`ssize_t`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn milliseconds(delay: Duration) -> isize {
    isize::try_from(delay.as_millis()).unwrap_or(isize::MAX)
}

/// The operator tunes jemalloc through `_RJEM_MALLOC_CONF`: metalform leaves it as set.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn configured_by_operator() -> bool {
    std::env::var_os("_RJEM_MALLOC_CONF").is_some()
}

/// Set a jemalloc control of type `T` (its C type's size and layout: `ssize_t` as `isize`,
/// `bool` as `bool`). Best effort: a refusal is left alone.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn write_control<T: Copy>(name: &std::ffi::CStr, value: T) {
    let mut value = value;
    // SAFETY: the control takes a `T`, passed by pointer with its size; nothing is read.
    unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&raw mut value).cast(),
            std::mem::size_of::<T>(),
        );
    }
}

/// Read a jemalloc control of type `T` (its C type's size and layout); `None` when refused.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn read_control<T: Copy + Default>(name: &std::ffi::CStr) -> Option<T> {
    let mut value = T::default();
    let mut len = std::mem::size_of::<T>();
    // SAFETY: reads into a buffer of the control's size; nothing is written.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            (&raw mut value).cast(),
            &raw mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    (rc == 0 && len == std::mem::size_of::<T>()).then_some(value)
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// The tests write the same process-wide controls: one at a time.
    static CONTROLS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn decay_ms(name: &std::ffi::CStr) -> isize {
        read_control(name).unwrap_or_else(|| panic!("{name:?} cannot be read"))
    }

    #[test]
    fn the_delay_reaches_new_and_existing_arenas() {
        if configured_by_operator() {
            return;
        }
        let _one_at_a_time = CONTROLS.lock().unwrap_or_else(|e| e.into_inner());
        return_freed_memory_after(Duration::from_millis(250));
        assert_eq!(decay_ms(c"arenas.dirty_decay_ms"), 250);
        assert_eq!(decay_ms(c"arena.0.dirty_decay_ms"), 250);
        return_freed_memory_after(Duration::ZERO);
        assert_eq!(decay_ms(c"arenas.dirty_decay_ms"), 0);
        assert_eq!(decay_ms(c"arena.0.dirty_decay_ms"), 0);
    }

    #[test]
    fn a_thread_moved_to_the_first_arena_allocates_there_and_it_keeps_pages() {
        if configured_by_operator() {
            return;
        }
        let _one_at_a_time = CONTROLS.lock().unwrap_or_else(|e| e.into_inner());
        std::thread::spawn(|| {
            allocate_from_the_first_arena();
            assert_eq!(read_control::<u32>(c"thread.arena"), Some(0));
        })
        .join()
        .unwrap();
        keep_freed_pages_in_the_first_arena(Duration::from_millis(70));
        assert_eq!(decay_ms(c"arena.0.dirty_decay_ms"), 70);
        return_freed_memory_after(Duration::ZERO);
    }

    #[test]
    fn threads_join_the_first_arena_once_the_command_chose_it() {
        if configured_by_operator() {
            return;
        }
        let _one_at_a_time = CONTROLS.lock().unwrap_or_else(|e| e.into_inner());
        let arena_after_starting = || {
            std::thread::spawn(|| {
                let before = read_control::<u32>(c"thread.arena");
                thread_started();
                (before, read_control::<u32>(c"thread.arena"))
            })
            .join()
            .unwrap()
        };
        // Until a command chooses, a thread keeps the arena jemalloc gave it.
        let (before, after) = arena_after_starting();
        assert_eq!(after, before);
        every_thread_allocates_from_the_first_arena();
        assert_eq!(read_control::<u32>(c"thread.arena"), Some(0));
        assert_eq!(arena_after_starting().1, Some(0));
    }

    #[test]
    fn the_background_purge_is_switched_on() {
        if configured_by_operator() {
            return;
        }
        purge_in_the_background();
        assert_eq!(read_control::<bool>(c"background_thread"), Some(true));
    }
}
