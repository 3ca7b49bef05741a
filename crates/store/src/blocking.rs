//! Announcing a wait for a device. A store calls [`may_block`] just before
//! its thread may sleep on storage (a sync, a read of data not in memory, a
//! wait for a shared journal force); the server's worker threads install a
//! [`Hook`] that hands the calls queued behind the current one to other
//! workers, so that a batch of calls taken together never waits behind
//! one call's disk.
//!
//! Threads without a hook (destagers, tests, tools) pay a thread-local
//! read.

use std::cell::Cell;

/// What a thread does when it is about to wait for storage.
pub type Hook = fn();

thread_local! {
    static HOOK: Cell<Option<Hook>> = const { Cell::new(None) };
}

/// Installs (or, with `None`, removes) this thread's hook.
pub fn set_hook(hook: Option<Hook>) {
    HOOK.with(|h| h.set(hook));
}

/// This thread may now sleep on storage.
pub fn may_block() {
    if let Some(hook) = HOOK.with(Cell::get) {
        hook();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static CALLED: AtomicUsize = AtomicUsize::new(0);

    fn count() {
        CALLED.fetch_add(1, Ordering::SeqCst);
    }

    #[test]
    fn only_a_thread_with_a_hook_announces() {
        std::thread::spawn(|| {
            may_block();
            set_hook(Some(count));
            may_block();
            may_block();
            // Another thread's calls do not reach this thread's hook.
            std::thread::spawn(may_block).join().unwrap();
            set_hook(None);
            may_block();
        })
        .join()
        .unwrap();
        assert_eq!(CALLED.load(Ordering::SeqCst), 2);
    }
}
