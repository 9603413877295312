//! Weight matrix × activations.
//!
//! A weight matrix is `rows × cols` in its file encoding, one encoded row per
//! output feature (ggml layout: `ne[0] = cols` is contiguous). Activations are
//! `n` row vectors of `cols` f32. The output is `n × rows`.
//!
//! Rows are decoded in blocks into an f32 scratch buffer and multiplied with
//! tiles of tokens by register-blocked microkernels ([`crate::gemm`]), one
//! token (decode) or many (prefill) alike, in one canonical order per output.

use crate::gemm;
use crate::q8::{self, ActFormat, Precision, Q8Acts, Q8Rows, RowSink};
use crate::quant;
use crate::simd::Isa;
use crate::threads::{SharedMut, Threads};
use rill_dtype::DType;

/// A borrowed, encoded weight matrix.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    pub dtype: DType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
    /// Scales stored apart from the codes, when the encoding has them.
    pub scales: Scales<'a>,
}

/// Scale tensors stored apart from a matrix's codes: how Hugging Face FP8
/// and NVFP4 checkpoints ship, and the global scales of GGUF's NVFP4
/// ([`Scales::Rows`]; every other GGUF type keeps its scales inside its
/// blocks: [`Scales::None`]). The values are multiplied into the decoded
/// codes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Scales<'a> {
    #[default]
    None,
    /// One scale per `tile_rows × tile_cols` tile, tiles row-major
    /// (`⌈rows / tile_rows⌉ × ⌈cols / tile_cols⌉`; FP8 block quantization:
    /// 128 × 128), each `dtype` (F32 or BF16). `row0`: where row 0 of the
    /// matrix lies inside its first tile (a view cut inside a tile).
    Tiles {
        data: &'a [u8],
        dtype: DType,
        tile_rows: usize,
        tile_cols: usize,
        row0: usize,
    },
    /// One scale per `group` consecutive values of a row (NVFP4: 16), each
    /// `dtype`, times one `global` scale for the whole tensor.
    Groups {
        data: &'a [u8],
        dtype: DType,
        group: usize,
        global: f32,
    },
    /// One little-endian f32 per block of `block_rows` consecutive rows:
    /// the `.scale` tensors llama.cpp's converter writes beside GGUF NVFP4
    /// matrices (the checkpoint's global scale: one per tensor, or one per
    /// expert of a stack). As llama.cpp does, the products multiply their
    /// outputs by it ([`Self::outputs_of`]); a decoded row is multiplied
    /// by it. `row0`: where row 0 lies inside its block.
    Rows {
        data: &'a [u8],
        block_rows: usize,
        row0: usize,
    },
}

impl<'a> Scales<'a> {
    /// The multiplier of row `r`'s outputs, for [`Scales::Rows`].
    pub(crate) fn row_factor(self, r: usize) -> Option<f32> {
        match self {
            Scales::Rows {
                data,
                block_rows,
                row0,
            } => {
                let at = 4 * ((row0 + r) / block_rows);
                Some(f32::from_le_bytes(data[at..at + 4].try_into().unwrap()))
            }
            _ => None,
        }
    }

    /// `w` split into what the kernels multiply (the matrix without
    /// [`Scales::Rows`]) and the per-row multipliers of the outputs, if any.
    pub(crate) fn outputs_of(w: MatRef<'a>) -> (MatRef<'a>, Option<Scales<'a>>) {
        match w.scales {
            Scales::Rows { .. } => (
                MatRef {
                    scales: Scales::None,
                    ..w
                },
                Some(w.scales),
            ),
            _ => (w, None),
        }
    }

