//! The run state of forward passes: the worker threads, the numerics, and
//! a workspace of reusable buffers, so that a decode step allocates nothing.
//!
//! A step needs the same temporaries every time (activations, projections,
//! gathered expert inputs, job lists, routing tables). They come from the
//! [`Workspace`] of the [`Runner`] the caller passes (the engine's worker
//! owns one for its whole life) instead of the allocator, and go back to it
//! when dropped:
//!
//! - [`Buf`]: an `f32` buffer from the workspace's free list (the smallest
//!   free buffer that is big enough);
//! - [`Reused`]: a `Vec` of one of a few element types from the workspace's
//!   pool of that type (taken and given back in the same order every step,
//!   so each use finds the vector it had);
//! - [`JobList`]: the same for `matmul_many` job lists, whose elements borrow.
//!
//! Nothing is ever shrunk, so once a step has run, the same step again (one
//! decode token per sequence) finds every buffer in place; a prefill grows
//! them when it needs more room than any step before it. Only the thread
//! that runs the step takes buffers: parallel tasks get parts of the
//! caller's buffers (`Threads::for_ranges_on`), so what is allocated does not
//! depend on which worker happens to run what.

use rill_kernels::{Isa, MatJob, Precision, Threads};
use std::ops::{Deref, DerefMut, Range};
use std::sync::Mutex;

/// How forward passes run — a run option of the caller, not a property of
/// the model — and the buffers they reuse. One per driver (the engine's
/// worker, a test, `rill logits`), allocated once.
pub struct Runner {
    pub threads: Threads,
    /// The kernel class every kernel of a step runs (chosen once by the
    /// caller: the user's `--kernels`, else [`Isa::best`]).
    kernels: Isa,
    /// The activations' numerics for the matrix products.
    pub precision: Precision,
    workspace: Workspace,
}

impl Runner {
    /// Forward passes on `threads` with kernel class `kernels`, which must
    /// be one this CPU runs ([`Isa::require`]; the kernels panic on
    /// another).
    pub fn new(threads: Threads, kernels: Isa, precision: Precision) -> Runner {
        Runner {
            threads,
            kernels,
            precision,
            workspace: Workspace::default(),
        }
    }

    /// The exact numerics on `threads` (0 = all cores), on `kernels`.
    pub fn exact(kernels: Isa, threads: usize) -> Runner {
        Runner::new(Threads::new(threads), kernels, Precision::Exact)
    }

    /// The kernel class the passes run.
    pub fn kernels(&self) -> Isa {
        self.kernels
    }

    pub(crate) fn exec(&self) -> Exec<'_> {
        Exec {
            threads: &self.threads,
            isa: self.kernels,
            precision: self.precision,
            ws: &self.workspace,
        }
    }
}

/// What every layer of a step is handed.
#[derive(Clone, Copy)]
pub(crate) struct Exec<'a> {
    pub threads: &'a Threads,
    /// The kernel class of every kernel call.
    pub isa: Isa,
    pub precision: Precision,
    pub ws: &'a Workspace,
}

/// The reusable buffers of a [`Runner`]. The locks are only ever taken by
/// the thread that runs the step (uncontended), and make the workspace
/// shareable with the step's parallel tasks, which read the buffers.
#[derive(Default)]
pub(crate) struct Workspace {
    free: Mutex<Vec<Vec<f32>>>,
    usizes: Mutex<Vec<Vec<usize>>>,
    f32s: Mutex<Vec<Vec<f32>>>,
    picks: Mutex<Vec<Vec<(usize, f32)>>>,
    ranges: Mutex<Vec<Vec<Range<usize>>>>,
    jobs: Mutex<Vec<MatJob<'static>>>,
}

/// An `f32` buffer taken from a workspace's free list and given back to it
/// when dropped. Dereferences to `len` values that start on a 64-byte line:
/// the products copy activations that do not (their 16-lane loads would
/// split lines), and parts of a buffer at multiples of 16 values (an
/// expert's rows in the MoE) then need no copy either.
///
/// The vector's own length is how much of it has ever been initialised: it
/// only grows (zeros, once), so a buffer that goes round the free list is
/// not zeroed again by each use that does not need zeros
/// ([`Buf::for_output`], [`Buf::scratch`]).
pub(crate) struct Buf<'w> {
    v: Vec<f32>,
    /// Where the 64-byte aligned values start in `v`.
    off: usize,
    len: usize,
    ws: &'w Workspace,
}

