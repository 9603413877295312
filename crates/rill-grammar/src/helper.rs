//! The thread that computes constraints' next masks ahead of time.
//!
//! A sequence commits its sampled token right after a forward pass, and
//! needs the next mask only when the following pass's logits are back: the
//! mask of the new state is computed here in between, while the engine
//! runs that pass, so it is off the step's critical path. A sequence that
//! wants its mask before the helper got to it computes it itself (the
//! helper then skips the job).

use crate::constraint::{lock, Shared};
use std::sync::{mpsc, Mutex, Weak};

/// A constraint, and the grammar state whose mask it will want next.
pub(crate) type Job = (Weak<Mutex<Shared>>, u64);

/// The helper thread's queue (one thread per vocabulary; it ends when the
/// [`crate::Grammars`] and every constraint compiled from it are gone).
#[derive(Clone)]
pub(crate) struct Helper {
    /// None when the thread could not start: masks are then computed when
    /// they are needed.
    jobs: Option<mpsc::Sender<Job>>,
}

impl Helper {
    pub fn start() -> Helper {
        let (tx, rx) = mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name("rill-grammar-masks".into())
            .spawn(move || {
                for (shared, state) in rx {
                    // A constraint dropped meanwhile needs nothing.
                    if let Some(shared) = shared.upgrade() {
                        lock(&shared).prefetch(state);
                    }
                }
            });
        Helper {
            jobs: spawned.ok().map(|_| tx),
        }
    }

    /// No thread: masks are computed when they are needed.
    pub fn none() -> Helper {
        Helper { jobs: None }
    }

    pub fn ask(&self, job: Job) {
        if let Some(tx) = &self.jobs {
            let _ = tx.send(job);
        }
    }
}
