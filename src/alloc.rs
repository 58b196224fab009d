//! The process's allocator: mimalloc, told to keep the memory it frees.
//!
//! mimalloc instead of the system allocator: the engine allocates a tensor
//! on one device's thread and frees it on another's; glibc's per-thread
//! arenas then hand out fresh, page-faulting memory step after step, which
//! made multi-device steps slower and their kernel times unpredictable.
//!
//! mimalloc in turn gives freed pages back to the OS after a short delay
//! ("purging"), and a training step is longer than that delay: every step
//! then faulted its large tensors in again, page by page, zeroed by the
//! kernel (65,000 to 99,000 minor faults in a 30-step profile of the
//! Transformer, against 384 with purging off; the step 13-21% slower).
//! TensorFlow's BFC allocator likewise keeps what it has taken, so the
//! process keeps its peak footprint, as a TensorFlow process does.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` of the mimalloc bundled by `libmimalloc-sys`
/// 0.1.49 (v3, `include/mimalloc.h`: the 16th entry of `mi_option_e`). The
/// Rust crate exports this enum only with its `extended` feature, whose
/// dependency is not vendored here; the test below checks that the number is
/// that option's.
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

unsafe extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// Turns purging off (-1: "no purging at all", as `MIMALLOC_PURGE_DELAY=-1`).
pub(crate) fn keep_freed_pages() {
    // SAFETY: sets one integer option of the linked mimalloc; any value is
    // valid for it and the call is thread-safe.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, -1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" {
        fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
    }

    /// The option number is the purge delay's: before the call it holds the
    /// purge delay's documented default of the bundled mimalloc v3 (1,000
    /// ms, `src/options.c`; no neighbouring option has that default), after
    /// it -1. The effect itself is measured, not asserted: `perf stat -e
    /// page-faults flowlab profile --model transformer ...` (module comment).
    #[test]
    fn purging_is_turned_off_through_the_purge_delay_option() {
        // SAFETY: reads one integer option of the linked mimalloc.
        let get = || unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(get(), 1000);
        }
        keep_freed_pages();
        assert_eq!(get(), -1);
    }
}