impl<'w> Buf<'w> {
    /// `len` zeros (the tests' way to see that reuse hands out zeros).
    #[cfg(test)]
    pub fn zeroed(ws: &'w Workspace, len: usize) -> Buf<'w> {
        let mut b = Buf::scratch(ws, len, len);
        b.fill(0.0);
        b
    }

    /// `len` values to be overwritten entirely (the output of a matrix
    /// product, which writes every element): not zeroed first.
    pub fn for_output(ws: &'w Workspace, len: usize) -> Buf<'w> {
        Buf::scratch(ws, len, len)
    }

    /// `len` values left from earlier use (zeros where never written), in a
    /// buffer of at least `capacity`: for a caller that writes every value
    /// before reading it and whose sizes grow with the context, so it asks
    /// once for the most it will need instead of growing the buffer (an
    /// allocation) step after step.
    pub fn scratch(ws: &'w Workspace, len: usize, capacity: usize) -> Buf<'w> {
        // + 16: room to align the start.
        let mut v = take_free(ws, capacity.max(len) + 16);
        let off = v.as_ptr().align_offset(64).min(16);
        if v.len() < off + len {
            v.resize(off + len, 0.0);
        }
        Buf { v, off, len, ws }
    }
}

/// Below this many values any free buffer up to twice it fits (small
/// buffers are not worth a buffer of their own).
const MIN_FIT: usize = 1 << 14;

/// The smallest free buffer that holds `need` values without wasting more
/// than it holds; else a new one, which replaces the largest free buffer
/// too small for it (so the list does not fill with buffers too small for
/// anything). A much larger free buffer is left for a request of its size:
/// lent to a small one while the steps grow (the first prompt chunks), it
/// would make that request allocate its own, and the pool would keep both.
fn take_free(ws: &Workspace, need: usize) -> Vec<f32> {
    let taken = {
        let mut free = lock(&ws.free);
        let good = |cap: usize| cap >= need && cap <= 2 * need.max(MIN_FIT);
        let fit = free
            .iter()
            .enumerate()
            .filter(|(_, v)| good(v.capacity()))
            .min_by_key(|(_, v)| v.capacity())
            .or_else(|| {
                (free.iter().enumerate())
                    .filter(|(_, v)| v.capacity() < need)
                    .max_by_key(|(_, v)| v.capacity())
            })
            .map(|(i, _)| i);
        fit.map(|i| free.swap_remove(i))
    };
    match taken {
        Some(v) if v.capacity() >= need => v,
        // Zeroed by the allocator (fresh pages come zeroed from the system,
        // no pass over them here), and initialised in full at once.
        _ => vec![0.0; need],
    }
}

/// A workspace lock (a panic elsewhere leaves the pools usable).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for Buf<'_> {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.v);
        lock(&self.ws.free).push(v);
    }
}

impl Deref for Buf<'_> {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.v[self.off..self.off + self.len]
    }
}

impl DerefMut for Buf<'_> {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.v[self.off..self.off + self.len]
    }
}

/// Element types a [`Reused`] vector can have: each has its pool.
pub(crate) trait Pooled: Sized {
    fn pool(ws: &Workspace) -> &Mutex<Vec<Vec<Self>>>;
}

impl Pooled for usize {
    fn pool(ws: &Workspace) -> &Mutex<Vec<Vec<usize>>> {
        &ws.usizes
    }
}

impl Pooled for f32 {
    fn pool(ws: &Workspace) -> &Mutex<Vec<Vec<f32>>> {
        &ws.f32s
    }
}

impl Pooled for (usize, f32) {
    fn pool(ws: &Workspace) -> &Mutex<Vec<Vec<(usize, f32)>>> {
        &ws.picks
    }
}

impl Pooled for Range<usize> {
    fn pool(ws: &Workspace) -> &Mutex<Vec<Vec<Range<usize>>>> {
        &ws.ranges
    }
}

/// A `Vec` taken (empty) from a workspace's pool and given back, cleared
/// but with its capacity, when dropped. Pools are stacks: a step takes and
/// gives back in the same order every time, so each use gets the vector it
/// had the step before.
pub(crate) struct Reused<'w, T: Pooled> {
    v: Vec<T>,
    ws: &'w Workspace,
}

impl<'w, T: Pooled> Reused<'w, T> {
    pub fn take(ws: &'w Workspace) -> Reused<'w, T> {
        let mut v = lock(T::pool(ws)).pop().unwrap_or_default();
        v.clear();
        Reused { v, ws }
    }
}

impl<T: Pooled> Drop for Reused<'_, T> {
    fn drop(&mut self) {
        let mut v = std::mem::take(&mut self.v);
        v.clear();
        lock(T::pool(self.ws)).push(v);
    }
}

impl<T: Pooled> Deref for Reused<'_, T> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.v
    }
}

impl<T: Pooled> DerefMut for Reused<'_, T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.v
    }
}