    /// The scales of rows `start..end` of a `rows × cols` matrix.
    fn slice_rows(self, start: usize, end: usize, cols: usize) -> Scales<'a> {
        match self {
            Scales::None => Scales::None,
            Scales::Tiles {
                data,
                dtype,
                tile_rows,
                tile_cols,
                row0,
            } => {
                let row_bytes = cols.div_ceil(tile_cols) * dtype.block_bytes();
                let (a, b) = (row0 + start, row0 + end);
                let (t0, t1) = (a / tile_rows, b.div_ceil(tile_rows));
                Scales::Tiles {
                    data: &data[t0 * row_bytes..t1 * row_bytes],
                    dtype,
                    tile_rows,
                    tile_cols,
                    row0: a % tile_rows,
                }
            }
            Scales::Rows {
                data,
                block_rows,
                row0,
            } => {
                let (a, b) = (row0 + start, row0 + end);
                let (t0, t1) = (a / block_rows, b.div_ceil(block_rows));
                Scales::Rows {
                    data: &data[4 * t0..4 * t1],
                    block_rows,
                    row0: a % block_rows,
                }
            }
            Scales::Groups {
                data,
                dtype,
                group,
                global,
            } => {
                let row_bytes = cols.div_ceil(group) * dtype.block_bytes();
                Scales::Groups {
                    data: &data[start * row_bytes..end * row_bytes],
                    dtype,
                    group,
                    global,
                }
            }
        }
    }
}

impl<'a> MatRef<'a> {
    /// A matrix whose encoding carries its own scales.
    pub fn new(dtype: DType, rows: usize, cols: usize, data: &'a [u8]) -> MatRef<'a> {
        MatRef {
            dtype,
            rows,
            cols,
            data,
            scales: Scales::None,
        }
    }

    /// Bytes of one encoded row.
    pub fn row_bytes(&self) -> usize {
        self.cols / self.dtype.block_len() * self.dtype.block_bytes()
    }

    /// The encoded bytes of row `r`.
    pub fn row(&self, r: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }

    /// Rows `start..end` as a matrix of their own (e.g. one expert of a stacked tensor).
    ///
    /// An encoding that interleaves rows ([`DType::interleaved_rows`]) is
    /// sliced at a group (`start` a multiple of its rows, as the loader
    /// makes sure every slice the model takes is) and keeps the whole group
    /// that holds its last row.
    pub fn slice_rows(&self, start: usize, end: usize) -> MatRef<'a> {
        let rb = self.row_bytes();
        let g = self.dtype.interleaved_rows();
        assert!(
            start.is_multiple_of(g),
            "{} rows sliced inside a group",
            self.dtype
        );
        let stop = (end.next_multiple_of(g) * rb).min(self.data.len());
        MatRef {
            scales: self.scales.slice_rows(start, end, self.cols),
            ..MatRef::new(
                self.dtype,
                end - start,
                self.cols,
                &self.data[start * rb..stop.max(end * rb)],
            )
        }
    }

    /// Decode row `r` into `out` (`cols` values) on kernel class `isa`,
    /// its separate scales multiplied in.
    pub fn dequantize_row(&self, isa: Isa, r: usize, out: &mut [f32]) {
        if crate::scaled::dequantize_row_with(isa, self, r, out) {
            return;
        }
        if let Some(source) = crate::layout::interleaved_source(self.dtype) {
            // Block by block through the blocks the row was made from (an
            // embedding lookup of a tied LM head reads a row so).
            let (rb, bb, bl) = (self.row_bytes(), source.block_bytes(), source.block_len());
            for (b, dst) in out[..self.cols].chunks_exact_mut(bl).enumerate() {
                let block = crate::layout::source_block(self.dtype, self.data, rb, r, b);
                quant::dequantize_with(isa, source, &block[..bb], dst);
            }
            crate::scaled::apply(self.scales, r, out);
            return;
        }
        quant::dequantize_with(isa, self.dtype, self.row(r), out);
        crate::scaled::apply(self.scales, r, out);
    }
}

/// `out[t][r] = Σ_c w[r][c] · x[t][c]` for `t < n`, threaded over rows,
/// exactly (f32 activations) on kernel class `isa`. Panics if the CPU
/// cannot run `isa`.
///
/// Batch invariance: every output is computed in the canonical order of the
/// class (see [`crate::gemm`]) whatever `n` is, whatever the other rows of
/// `x` hold and however rows are split among threads, so a token gets
/// bit-identical results alone or in a batch (the serving engine relies on
/// this to give a request the same tokens under any load). Weight rows are
/// decoded once per token tile and reused for every token of it.
pub fn matmul_with(
    isa: Isa,
    threads: &Threads,
    w: MatRef<'_>,
    x: &[f32],
    n: usize,
    out: &mut [f32],
) {
    matmul_on(isa, Precision::Exact, threads, w, x, n, out)
}

