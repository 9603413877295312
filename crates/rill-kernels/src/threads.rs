//! The worker pool used by every parallel kernel.
//!
//! A value, not a global: the caller builds one with the thread count the
//! user asked for and passes it down, so two models (or tests) in one process
//! never fight over a shared setting.

/// A pool of worker threads.
pub struct Threads {
    pool: rayon::ThreadPool,
}

impl Threads {
    /// A pool of `n` threads (`0` means one per available core).
    pub fn new(n: usize) -> Threads {
        let n = if n == 0 {
            std::thread::available_parallelism().map_or(1, |p| p.get())
        } else {
            n
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("rill-worker-{i}"))
            .build()
            .expect("failed to spawn worker threads");
        Threads { pool }
    }

    pub fn count(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// Run `f(start, end)` over disjoint ranges covering `0..n`, in parallel.
    /// Ranges are at least `min_chunk` long so tiny jobs stay on one thread.
    pub fn for_ranges<F>(&self, n: usize, min_chunk: usize, f: F)
    where
        F: Fn(usize, usize) + Sync,
    {
        if n == 0 {
            return;
        }
        let workers = self.count();
        // A few chunks per worker smooths out uneven row costs.
        let chunk = n.div_ceil(workers * 4).max(min_chunk.max(1));
        if chunk >= n || workers == 1 {
            f(0, n);
            return;
        }
        self.pool.scope(|s| {
            let f = &f;
            let mut start = 0;
            while start < n {
                let end = (start + chunk).min(n);
                s.spawn(move |_| f(start, end));
                start = end;
            }
        });
    }
}

/// A raw pointer that may be shared between threads that write disjoint
/// elements of the buffer it points into. Every write through it must be to
/// elements no other task touches.
#[derive(Clone, Copy)]
pub struct SharedMut<T>(*mut T);
unsafe impl<T: Send> Send for SharedMut<T> {}
unsafe impl<T: Send> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    pub fn new(buf: &mut [T]) -> SharedMut<T> {
        SharedMut(buf.as_mut_ptr())
    }

    /// The element pointer `i` places from the start.
    ///
    /// # Safety
    /// `i` must be inside the buffer this was made from, and that buffer must
    /// outlive every use of the pointer.
    pub unsafe fn at(self, i: usize) -> *mut T {
        self.0.add(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn ranges_cover_everything_once() {
        let t = Threads::new(3);
        for n in [1usize, 7, 100, 1001] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            t.for_ranges(n, 1, |a, b| {
                for h in &hits[a..b] {
                    h.fetch_add(1, Ordering::Relaxed);
                }
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }
}