/// A job list for `matmul_many` whose allocation is kept in the workspace.
/// The jobs borrow the step's buffers, so the kept (empty) vector is
/// relabelled from one lifetime to the other.
pub(crate) struct JobList<'a, 'w> {
    jobs: Vec<MatJob<'a>>,
    ws: &'w Workspace,
}

impl<'a, 'w> JobList<'a, 'w> {
    pub fn take(ws: &'w Workspace) -> JobList<'a, 'w> {
        let kept = std::mem::take(&mut *lock(&ws.jobs));
        JobList {
            jobs: relabel(kept),
            ws,
        }
    }
}

impl Drop for JobList<'_, '_> {
    fn drop(&mut self) {
        let v = relabel(std::mem::take(&mut self.jobs));
        *lock(&self.ws.jobs) = v;
    }
}

impl<'a> Deref for JobList<'a, '_> {
    type Target = Vec<MatJob<'a>>;
    fn deref(&self) -> &Vec<MatJob<'a>> {
        &self.jobs
    }
}

impl<'a> DerefMut for JobList<'a, '_> {
    fn deref_mut(&mut self) -> &mut Vec<MatJob<'a>> {
        &mut self.jobs
    }
}

/// The allocation of `v`, emptied, as a vector of jobs of another lifetime.
fn relabel<'b>(mut v: Vec<MatJob<'_>>) -> Vec<MatJob<'b>> {
    v.clear();
    let mut v = std::mem::ManuallyDrop::new(v);
    // SAFETY: the allocation came from a `Vec` of a type that differs only
    // in a lifetime (same size and alignment), with the same capacity, and
    // the vector is empty, so no value is reinterpreted.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast(), 0, v.capacity()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_smallest_fit_first() {
        let ws = Workspace::default();
        let big = Buf::zeroed(&ws, 1000);
        let small = Buf::zeroed(&ws, 10);
        let (pb, ps) = (big.as_ptr(), small.as_ptr());
        assert!(
            (pb as usize).is_multiple_of(64) && (ps as usize).is_multiple_of(64),
            "aligned"
        );
        drop(big);
        drop(small);
        let a = Buf::zeroed(&ws, 5);
        assert_eq!(a.as_ptr(), ps, "the smallest that fits");
        let mut b = Buf::zeroed(&ws, 800);
        assert_eq!(b.as_ptr(), pb);
        assert!(b.iter().all(|&v| v == 0.0));
        b[3] = 7.0;
        drop(b);
        let c = Buf::scratch(&ws, 4, 900);
        assert_eq!(
            (c.as_ptr(), c.len(), c[3]),
            (pb, 4, 7.0),
            "scratch keeps contents"
        );
    }

    /// A buffer far larger than a request stays for a request of its size:
    /// growing steps (a small buffer asked while a big one is free, then
    /// the big size again) end with one buffer of each size, not two big.
    #[test]
    fn a_much_larger_buffer_is_not_lent_to_a_small_request() {
        let ws = Workspace::default();
        let n = 4 * MIN_FIT;
        let big = Buf::zeroed(&ws, n);
        let pb = big.as_ptr();
        drop(big);
        let small = Buf::zeroed(&ws, n / 8);
        assert_ne!(small.as_ptr(), pb, "the big buffer is not lent");
        let again = Buf::zeroed(&ws, n);
        assert_eq!(again.as_ptr(), pb, "it is there for its own size");
        drop((small, again));
        assert_eq!(lock(&ws.free).len(), 2);
        // Within twice the request, the larger buffer is used.
        let half = Buf::zeroed(&ws, n / 2 + 1);
        assert_eq!(half.as_ptr(), pb);
    }

    #[test]
    fn reused_vectors_come_back_to_their_use() {
        let ws = Workspace::default();
        let mut a: Reused<usize> = Reused::take(&ws);
        a.extend(0..100);
        let p = a.as_ptr();
        drop(a);
        let b: Reused<usize> = Reused::take(&ws);
        assert!(b.is_empty() && b.capacity() >= 100);
        assert_eq!(b.as_ptr(), p);
    }

    #[test]
    fn job_lists_keep_their_allocation() {
        let x = vec![1f32; 4];
        let mut out = vec![0f32; 1];
        let w = [0u8; 16];
        let m = rill_kernels::MatRef::new(rill_dtype::DType::F32, 1, 4, &w);
        let ws = Workspace::default();
        let mut jobs = JobList::take(&ws);
        jobs.push(MatJob {
            w: m,
            x: &x,
            n: 1,
            out: &mut out,
            pick: None,
        });
        let p = jobs.as_ptr() as usize;
        drop(jobs);
        let again = JobList::take(&ws);
        assert!(again.is_empty());
        assert_eq!(again.as_ptr() as usize, p);
    }
}