/// [`matmul_with`] with the given activation [`Precision`].
pub fn matmul_on(
    isa: Isa,
    precision: Precision,
    threads: &Threads,
    w: MatRef<'_>,
    x: &[f32],
    n: usize,
    out: &mut [f32],
) {
    matmul_many_on(
        isa,
        precision,
        threads,
        &mut [MatJob {
            w,
            x,
            n,
            out,
            pick: None,
        }],
    );
}

/// One product of a [`matmul_many_on`] call: `out = w · xᵀ` over `n` rows of `x`.
pub struct MatJob<'a> {
    pub w: MatRef<'a>,
    pub x: &'a [f32],
    pub n: usize,
    pub out: &'a mut [f32],
    /// `Some`: the `n` rows are rows `pick[0], pick[1], ..` of `x`, which
    /// holds any number of whole rows (a MoE expert's tokens out of the
    /// step's input). Jobs picking from one `x` share its 8-bit form, made
    /// once per call; exact ones gather their rows.
    pub pick: Option<&'a [usize]>,
}

/// Several independent products in one parallel region (e.g. the q, k and v
/// projections of one input, or every routed expert of a step), exactly on
/// kernel class `isa`: one start and one barrier instead of one per matrix,
/// and the rows of all of them balanced over the workers. Same per-element
/// arithmetic as [`matmul_with`]. Panics if the CPU cannot run `isa`.
pub fn matmul_many_with(isa: Isa, threads: &Threads, jobs: &mut [MatJob]) {
    matmul_many_on(isa, Precision::Exact, threads, jobs)
}

/// [`matmul_many_with`] with the given activation [`Precision`].
///
/// With [`Precision::Q8`], the jobs whose weights have integer kernels
/// ([`ActFormat::for_mat`]) take 8-bit activations (see [`crate::q8`]),
/// quantized once per distinct input and format; the others run exactly.
///
/// Makes no heap allocation once the staging buffers that `threads` owns
/// have grown to the sizes of its products (a decode step repeats the same
/// ones).
pub fn matmul_many_on(isa: Isa, precision: Precision, threads: &Threads, jobs: &mut [MatJob]) {
    isa.check();
    // The pool's staging; a product started while another holds it (inside
    // one of its tasks, or from a second thread) uses a fresh one.
    let mut held = threads.staging();
    let mut fresh = None;
    let staging = match held.as_deref_mut() {
        Some(s) => s,
        None => fresh.insert(Staging::default()),
    };
    let Staging {
        starts,
        outs,
        x,
        scratch,
        rows,
        quantized,
    } = staging;
    starts.clear();
    let mut total = 0;
    let mut max_cols = 1;
    for j in jobs.iter() {
        match j.pick {
            None => assert_eq!(j.x.len(), j.n * j.w.cols, "activation size"),
            Some(pick) => {
                assert_eq!(pick.len(), j.n, "picked rows");
                assert!(j.x.len().is_multiple_of(j.w.cols), "activation size");
                let rows = j.x.len() / j.w.cols;
                assert!(pick.iter().all(|&t| t < rows), "picked row out of range");
            }
        }
        assert_eq!(j.out.len(), j.n * j.w.rows, "output size");
        starts.push(total);
        total += j.w.rows;
        max_cols = max_cols.max(j.w.cols);
    }
    starts.push(total);
    outs.clear();
    outs.extend(jobs.iter_mut().map(|j| SharedMut::new(j.out)));
    if precision == Precision::Q8 {
        quantized.quantize(isa, threads, jobs);
    } else {
        quantized.clear();
    }
    x.align(jobs, |k| quantized.of(jobs, k).is_none());
    // Decoded weight rows: one part per pool thread, all in one buffer of
    // the calling thread (see `Threads::for_ranges_on`). Only ever grown;
    // every task decodes rows into it before reading them.
    let part = gemm::Scratch::len(max_cols);
    if scratch.len() < part * threads.count() {
        scratch.resize(part * threads.count(), 0.0);
    }
    let parts = SharedMut::new(scratch);
    if rows.len() < threads.count() {
        rows.resize_with(threads.count(), q8::RowScratch::default);
    }
    let rows = SharedMut::new(rows);
    let (starts, outs, x, quantized) = (&*starts, &*outs, &*x, &*quantized);
    let jobs = &*jobs;
    // Enough rows per task that scheduling overhead stays small.
    let min_rows = (16384 / max_cols).max(1);
    let task = |slot: usize, g0: usize, g1: usize| {
        // SAFETY: part `slot` of the buffer (sized for `count()` parts
        // above) is used by one task at a time.
        let mut scratch = gemm::Scratch::new(unsafe {
            std::slice::from_raw_parts_mut(parts.at(slot * part), part)
        });
        // The first job overlapping this task's rows.
        let mut k = starts.partition_point(|&s| s <= g0) - 1;
        let mut g = g0;
        while g < g1 {
            while starts[k + 1] <= g {
                k += 1;
            }
            let j = &jobs[k];
            let r_end = (g1 - starts[k]).min(j.w.rows);
            let (w, row_scales) = Scales::outputs_of(j.w);
            let r_start = g - starts[k];
            // SAFETY: `outs[k]` is job k's output (`n · rows` values, checked
            // above) and rows `g - starts[k]..r_end` of it are this task's only;
            // job k's quantized activations are in its weights' format.
            if let Some(acts) = quantized.of(jobs, k) {
                // SAFETY: as `scratch`: entry `slot` is this task's alone.
                let own = unsafe { &mut *rows.at(slot) };
                unsafe { q8::rows(isa, w, acts, r_start, r_end, outs[k], own) };
            } else {
                unsafe {
                    gemm::rows(
                        isa,
                        w,
                        x.of(jobs, k),
                        j.n,
                        r_start,
                        r_end,
                        outs[k],
                        &mut scratch,
                    )
                };
            }
            if let Some(scales) = row_scales {
                for r in r_start..r_end {
                    let f = scales.row_factor(r).unwrap_or(1.0);
                    for t in 0..j.n {
                        // SAFETY: as the products' writes above.
                        unsafe { *outs[k].at(t * w.rows + r) *= f };
                    }
                }
            }
            g = starts[k] + r_end;
        }
    };
    // Tasks take whole groups of the rows an interleaved layout keeps
    // together (each job's rows are whole groups, so the tasks' bounds fall
    // between groups).
    let unit = jobs
        .iter()
        .map(|j| j.w.dtype.interleaved_rows())
        .max()
        .unwrap_or(1);
    threads.for_ranges_on(
        total.div_ceil(unit),
        min_rows.div_ceil(unit),
        |slot, u0, u1| task(slot, u0 * unit, (u1 * unit).min(total)),
    );
}

