//! The worker pool used by every parallel kernel.
//!
//! A value, not a global: the caller builds one with the thread count the
//! user asked for and passes it down, so two models (or tests) in one process
//! never fight over a shared setting.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};

use crate::matmul::Staging;
use std::thread::JoinHandle;

/// How long a worker polls for the next region before it sleeps. Regions
/// within a token come microseconds apart; between requests the pool sleeps.
/// Polling yields the CPU, so a busy machine (or several pools) is not starved.
const POLL_BEFORE_SLEEP: std::time::Duration = std::time::Duration::from_micros(300);

/// A pool of `n − 1` worker threads plus the calling thread, built for many
/// small parallel regions per token: workers spin briefly between regions
/// instead of sleeping, and a region costs about a microsecond to start
/// (see `examples/pool_overhead.rs`).
pub struct Threads {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    n: usize,
    /// One region at a time; a second caller (or a nested call) runs serially.
    busy: Mutex<()>,
    /// The buffers of the matrix products run on this pool, kept between
    /// them (see `matmul_many_on`): the pool's owner owns them, no thread
    /// keeps hidden scratch.
    staging: Mutex<Staging>,
}

/// The region being run: its closure (type-erased) and chunk bookkeeping.
/// Lives on the caller's stack for the duration of `for_ranges`.
struct Job {
    /// `(closure, slot, start, end)`
    call: unsafe fn(*const (), usize, usize, usize),
    data: *const (),
    n: usize,
    chunk: usize,
    next: AtomicUsize,
}

struct Shared {
    /// Bumped once per region; a worker that sees a new value runs it.
    epoch: AtomicUsize,
    job: AtomicPtr<Job>,
    /// Per worker: the last epoch it finished. The caller waits for all of
    /// them, so no worker touches a job after `for_ranges` returns.
    done: Vec<AtomicUsize>,
    shutdown: AtomicBool,
    sleepers: Mutex<usize>,
    wake: Condvar,
}

// Whether this thread is running a task of a region (of any pool): a
// region started inside one runs serially on it. Identity, not scratch.
thread_local! {
    static IN_REGION: Cell<bool> = const { Cell::new(false) };
}

impl Job {
    /// Claim and run chunks until none are left, as pool thread `slot`.
    fn run(&self, slot: usize) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let start = i * self.chunk;
            if start >= self.n {
                return;
            }
            let end = (start + self.chunk).min(self.n);
            // SAFETY: `data` points at the closure `call` was made for, alive
            // until every worker has acknowledged this job.
            unsafe { (self.call)(self.data, slot, start, end) };
        }
    }
}

unsafe fn call_closure<F: Fn(usize, usize, usize) + Sync>(
    data: *const (),
    slot: usize,
    a: usize,
    b: usize,
) {
    // SAFETY: `data` was made from `&F` in `for_ranges_on`.
    let f = unsafe { &*(data as *const F) };
    f(slot, a, b)
}

fn worker(shared: Arc<Shared>, me: usize) {
    let mut seen = 0;
    loop {
        let mut spins = 0u32;
        let mut since: Option<std::time::Instant> = None;
        let epoch = loop {
            let e = shared.epoch.load(Ordering::Acquire);
            if e != seen || shared.shutdown.load(Ordering::Acquire) {
                break e;
            }
            spins += 1;
            if spins < 256 {
                std::hint::spin_loop();
                continue;
            }
            let t0 = *since.get_or_insert_with(std::time::Instant::now);
            if t0.elapsed() < POLL_BEFORE_SLEEP {
                std::thread::yield_now();
                continue;
            }
            let mut sleepers = shared.sleepers.lock().unwrap_or_else(|p| p.into_inner());
            *sleepers += 1;
            while shared.epoch.load(Ordering::Acquire) == seen
                && !shared.shutdown.load(Ordering::Acquire)
            {
                sleepers = shared
                    .wake
                    .wait(sleepers)
                    .unwrap_or_else(|p| p.into_inner());
            }
            *sleepers -= 1;
            spins = 0;
            since = None;
        };
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: the caller published the job before bumping the epoch and
        // keeps it alive until this worker stores `done = epoch`.
        let job = unsafe { &*shared.job.load(Ordering::Acquire) };
        IN_REGION.with(|r| r.set(true));
        job.run(me + 1);
        IN_REGION.with(|r| r.set(false));
        shared.done[me].store(epoch, Ordering::Release);
        seen = epoch;
    }
}

impl Threads {
    /// A pool of `n` threads including the caller (`0` means one per core).
    pub fn new(n: usize) -> Threads {
        let n = if n == 0 {
            std::thread::available_parallelism().map_or(1, |p| p.get())
        } else {
            n
        };
        let shared = Arc::new(Shared {
            epoch: AtomicUsize::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            done: (1..n).map(|_| AtomicUsize::new(0)).collect(),
            shutdown: AtomicBool::new(false),
            sleepers: Mutex::new(0),
            wake: Condvar::new(),
        });
        let workers = (1..n)
            .map(|i| {
                let s = shared.clone();
                std::thread::Builder::new()
                    .name(format!("rill-worker-{i}"))
                    .spawn(move || worker(s, i - 1))
                    .expect("failed to spawn a worker thread")
            })
            .collect();
        Threads {
            shared,
            workers,
            n,
            busy: Mutex::new(()),
            staging: Mutex::new(Staging::default()),
        }
    }

