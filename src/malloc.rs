//! glibc's allocator, set for a long-running server with a few threads.
//!
//! With glibc's defaults bmo's resident memory at 1000 hosts was 20 MiB above the
//! heap it had in use and the 16 MiB of its code and libraries (heaptrack: 28 MiB in
//! use, 64 MiB resident). Two defaults cause it: every thread that meets a locked arena gets an arena of
//! its own (up to eight per core), each keeping the memory freed in it; and the first
//! large buffer freed raises the threshold above which buffers get their own mapping,
//! so later large ones (pages of Ironic's node list, watch pages, the FirmwareSchema a
//! thousand hosts share) are carved from the arenas and leave holes there when freed.
//! Here the arenas are capped and the threshold fixed, so a large buffer's memory goes
//! back to the kernel when it is freed.
//!
//! `MALLOC_ARENA_MAX`, `MALLOC_MMAP_THRESHOLD_` or `GLIBC_TUNABLES` in the environment
//! still win: glibc reads them when the process starts, and [`tune`] leaves a setting
//! alone when it is named there.

/// Arenas at most: one. tokio runs one worker per core plus blocking threads, and
/// bmo spends its time waiting on the network (30 CPU seconds in the 800 s of the
/// N = 1000 run), so the lock of the one arena is rarely contended; with two, each
/// kept its own free memory (17 and 16 MiB at N = 1000).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const ARENA_MAX: libc::c_int = 1;

/// Buffers from this size get a mapping of their own (glibc's initial default, kept
/// fixed instead of rising).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 128 * 1024;

/// Applies the settings above; call first thing in `main`, before any thread starts.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let set_by_user = |name: &str| std::env::var_os(name).is_some();
        if set_by_user("GLIBC_TUNABLES") {
            return;
        }
        // SAFETY: mallopt only changes allocator parameters; it is called before the
        // runtime starts any thread.
        unsafe {
            if !set_by_user("MALLOC_ARENA_MAX") {
                libc::mallopt(libc::M_ARENA_MAX, ARENA_MAX);
            }
            if !set_by_user("MALLOC_MMAP_THRESHOLD_") {
                libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            }
        }
    }
}