/// What [`matmul_many_on`] needs besides its inputs. The [`Threads`] pool
/// owns one (so whoever owns the pool, e.g. the engine's worker, owns it)
/// and keeps it between calls, so that a call allocates only when it needs
/// more room than any before it (a forward step makes hundreds of products).
#[derive(Default)]
pub(crate) struct Staging {
    /// First global row of each job, then the total.
    starts: Vec<usize>,
    /// Each job's output.
    outs: Vec<SharedMut<f32>>,
    x: AlignedX,
    /// Decoded-row scratch of every pool thread.
    scratch: Vec<f32>,
    /// The integer kernels' buffers of every pool thread.
    rows: Vec<q8::RowScratch>,
    quantized: QuantizedX,
}

/// Activations on 64-byte boundaries for the kernels: a 16-lane load of
/// an f32 vector that starts mid cache line reads two lines, and the
/// microkernels run ~15-20% slower on such rows (malloc gives 16-byte
/// alignment). Misaligned inputs, and the rows that jobs pick, are copied
/// into a buffer of the staging kept between calls (a forward step makes
/// hundreds of products; copying is a few µs against the product's
/// milliseconds).
#[derive(Default)]
struct AlignedX {
    buf: Vec<f32>,
    /// Where `buf` reaches a 64-byte boundary.
    base: usize,
    /// Per job: the offset of its copy past `base`, or `None` when its
    /// activations are used in place.
    at: Vec<Option<usize>>,
    /// The distinct inputs copied: (first job with it, its offset). Jobs are
    /// kept by index, not by reference, so the list outlives the call.
    placed: Vec<(usize, usize)>,
}

