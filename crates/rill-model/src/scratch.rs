//! Per-thread reusable buffers, so that a decode step allocates nothing.
//!
//! A step needs the same temporaries every time (activations, projections,
//! gathered expert inputs, job lists, routing tables). They come from the
//! calling thread instead of the allocator and go back to it when dropped:
//!
//! - [`Buf`]: an `f32` buffer from a per-thread free list (the smallest free
//!   buffer that is big enough);
//! - [`Reused`]: a `Vec` kept in a per-thread slot of its own, one per use;
//! - [`JobList`]: the same for `matmul_many` job lists, whose elements borrow.
//!
//! Nothing is ever shrunk, so once a step has run, the same step again (one
//! decode token per sequence) finds every buffer in place; a prefill grows
//! them when it needs more room than any step before it. Only the thread
//! that runs the step takes buffers: parallel tasks get parts of the
//! caller's buffers (`Threads::for_ranges_on`), so what is allocated does not
//! depend on which worker happens to run what.

use rill_kernels::MatJob;
use std::cell::{Cell, RefCell};
use std::ops::{Deref, DerefMut};
use std::thread::LocalKey;

thread_local! {
    /// The free `f32` buffers of this thread.
    static FREE: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
}

/// An `f32` buffer taken from this thread's free list and given back to it
/// when dropped. Dereferences to `len` values that start on a 64-byte line:
/// the products copy activations that do not (their 16-lane loads would
/// split lines), and parts of a buffer at multiples of 16 values (an
/// expert's rows in the MoE) then need no copy either.
///
/// The vector's own length is how much of it has ever been initialised: it
/// only grows (zeros, once), so a buffer that goes round the free list is
/// not zeroed again by each use that does not need zeros
/// ([`Buf::for_output`], [`Buf::scratch`]).
pub(crate) struct Buf {
    v: Vec<f32>,
    /// Where the 64-byte aligned values start in `v`.
    off: usize,
    len: usize,
}

impl Buf {
    /// `len` zeros (the tests' way to see that reuse hands out zeros).
    #[cfg(test)]
    pub fn zeroed(len: usize) -> Buf {
        let mut b = Buf::scratch(len, len);
        b.fill(0.0);
        b
    }

    /// `len` values to be overwritten entirely (the output of a matrix
    /// product, which writes every element): not zeroed first.
    pub fn for_output(len: usize) -> Buf {
        Buf::scratch(len, len)
    }

    /// `len` values left from earlier use (zeros where never written), in a
    /// buffer of at least `capacity`: for a caller that writes every value
    /// before reading it and whose sizes grow with the context, so it asks
    /// once for the most it will need instead of growing the buffer (an
    /// allocation) step after step.
    pub fn scratch(len: usize, capacity: usize) -> Buf {
        // + 16: room to align the start.
        let mut v = take_free(capacity.max(len) + 16);
        let off = v.as_ptr().align_offset(64).min(16);
        if v.len() < off + len {
            v.resize(off + len, 0.0);
        }
        Buf { v, off, len }
    }
}

/// The smallest free buffer that holds `need` values; else a new one that
/// replaces the largest (so the list does not fill with buffers too small
/// for anything).
fn take_free(need: usize) -> Vec<f32> {
    let taken = FREE.with(|f| {
        let mut free = f.borrow_mut();
        let fit = free
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= need)
            .min_by_key(|(_, v)| v.capacity())
            .or_else(|| free.iter().enumerate().max_by_key(|(_, v)| v.capacity()))
            .map(|(i, _)| i);
        fit.map(|i| free.swap_remove(i))
    });
    match taken {
        Some(v) if v.capacity() >= need => v,
        // Zeroed by the allocator (fresh pages come zeroed from the system,
        // no pass over them here), and initialised in full at once.
        _ => vec![0.0; need],
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.v);
        // `try_with`: nothing to keep once the thread is being torn down.
        let _ = FREE.try_with(|f| f.borrow_mut().push(v));
    }
}

