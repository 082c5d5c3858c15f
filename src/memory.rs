//! How soon the binary's allocator (jemalloc, src/main.rs) gives freed memory back to the
//! system, per command (issue 17's memory targets; docs/performance.md). A one-shot `plan`
//! peaks while it decodes every site's machine list at once: pages freed by one site are
//! given back at once, so the next does not add to the peak. A daemon runs for months: pages
//! freed in a pass go back within a second, not jemalloc's default ten. Everything else keeps
//! the default, which spends the least CPU (an `apply` wave allocates and frees all the time).

use std::time::Duration;

/// Give freed memory back to the system after `delay` (zero: at once), unless the operator
/// configured the allocator through `_RJEM_MALLOC_CONF`. Best effort: a refusal changes
/// nothing but memory use.
pub fn return_freed_memory_after(delay: Duration) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var_os("_RJEM_MALLOC_CONF").is_some() {
            return;
        }
        let ms = isize::try_from(delay.as_millis()).unwrap_or(isize::MAX);
        let set = |name: &std::ffi::CStr| {
            let mut value = ms;
            // SAFETY: a documented jemalloc control taking an ssize_t; no old value is read.
            unsafe {
                tikv_jemalloc_sys::mallctl(
                    name.as_ptr(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    (&raw mut value).cast(),
                    std::mem::size_of::<isize>(),
                )
            }
        };
        // The arenas made from now on, then each one made already (an arena not in use
        // refuses; it takes the new default when it is made).
        set(c"arenas.dirty_decay_ms");
        let mut arenas: u32 = 0;
        let mut len = std::mem::size_of::<u32>();
        // SAFETY: reads an unsigned control into a buffer of its size.
        let read = unsafe {
            tikv_jemalloc_sys::mallctl(
                c"arenas.narenas".as_ptr(),
                (&raw mut arenas).cast(),
                &raw mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        if read == 0 {
            for arena in 0..arenas {
                if let Ok(name) = std::ffi::CString::new(format!("arena.{arena}.dirty_decay_ms")) {
                    set(&name);
                }
            }
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = delay;
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    fn decay_ms(name: &std::ffi::CStr) -> isize {
        let mut value: isize = -2;
        let mut len = std::mem::size_of::<isize>();
        // SAFETY: reads an ssize_t control into a buffer of its size.
        let rc = unsafe {
            tikv_jemalloc_sys::mallctl(
                name.as_ptr(),
                (&raw mut value).cast(),
                &raw mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        assert_eq!(rc, 0, "{name:?}");
        value
    }

    #[test]
    fn the_delay_reaches_new_and_existing_arenas() {
        if std::env::var_os("_RJEM_MALLOC_CONF").is_some() {
            return;
        }
        return_freed_memory_after(Duration::from_millis(250));
        assert_eq!(decay_ms(c"arenas.dirty_decay_ms"), 250);
        assert_eq!(decay_ms(c"arena.0.dirty_decay_ms"), 250);
        return_freed_memory_after(Duration::ZERO);
        assert_eq!(decay_ms(c"arenas.dirty_decay_ms"), 0);
        assert_eq!(decay_ms(c"arena.0.dirty_decay_ms"), 0);
    }
}