impl AlignedX {
    /// Place the activations of each job that `exact` names: in place when
    /// they already are aligned (or are too short to matter), else a copy
    /// (one per distinct input: the q, k and v projections of a layer
    /// share theirs; picked rows are always gathered).
    fn align(&mut self, jobs: &[MatJob], exact: impl Fn(usize) -> bool) {
        let misaligned = |x: &[f32]| x.len() >= 16 && !(x.as_ptr() as usize).is_multiple_of(64);
        let same_slice = |a: &[f32], b: &[f32]| a.as_ptr() == b.as_ptr() && a.len() == b.len();
        let same = |a: &MatJob, b: &MatJob| {
            same_slice(a.x, b.x)
                && match (a.pick, b.pick) {
                    (None, None) => true,
                    (Some(p), Some(q)) => p.as_ptr() == q.as_ptr() && p.len() == q.len(),
                    _ => false,
                }
        };
        self.at.clear();
        self.placed.clear();
        let mut need = 0;
        for (k, j) in jobs.iter().enumerate() {
            let copy = exact(k) && (j.pick.is_some() || misaligned(j.x));
            let at = copy.then(
                || match self.placed.iter().find(|&&(i, _)| same(&jobs[i], j)) {
                    Some(&(_, at)) => at,
                    None => {
                        let at = need;
                        self.placed.push((k, at));
                        need += (j.n * j.w.cols).next_multiple_of(16);
                        at
                    }
                },
            );
            self.at.push(at);
        }
        if self.placed.is_empty() {
            return;
        }
        if self.buf.len() < need + 16 {
            self.buf = vec![0f32; need + 16];
        }
        self.base = self.buf.as_ptr().align_offset(64).min(16);
        for &(i, at) in &self.placed {
            let j = &jobs[i];
            let dst = &mut self.buf[self.base + at..self.base + at + j.n * j.w.cols];
            match j.pick {
                None => dst.copy_from_slice(j.x),
                Some(pick) => {
                    let c = j.w.cols;
                    for (d, &t) in dst.chunks_exact_mut(c).zip(pick) {
                        d.copy_from_slice(&j.x[t * c..(t + 1) * c]);
                    }
                }
            }
        }
    }

    /// Job `k`'s activations as placed by the last [`align`](Self::align).
    fn of<'a>(&'a self, jobs: &'a [MatJob], k: usize) -> &'a [f32] {
        let j = &jobs[k];
        match self.at[k] {
            Some(at) => &self.buf[self.base + at..self.base + at + j.n * j.w.cols],
            None => j.x,
        }
    }
}

/// 8-bit forms of the jobs' activations, for [`Precision::Q8`]: one per
/// distinct (input, format), kept per thread between calls.
#[derive(Default)]
struct QuantizedX {
    pool: Vec<Q8Acts>,
    /// Per job: its entry of `pool`, or `None` to run exactly.
    at: Vec<Option<usize>>,
    /// The distinct inputs quantized: (first job with it, its format).
    placed: Vec<(usize, ActFormat)>,
    /// Per distinct input: its first row among all of theirs, its first
    /// job, where its rows go.
    sinks: Vec<(usize, usize, RowSink)>,
}

impl QuantizedX {
    fn clear(&mut self) {
        self.at.clear();
    }

    /// Quantize each distinct input of the jobs that have integer
    /// kernels, whole (all its rows, also for jobs that pick some): the
    /// rows of all of them in one parallel region.
    fn quantize(&mut self, isa: Isa, threads: &Threads, jobs: &[MatJob]) {
        let same = |a: &[f32], b: &[f32]| a.as_ptr() == b.as_ptr() && a.len() == b.len();
        self.at.clear();
        self.placed.clear();
        for (k, j) in jobs.iter().enumerate() {
            let at = ActFormat::for_mat(&j.w).map(|f| {
                match self
                    .placed
                    .iter()
                    .position(|&(i, g)| g == f && same(jobs[i].x, j.x))
                {
                    Some(p) => p,
                    None => {
                        let p = self.placed.len();
                        if self.pool.len() <= p {
                            self.pool.push(Q8Acts::default());
                        }
                        self.placed.push((k, f));
                        p
                    }
                }
            });
            self.at.push(at);
        }
        self.sinks.clear();
        let mut total = 0;
        for (acts, &(k, f)) in self.pool.iter_mut().zip(&self.placed) {
            let cols = jobs[k].w.cols;
            let rows = jobs[k].x.len() / cols;
            self.sinks
                .push((total, k, acts.prepare(isa, f, rows, cols)));
            total += rows;
        }
        let sinks = &self.sinks;
        // Rows are ~1-10 µs each: a decode step's few stay on this thread.
        threads.for_ranges(total, 32, |g0, g1| {
            let mut i = sinks.partition_point(|&(start, _, _)| start <= g0) - 1;
            for g in g0..g1 {
                while i + 1 < sinks.len() && sinks[i + 1].0 <= g {
                    i += 1;
                }
                let (start, k, sink) = sinks[i];
                let (t, cols) = (g - start, jobs[k].w.cols);
                // SAFETY: row t of input i is below its prepared count, and
                // this task's alone.
                unsafe { sink.row(t, &jobs[k].x[t * cols..(t + 1) * cols]) };
            }
        });
    }