impl Deref for Buf {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.v[self.off..self.off + self.len]
    }
}

impl DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.v[self.off..self.off + self.len]
    }
}

/// A per-thread slot for one [`Reused`] vector.
pub(crate) type Slot<T> = LocalKey<Cell<Vec<T>>>;

/// A `Vec` taken (empty) from a per-thread slot and given back, cleared but
/// with its capacity, when dropped. Each use declares its own slot:
/// `thread_local! { static SPANS: Cell<Vec<Range<usize>>> = ... }`.
pub(crate) struct Reused<T: 'static> {
    v: Vec<T>,
    slot: &'static Slot<T>,
}

impl<T> Reused<T> {
    pub fn take(slot: &'static Slot<T>) -> Reused<T> {
        let mut v = slot.with(Cell::take);
        v.clear();
        Reused { v, slot }
    }
}

impl<T> Drop for Reused<T> {
    fn drop(&mut self) {
        let mut v = std::mem::take(&mut self.v);
        v.clear();
        let _ = self.slot.try_with(|s| s.set(v));
    }
}

impl<T> Deref for Reused<T> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.v
    }
}

impl<T> DerefMut for Reused<T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.v
    }
}

thread_local! {
    static JOBS: Cell<Vec<MatJob<'static>>> = const { Cell::new(Vec::new()) };
}

/// A job list for `matmul_many` whose allocation is kept per thread. The
/// jobs borrow the step's buffers, so the kept (empty) vector is relabelled
/// from one lifetime to the other.
pub(crate) struct JobList<'a>(Vec<MatJob<'a>>);

impl<'a> JobList<'a> {
    pub fn take() -> JobList<'a> {
        JobList(relabel(JOBS.with(Cell::take)))
    }
}

impl Drop for JobList<'_> {
    fn drop(&mut self) {
        let v = relabel(std::mem::take(&mut self.0));
        let _ = JOBS.try_with(|s| s.set(v));
    }
}

impl<'a> Deref for JobList<'a> {
    type Target = Vec<MatJob<'a>>;
    fn deref(&self) -> &Vec<MatJob<'a>> {
        &self.0
    }
}

impl<'a> DerefMut for JobList<'a> {
    fn deref_mut(&mut self) -> &mut Vec<MatJob<'a>> {
        &mut self.0
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
        let big = Buf::zeroed(1000);
        let small = Buf::zeroed(10);
        let (pb, ps) = (big.as_ptr(), small.as_ptr());
        assert!(
            (pb as usize).is_multiple_of(64) && (ps as usize).is_multiple_of(64),
            "aligned"
        );
        drop(big);
        drop(small);
        let a = Buf::zeroed(5);
        assert_eq!(a.as_ptr(), ps, "the smallest that fits");
        let mut b = Buf::zeroed(800);
        assert_eq!(b.as_ptr(), pb);
        assert!(b.iter().all(|&v| v == 0.0));
        b[3] = 7.0;
        drop(b);
        let c = Buf::scratch(4, 900);
        assert_eq!(
            (c.as_ptr(), c.len(), c[3]),
            (pb, 4, 7.0),
            "scratch keeps contents"
        );
    }

    #[test]
    fn job_lists_keep_their_allocation() {
        let x = vec![1f32; 4];
        let mut out = vec![0f32; 1];
        let w = [0u8; 16];
        let m = rill_kernels::MatRef::new(rill_dtype::DType::F32, 1, 4, &w);
        let mut jobs = JobList::take();
        jobs.push(MatJob {
            w: m,
            x: &x,
            n: 1,
            out: &mut out,
            pick: None,
        });
        let p = jobs.as_ptr() as usize;
        drop(jobs);
        let again = JobList::take();
        assert!(again.is_empty());
        assert_eq!(again.as_ptr() as usize, p);
    }
}
