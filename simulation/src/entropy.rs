//! The process's random bytes, drawn from the seed of the one run it makes.
//!
//! The runtime draws its tokens from `rand`'s thread generator, std seeds
//! its hash maps, and tokio its runtimes, all from the `getrandom` function
//! of the C library. This crate's programs define that function themselves
//! (the build script exports it, so that the `getrandom` crate and std,
//! which look it up at run time, find it): once [`seed_process`] has seeded
//! it, it answers bytes drawn from the seed, and before that it asks the
//! kernel, as the C library would. Tokio also counts its runtimes in a
//! process-wide counter, so a run replays exactly only as the first run of
//! its process: each seed runs in a process of its own.

use std::ffi::{c_uint, c_void};
use std::sync::Mutex;

static STATE: Mutex<Option<u64>> = Mutex::new(None);

/// Draws every random byte of this process from `seed` from now on.
pub fn seed_process(seed: u64) {
    *STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(seed ^ 0x5DEE_CE66_D1CE_4E5B);
}

/// splitmix64: small and good enough to stand in for the kernel's bytes.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// # Safety
///
/// `buf` must be valid for writes of `len` bytes, as for the C library's
/// `getrandom`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getrandom(buf: *mut c_void, len: usize, flags: c_uint) -> isize {
    let mut state = STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let Some(state) = state.as_mut() else {
        // SAFETY: the caller's promise, passed on to the kernel.
        return unsafe { libc::syscall(libc::SYS_getrandom, buf, len, flags) as isize };
    };
    // SAFETY: the caller promises `len` writable bytes at `buf`.
    let bytes = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
    for chunk in bytes.chunks_mut(8) {
        let word = next(state).to_ne_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    len as isize
}