    /// The products' staging, unless a product holds it already (one
    /// started inside a task of another, or on a second thread).
    pub(crate) fn staging(&self) -> Option<MutexGuard<'_, Staging>> {
        match self.staging.try_lock() {
            Ok(s) => Some(s),
            // A product panicked holding it: the buffers are still good.
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    pub fn count(&self) -> usize {
        self.n
    }

    /// Run `f(start, end)` over disjoint ranges covering `0..n`, in parallel.
    /// Ranges are at least `min_chunk` long so tiny jobs stay on one thread.
    pub fn for_ranges<F>(&self, n: usize, min_chunk: usize, f: F)
    where
        F: Fn(usize, usize) + Sync,
    {
        self.for_ranges_on(n, min_chunk, |_, a, b| f(a, b));
    }

    /// [`for_ranges`](Self::for_ranges) that also tells `f` which of the
    /// pool's threads runs the range: `f(slot, start, end)`, `slot <
    /// count()`, and two ranges of one call with the same slot never run at
    /// the same time. The caller can so give each thread its own part of one
    /// scratch buffer that it owns and sizes itself; a buffer per worker
    /// thread would instead grow (allocate) whenever a worker first happens
    /// to pick up a bigger task, which depends on timing.
    pub fn for_ranges_on<F>(&self, n: usize, min_chunk: usize, f: F)
    where
        F: Fn(usize, usize, usize) + Sync,
    {
        if n == 0 {
            return;
        }
        // A few chunks per worker smooths out uneven row costs.
        let chunk = n.div_ceil(self.n * 4).max(min_chunk.max(1));
        let nested = IN_REGION.with(|r| r.get());
        if chunk >= n || self.n == 1 || nested {
            f(0, 0, n);
            return;
        }
        let Ok(_guard) = self.busy.try_lock() else {
            f(0, 0, n);
            return;
        };
        let job = Job {
            call: call_closure::<F>,
            data: &f as *const F as *const (),
            n,
            chunk,
            next: AtomicUsize::new(0),
        };
        let sh = &*self.shared;
        sh.job
            .store(&job as *const Job as *mut Job, Ordering::Release);
        let epoch = sh.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        if *sh.sleepers.lock().unwrap_or_else(|p| p.into_inner()) > 0 {
            sh.wake.notify_all();
        }
        IN_REGION.with(|r| r.set(true));
        job.run(0);
        IN_REGION.with(|r| r.set(false));
        for d in &sh.done {
            let mut spins = 0u32;
            while d.load(Ordering::Acquire) != epoch {
                spins += 1;
                if spins < 256 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        {
            let _g = self
                .shared
                .sleepers
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// A raw pointer that may be shared between threads that write disjoint
/// elements of the buffer it points into. Every write through it must be to
/// elements no other task touches.
pub struct SharedMut<T>(*mut T);
// By hand: the derives would ask `T: Copy`, and only the pointer is copied.
impl<T> Clone for SharedMut<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SharedMut<T> {}
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

    #[test]
    fn nested_and_concurrent_regions_do_not_deadlock() {
        let t = Arc::new(Threads::new(3));
        let total = AtomicUsize::new(0);
        t.for_ranges(8, 1, |a, b| {
            // A region inside a region runs serially on this thread.
            t.for_ranges(10, 1, |c, d| {
                total.fetch_add((b - a) * (d - c), Ordering::Relaxed);
            });
        });
        assert_eq!(total.load(Ordering::Relaxed), 80);
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let t = t.clone();
                std::thread::spawn(move || {
                    let sum = AtomicUsize::new(0);
                    for _ in 0..200 {
                        t.for_ranges(100, 1, |a, b| {
                            sum.fetch_add(b - a, Ordering::Relaxed);
                        });
                    }
                    sum.load(Ordering::Relaxed)
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), 20_000);
        }
    }

    #[test]
    fn a_slot_runs_one_range_at_a_time() {
        let t = Threads::new(3);
        let busy: Vec<AtomicBool> = (0..3).map(|_| AtomicBool::new(false)).collect();
        let covered = AtomicUsize::new(0);
        for _ in 0..50 {
            t.for_ranges_on(300, 1, |slot, a, b| {
                assert!(slot < t.count());
                assert!(
                    !busy[slot].swap(true, Ordering::AcqRel),
                    "slot {slot} shared"
                );
                covered.fetch_add(b - a, Ordering::Relaxed);
                std::hint::black_box((a..b).sum::<usize>());
                busy[slot].store(false, Ordering::Release);
            });
        }
        assert_eq!(covered.load(Ordering::Relaxed), 50 * 300);
    }

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