    /// Job `k`'s quantized activations, if it runs on 8-bit ones.
    fn of<'a>(&'a self, jobs: &'a [MatJob], k: usize) -> Option<Q8Rows<'a>> {
        let acts = &self.pool[self.at.get(k).copied().flatten()?];
        Some(match jobs[k].pick {
            None => acts.into(),
            Some(pick) => Q8Rows::picked(acts, pick),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_the_same_alone_or_in_a_batch() {
        let (rows, cols) = (37, 96);
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919) % 1000) as f32 / 997.0 - 0.5)
            .collect();
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let m = MatRef::new(rill_dtype::DType::F32, rows, cols, &bytes);
        let x: Vec<f32> = (0..5 * cols)
            .map(|i| ((i * 104729) % 1000) as f32 / 1013.0 - 0.4)
            .collect();
        let threads = Threads::new(2);
        let mut all = vec![0f32; 5 * rows];
        matmul_with(Isa::best(), &threads, m, &x, 5, &mut all);
        for t in 0..5 {
            let mut one = vec![0f32; rows];
            matmul_with(
                Isa::best(),
                &threads,
                m,
                &x[t * cols..(t + 1) * cols],
                1,
                &mut one,
            );
            assert_eq!(&all[t * rows..(t + 1) * rows], &one[..], "token {t}");
        }
    }

    #[test]
    fn many_products_in_one_region_equal_separate_calls() {
        let mk = |rows: usize, cols: usize, seed: usize| -> Vec<u8> {
            (0..rows * cols)
                .flat_map(|i| (((i * 7919 + seed) % 1000) as f32 / 997.0 - 0.5).to_le_bytes())
                .collect()
        };
        let shapes = [
            (5usize, 32usize, 3usize),
            (300, 64, 1),
            (1, 32, 2),
            (77, 96, 4),
        ];
        let ws: Vec<Vec<u8>> = shapes
            .iter()
            .enumerate()
            .map(|(i, &(r, c, _))| mk(r, c, i))
            .collect();
        let xs: Vec<Vec<f32>> = shapes
            .iter()
            .map(|&(_, c, n)| (0..c * n).map(|i| (i % 13) as f32 * 0.1 - 0.6).collect())
            .collect();
        let mats: Vec<MatRef> = shapes
            .iter()
            .zip(&ws)
            .map(|(&(rows, cols, _), d)| MatRef::new(rill_dtype::DType::F32, rows, cols, d))
            .collect();
        let threads = Threads::new(3);
        let mut outs: Vec<Vec<f32>> = shapes.iter().map(|&(r, _, n)| vec![0f32; r * n]).collect();
        let mut jobs: Vec<MatJob> = outs
            .iter_mut()
            .enumerate()
            .map(|(i, o)| MatJob {
                w: mats[i],
                x: &xs[i],
                n: shapes[i].2,
                out: o,
                pick: None,
            })
            .collect();
        matmul_many_with(Isa::best(), &threads, &mut jobs);
        drop(jobs);
        for i in 0..shapes.len() {
            let mut want = vec![0f32; shapes[i].0 * shapes[i].2];
            matmul_with(
                Isa::best(),
                &Threads::new(1),
                mats[i],
                &xs[i],
                shapes[i].2,
                &mut want,
            );
            assert_eq!(outs[i], want, "job {i}");
        }
    }
}
