//! How a sequence stores the keys and values of its attention layers
//! (DESIGN.md §3): the encoding of K and of V, chosen apart (a run option,
//! passed down in a [`KvConfig`] value), and the cache itself.
//!
//! Rows are encoded as they are appended (ggml's block formats, see
//! `rill_kernels::kv`) and the attention kernel reads them in place, a key
//! tile at a time. A side stored in fewer than 8 bits per value also keeps
//! f16 copies of its first `sinks` positions (attention sinks) and of a
//! ring of recent positions, so that a query reads its last `window` keys
//! and values in f16.

use crate::config::ModelConfig;
use crate::error::ModelError;
use rill_dtype::DType;
use rill_kernels::kv::{
    encode, encoded_len, hadamard_block, ExactRows, KvRows, KvSide, KV_PAGE_POSITIONS,
};
use rill_kernels::Precision;
use std::sync::Arc;

/// An encoding of KV cache rows, by llama.cpp's `-ctk` / `-ctv` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvType(DType);

impl KvType {
    pub const F32: KvType = KvType(DType::F32);
    pub const F16: KvType = KvType(DType::F16);
    pub const BF16: KvType = KvType(DType::BF16);
    pub const Q8_0: KvType = KvType(DType::Q8_0);
    pub const Q5_1: KvType = KvType(DType::Q5_1);
    pub const Q4_0: KvType = KvType(DType::Q4_0);
    /// Every type, by decreasing bits per value.
    pub const ALL: [KvType; 6] = [
        KvType::F32,
        KvType::F16,
        KvType::BF16,
        KvType::Q8_0,
        KvType::Q5_1,
        KvType::Q4_0,
    ];

    pub fn dtype(self) -> DType {
        self.0
    }

    /// The name as llama.cpp's flags spell it (`f16`, `q8_0`, …).
    pub fn name(self) -> &'static str {
        match self.0 {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::Q8_0 => "q8_0",
            DType::Q5_1 => "q5_1",
            DType::Q4_0 => "q4_0",
            _ => unreachable!("a KvType holds a KV encoding"),
        }
    }

    /// Whether the type is block-quantized (its rows are rotated first).
    pub fn is_quantized(self) -> bool {
        matches!(self.0, DType::Q8_0 | DType::Q5_1 | DType::Q4_0)
    }

    /// Whether rows of this type keep f16 sinks and a recent window
    /// (fewer than 8 bits per value).
    pub fn keeps_exact_rows(self) -> bool {
        matches!(self.0, DType::Q4_0 | DType::Q5_1)
    }

    /// Bytes of `n` values (a whole number of blocks).
    pub fn bytes_for(self, n: usize) -> usize {
        encoded_len(self.0, n)
    }
}

impl std::str::FromStr for KvType {
    type Err = String;

    fn from_str(s: &str) -> Result<KvType, String> {
        KvType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<_> = KvType::ALL.iter().map(|t| t.name()).collect();
                format!("unknown KV cache type '{s}' (one of {})", names.join(", "))
            })
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Default attention-sink positions kept in f16 by a 4- or 5-bit side.
pub const DEFAULT_KV_SINKS: usize = 4;
/// Default recent window (keys before a query) read in f16 by a 4- or 5-bit side.
pub const DEFAULT_KV_WINDOW: usize = 256;

/// How the attention layers (trunk and MTP head) store K and V.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvConfig {
    pub k: KvType,
    pub v: KvType,
    /// First positions kept in f16 for a side of fewer than 8 bits.
    pub sinks: usize,
    /// A query reads its last `window` keys / values of such a side in f16.
    pub window: usize,
    /// Rotate the rows of a block-quantized side by a Walsh–Hadamard
    /// transform before they are stored (as llama.cpp does by default):
    /// K with Q over the head (up to 256 values), V in blocks of 64 with
    /// the attention output rotated back.
    pub rotate: bool,
}

impl KvConfig {
    /// Both sides in `t`, default sinks and window.
    pub fn uniform(t: KvType) -> KvConfig {
        KvConfig {
            k: t,
            v: t,
            sinks: DEFAULT_KV_SINKS,
            window: DEFAULT_KV_WINDOW,
            rotate: true,
        }
    }

    /// f32: the exact reference (what `SequenceState::new` uses).
    pub fn f32() -> KvConfig {
        KvConfig::uniform(KvType::F32)
    }

    /// The default of a run in `precision`: f32 when it asks for exact
    /// results, else f16 (half the memory, errors far below q8's).
    pub fn default_for(precision: Precision) -> KvConfig {
        match precision {
            Precision::Exact => KvConfig::f32(),
            _ => KvConfig::uniform(KvType::F16),
        }
    }

    /// `k` / `v` when given, else [`default_for`](Self::default_for)'s.
    pub fn choose(precision: Precision, k: Option<KvType>, v: Option<KvType>) -> KvConfig {
        let d = KvConfig::default_for(precision);
        KvConfig {
            k: k.unwrap_or(d.k),
            v: v.unwrap_or(d.v),
            ..d
        }
    }

    /// Whether `model`'s attention rows can be stored so (the head
    /// dimension must be a whole number of the types' blocks).
    pub fn check(&self, model: &ModelConfig) -> Result<(), ModelError> {
        for (side, t) in [("K", self.k), ("V", self.v)] {
            let bl = t.dtype().block_len();
            if !model.head_dim.is_multiple_of(bl) {
                return Err(ModelError::Inconsistent(format!(
                    "{side} cache type {t} stores blocks of {bl} values; the head dimension \
                     {} is not a multiple of it",
                    model.head_dim
                )));
            }
        }
        Ok(())
    }

    /// A short description (`K q8_0, V q4_0 (f16 sinks 4, window 256)`).
    pub fn describe(&self) -> String {
        let exact = self.k.keeps_exact_rows() || self.v.keeps_exact_rows();
        let mut extra = if exact && self.sinks + self.window > 0 {
            format!(" (f16 sinks {}, window {})", self.sinks, self.window)
        } else {
            String::new()
        };
        if self.rotate && (self.k.is_quantized() || self.v.is_quantized()) {
            extra.push_str(", Hadamard-rotated");
        }
        if self.k == self.v {
            format!("{}{extra}", self.k)
        } else {
            format!("K {}, V {}{extra}", self.k, self.v)
        }
    }
}

impl KvConfig {
    /// Most bytes one attention layer's K and V take holding `positions`
    /// positions of `per_pos` values each, appended at most `step_rows`
    /// rows at a time (the f16 window ring grows with the largest step).
    /// What a memory budget plans against; [`KvCache::bytes`] never
    /// exceeds it.
    pub fn layer_bytes(&self, per_pos: usize, positions: usize, step_rows: usize) -> usize {
        [self.k, self.v]
            .into_iter()
            .map(|t| {
                // Whole pages.
                let pages = positions.div_ceil(KV_PAGE_POSITIONS);
                let rows = t.bytes_for(per_pos) * pages * KV_PAGE_POSITIONS;
                let exact = if t.keeps_exact_rows() && self.sinks + self.window > 0 {
                    let row = 2 * per_pos;
                    let sinks = self.sinks.min(positions) * row;
                    // The ring grows to `need` rows, doubling: under 2 × need.
                    let need = self.window.saturating_sub(1) + step_rows.max(RING_SLACK);
                    let ring = if self.window > 0 { 2 * need * row } else { 0 };
                    sinks + ring
                } else {
                    0
                };
                rows + exact
            })
            .sum()
    }
}

/// Rows a window ring keeps past the window, so that dropping the last few
/// positions (rejected draft tokens) leaves the window's rows in f16.
const RING_SLACK: usize = 64;

/// Rows in pages of [`KV_PAGE_POSITIONS`] positions, each page shared by
/// reference count: a clone of the store (a prompt-cache snapshot, a
/// sequence resumed from one) shares every page, and the first write to a
/// shared page (an append to the last one, a truncation into it) copies
/// that page alone (copy on write). Every page is full but the last; a
/// page is allocated whole when the first row is written to it, so a
/// decode step allocates only when it starts a page (every
/// `KV_PAGE_POSITIONS` positions) or diverges from a shared one.
#[derive(Debug)]
pub(crate) struct Pages<T> {
    pub pages: Vec<Arc<Vec<T>>>,
    /// Elements per position.
    row: usize,
}

impl<T> Clone for Pages<T> {
    fn clone(&self) -> Self {
        Pages {
            pages: self.pages.clone(),
            row: self.row,
        }
    }
}

impl<T: Copy + Default> Pages<T> {
    fn new(row: usize) -> Pages<T> {
        Pages {
            pages: Vec::new(),
            row,
        }
    }

    fn positions(&self) -> usize {
        match self.pages.last() {
            None => 0,
            Some(p) => (self.pages.len() - 1) * KV_PAGE_POSITIONS + p.len() / self.row,
        }
    }

    /// Page `i`, unshared (copied first if another holder shares it), with
    /// room for a whole page.
    fn page_mut(&mut self, i: usize) -> &mut Vec<T> {
        let full = KV_PAGE_POSITIONS * self.row;
        let page = &mut self.pages[i];
        if Arc::get_mut(page).is_none() {
            let mut own = Vec::with_capacity(full);
            own.extend_from_slice(page);
            *page = Arc::new(own);
        }
        Arc::get_mut(page).expect("unshared")
    }

    /// Append `m` rows: `fill(dst, r0, n)` writes rows `r0..r0 + n` of the
    /// new ones into `dst` (`n × row` elements).
    fn append(&mut self, m: usize, mut fill: impl FnMut(&mut [T], usize, usize)) {
        let row = self.row;
        let mut done = 0;
        while done < m {
            let p = self.positions();
            let (i, off) = (p / KV_PAGE_POSITIONS, p % KV_PAGE_POSITIONS);
            if i == self.pages.len() {
                self.pages
                    .push(Arc::new(Vec::with_capacity(KV_PAGE_POSITIONS * row)));
            }
            let n = (KV_PAGE_POSITIONS - off).min(m - done);
            let page = self.page_mut(i);
            page.resize((off + n) * row, T::default());
            fill(&mut page[off * row..], done, n);
            done += n;
        }
    }

    fn truncate(&mut self, pos: usize) {
        if pos >= self.positions() {
            return;
        }
        self.pages.truncate(pos.div_ceil(KV_PAGE_POSITIONS));
        let off = pos % KV_PAGE_POSITIONS;
        if off > 0 {
            let row = self.row;
            let last = self.pages.len() - 1;
            self.page_mut(last).truncate(off * row);
        }
    }

    /// The rows of position `p` (held).
    fn at(&self, p: usize) -> &[T] {
        let off = (p % KV_PAGE_POSITIONS) * self.row;
        &self.pages[p / KV_PAGE_POSITIONS][off..off + self.row]
    }

    /// Every row, in order.
    fn concat(&self) -> Vec<T> {
        self.pages.iter().flat_map(|p| p.iter().copied()).collect()
    }

    /// Fill this empty store from rows in order.
    fn fill_from(&mut self, rows: &[T]) {
        let row = self.row;
        self.append(rows.len() / row, |dst, r0, n| {
            dst.copy_from_slice(&rows[r0 * row..(r0 + n) * row])
        });
    }

    /// Bytes of the pages (whole pages: they are allocated so).
    fn page_bytes(&self) -> usize {
        self.pages.len() * KV_PAGE_POSITIONS * self.row * std::mem::size_of::<T>()
    }

    /// Each page: its address (what identifies it across the holders that
    /// share it) and its bytes.
    fn each_page(&self, mut f: impl FnMut(usize, usize)) {
        let b = KV_PAGE_POSITIONS * self.row * std::mem::size_of::<T>();
        for p in &self.pages {
            f(Arc::as_ptr(p) as *const u8 as usize, b);
        }
    }
}

/// One side (K or V) of an attention layer's cache.
#[derive(Clone, Debug)]
pub(crate) struct KvStore {
    dtype: DType,
    /// Values per position (`n_head_kv × head_dim`).
    per_pos: usize,
    /// Walsh–Hadamard block the rows are rotated by before they are
    /// stored (1: not rotated).
    rotation: usize,
    /// The rows when the type is f32.
    values: Pages<f32>,
    /// The rows, encoded, for every other type.
    bytes: Pages<u8>,
    exact: Option<Box<ExactStore>>,
}

/// f16 copies of the sinks and of a ring of recent rows (per sequence:
/// small, and not shared).
#[derive(Clone, Debug)]
struct ExactStore {
    sinks: usize,
    window: usize,
    sink_rows: Vec<u8>,
    ring: Vec<u8>,
    /// Position `p` at slot `p % ring_rows`.
    ring_rows: usize,
}

impl KvStore {
    pub fn new(t: KvType, per_pos: usize, rotation: usize, kv: &KvConfig) -> KvStore {
        let exact = (t.keeps_exact_rows() && kv.sinks + kv.window > 0).then(|| {
            Box::new(ExactStore {
                sinks: kv.sinks,
                window: kv.window,
                sink_rows: Vec::new(),
                ring: Vec::new(),
                ring_rows: 0,
            })
        });
        KvStore {
            dtype: t.dtype(),
            per_pos,
            rotation: if kv.rotate && t.is_quantized() {
                rotation
            } else {
                1
            },
            values: Pages::new(per_pos),
            bytes: Pages::new(encoded_len(t.dtype(), per_pos)),
            exact,
        }
    }

    /// The Walsh–Hadamard block the caller rotates rows by before it
    /// appends them (1: none).
    pub fn rotation(&self) -> usize {
        self.rotation
    }

    /// Positions held.
    pub fn positions(&self) -> usize {
        if self.dtype == DType::F32 {
            self.values.positions()
        } else {
            self.bytes.positions()
        }
    }

    /// Bytes held: the pages (whole) and the f16 sinks and ring. Pages
    /// shared with other holders count here in full; [`each_page`]
    /// (Self::each_page) lets a caller count them once.
    pub fn bytes(&self) -> usize {
        self.values.page_bytes() + self.bytes.page_bytes() + self.unshared_bytes()
    }

    /// Bytes this store alone holds (the f16 sinks and ring).
    pub fn unshared_bytes(&self) -> usize {
        self.exact
            .as_ref()
            .map_or(0, |e| e.sink_rows.len() + e.ring.len())
    }

    /// Each page: `f(address, bytes)`.
    pub fn each_page(&self, mut f: impl FnMut(usize, usize)) {
        self.values.each_page(&mut f);
        self.bytes.each_page(&mut f);
    }

    /// Append the rows `new` (`per_pos` values each). Pages are allocated
    /// as the rows reach them, whatever the capacity.
    pub fn append(&mut self, new: &[f32], _capacity: usize) {
        let len = self.positions();
        let (m, per_pos, dtype) = (new.len() / self.per_pos, self.per_pos, self.dtype);
        if dtype == DType::F32 {
            self.values.append(m, |dst, r0, n| {
                dst.copy_from_slice(&new[r0 * per_pos..(r0 + n) * per_pos])
            });
        } else {
            self.bytes.append(m, |dst, r0, n| {
                encode(dtype, &new[r0 * per_pos..(r0 + n) * per_pos], dst)
            });
        }
        if let Some(e) = &mut self.exact {
            e.append(self.per_pos, len, new, m);
        }
    }

    /// The rows (and the f16 sinks and window ring) as bytes
    /// (`state_io.rs`), pages concatenated.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        use crate::state_io::{put_bytes, put_f32s, put_u64};
        put_f32s(out, &self.values.concat());
        put_bytes(out, &self.bytes.concat());
        match &self.exact {
            None => out.push(0),
            Some(e) => {
                out.push(1);
                put_u64(out, e.ring_rows as u64);
                put_bytes(out, &e.sink_rows);
                put_bytes(out, &e.ring);
            }
        }
    }

    /// Fill this empty store (made by [`new`](Self::new) for the same
    /// type and shape) from [`write_to`](Self::write_to)'s bytes, every
    /// length checked.
    pub(crate) fn read_from(&mut self, r: &mut crate::state_io::Reader) -> Result<(), String> {
        let (values, bytes) = (r.f32s()?, r.bytes()?);
        let row = encoded_len(self.dtype, self.per_pos);
        let ok = if self.dtype == DType::F32 {
            bytes.is_empty() && values.len().is_multiple_of(self.per_pos)
        } else {
            values.is_empty() && bytes.len().is_multiple_of(row)
        };
        if !ok {
            return Err("KV rows of another type or width".into());
        }
        self.values.fill_from(&values);
        self.bytes.fill_from(&bytes);
        let positions = self.positions();
        match (&mut self.exact, r.u8()?) {
            (None, 0) => Ok(()),
            (Some(e), 1) => {
                let row = 2 * self.per_pos;
                let ring_rows = r.usize()?;
                let (sinks, ring) = (r.bytes()?, r.bytes()?);
                let ring_ok = ring_rows.checked_mul(row) == Some(ring.len())
                    && (positions == 0 || e.window == 0 || ring_rows >= e.window - 1 + RING_SLACK);
                if sinks.len() != e.sinks.min(positions) * row || !ring_ok {
                    return Err("f16 sinks or window of another size".into());
                }
                (e.sink_rows, e.ring, e.ring_rows) = (sinks, ring, ring_rows);
                Ok(())
            }
            _ => Err(
                "f16 sinks and window where the KV type keeps none (or none where it does)".into(),
            ),
        }
    }

    /// Drop positions `pos..` (a shared page cut into is copied first).
    pub fn truncate(&mut self, pos: usize) {
        let len = self.positions();
        if pos >= len {
            return;
        }
        self.values.truncate(pos);
        self.bytes.truncate(pos);
        if let Some(e) = &mut self.exact {
            let row = 2 * self.per_pos;
            e.sink_rows.truncate(pos.min(e.sinks) * row);
            // Window rows older than the ring kept: made again from the
            // coded rows (only a truncation of more than RING_SLACK
            // positions past a full window gets here).
            let need = pos.saturating_sub(e.window.saturating_sub(1));
            let held = len.saturating_sub(e.ring_rows);
            let mut tmp = vec![0f32; self.per_pos];
            for p in need..held.min(pos) {
                rill_kernels::quant::dequantize_with(
                    rill_kernels::Isa::Scalar,
                    self.dtype,
                    self.bytes.at(p),
                    &mut tmp,
                );
                let s = p % e.ring_rows;
                encode(DType::F16, &tmp, &mut e.ring[s * row..(s + 1) * row]);
            }
        }
    }

    /// The view the attention kernel reads.
    pub fn side(&self) -> KvSide<'_> {
        let rows = if self.dtype == DType::F32 {
            KvRows::PagedF32 {
                pages: &self.values.pages,
                page_positions: KV_PAGE_POSITIONS,
            }
        } else {
            KvRows::PagedCoded {
                dtype: self.dtype,
                pages: &self.bytes.pages,
                page_positions: KV_PAGE_POSITIONS,
            }
        };
        let len = self.positions();
        KvSide {
            rows,
            exact: self.exact.as_ref().map(|e| ExactRows {
                sinks: e.sinks,
                sink_rows: &e.sink_rows,
                window: e.window,
                ring: &e.ring,
                ring_rows: e.ring_rows,
                len,
            }),
        }
    }
}

impl ExactStore {
    /// Keep f16 copies of the `m` rows `new` at positions `len..`.
    fn append(&mut self, per_pos: usize, len: usize, new: &[f32], m: usize) {
        let row = 2 * per_pos;
        // Sinks.
        let s_end = self.sinks.min(len + m);
        if s_end > len {
            let at = self.sink_rows.len();
            self.sink_rows.resize(s_end * row, 0);
            encode(
                DType::F16,
                &new[..(s_end - len) * per_pos],
                &mut self.sink_rows[at..],
            );
        }
        if self.window == 0 {
            return;
        }
        // The step's queries read keys back to `len − window + 1`.
        let need = self.window - 1 + m.max(RING_SLACK);
        if self.ring_rows < need {
            let rows = need.max(2 * self.ring_rows);
            let mut ring = vec![0u8; rows * row];
            for p in len.saturating_sub(self.ring_rows)..len {
                let (a, b) = (p % self.ring_rows, p % rows);
                ring[b * row..(b + 1) * row].copy_from_slice(&self.ring[a * row..(a + 1) * row]);
            }
            (self.ring, self.ring_rows) = (ring, rows);
        }
        for (i, x) in new.chunks_exact(per_pos).enumerate() {
            let s = (len + i) % self.ring_rows;
            encode(DType::F16, x, &mut self.ring[s * row..(s + 1) * row]);
        }
    }
}

/// An attention layer's cache: K and V.
#[derive(Clone, Debug)]
pub(crate) struct KvCache {
    pub k: KvStore,
    pub v: KvStore,
}

impl KvCache {
    pub fn new(model: &ModelConfig, kv: &KvConfig) -> KvCache {
        let (per_pos, hd) = (model.n_head_kv * model.head_dim, model.head_dim);
        KvCache {
            k: KvStore::new(kv.k, per_pos, hadamard_block(hd, 256), kv),
            v: KvStore::new(kv.v, per_pos, hadamard_block(hd, 64), kv),
        }
    }

    pub fn bytes(&self) -> usize {
        self.k.bytes() + self.v.bytes()
    }

    pub fn truncate(&mut self, pos: usize) {
        self.k.truncate(pos);
        self.v.truncate(pos);
    }

    /// Each page of K and V: `f(address, bytes)`.
    pub fn each_page(&self, mut f: impl FnMut(usize, usize)) {
        self.k.each_page(&mut f);
        self.v.each_page(&mut f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(seed: u32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 250.0 - 2.0)
            .collect()
    }

    fn decoded(side: &KvSide, per_pos: usize, p: usize, exact: bool) -> Vec<f32> {
        let mut out = vec![0f32; per_pos];
        match (exact, side.exact, side.rows) {
            (true, Some(e), _) => {
                let row = 2 * per_pos;
                let b = if p < e.sinks {
                    &e.sink_rows[p * row..(p + 1) * row]
                } else {
                    let s = p % e.ring_rows;
                    &e.ring[s * row..(s + 1) * row]
                };
                rill_kernels::quant::dequantize_with(
                    rill_kernels::Isa::Scalar,
                    DType::F16,
                    b,
                    &mut out,
                );
            }
            _ => {
                let (run, base) = side.rows.run_of(p);
                let p = p - base;
                match run {
                    KvRows::F32(v) => out.copy_from_slice(&v[p * per_pos..(p + 1) * per_pos]),
                    KvRows::Coded { dtype, bytes } => {
                        let b = encoded_len(dtype, per_pos);
                        rill_kernels::quant::dequantize_with(
                            rill_kernels::Isa::Scalar,
                            dtype,
                            &bytes[p * b..(p + 1) * b],
                            &mut out,
                        );
                    }
                    _ => unreachable!("a run is not paged"),
                }
            }
        }
        out
    }

    #[test]
    fn types_parse_by_llama_cpp_names() {
        for t in KvType::ALL {
            assert_eq!(t.name().parse::<KvType>(), Ok(t));
        }
        assert_eq!("Q8_0".parse::<KvType>(), Ok(KvType::Q8_0));
        let e = "q3_k".parse::<KvType>().unwrap_err();
        assert!(e.contains("q3_k") && e.contains("q4_0"), "{e}");
    }

    #[test]
    fn appends_in_steps_equal_one_append_and_truncation_drops_rows() {
        let per_pos = 64;
        let kv = KvConfig {
            sinks: 3,
            window: 10,
            ..KvConfig::uniform(KvType::Q4_0)
        };
        let all = rows(1, 300 * per_pos);
        let mut one = KvStore::new(KvType::Q4_0, per_pos, 1, &kv);
        one.append(&all, 300);
        let mut steps = KvStore::new(KvType::Q4_0, per_pos, 1, &kv);
        let mut p = 0;
        for m in [1usize, 5, 100, 1, 1, 93, 99].iter().cycle() {
            let m = (*m).min(300 - p);
            steps.append(&all[p * per_pos..(p + m) * per_pos], 300);
            p += m;
            if p == 300 {
                break;
            }
        }
        assert_eq!(one.positions(), 300);
        assert_eq!(steps.positions(), 300);
        let (a, b) = (one.side(), steps.side());
        for p in 0..300 {
            assert_eq!(
                decoded(&a, per_pos, p, false),
                decoded(&b, per_pos, p, false)
            );
        }
        // The sinks and the window's rows (as the next query reads them)
        // are the f16 values.
        for p in (0..3).chain(290..300) {
            let want: Vec<f32> = all[p * per_pos..(p + 1) * per_pos]
                .iter()
                .map(|&x| half::f16::from_f32(x).to_f32())
                .collect();
            assert_eq!(decoded(&b, per_pos, p, true), want, "position {p}");
        }
        // Dropping rows keeps the window for the new last position in f16,
        // also past the ring's slack (rows made again from the coded ones).
        for cut in [297usize, 100] {
            let mut t = steps.clone();
            t.truncate(cut);
            assert_eq!(t.positions(), cut);
            let s = t.side();
            for p in cut - 9..cut {
                let got = decoded(&s, per_pos, p, true);
                assert!(got.iter().all(|v| v.is_finite()));
                if cut == 297 {
                    assert_eq!(got, decoded(&b, per_pos, p, true), "position {p}");
                } else {
                    let lo = decoded(&b, per_pos, p, false);
                    let want: Vec<f32> = lo
                        .iter()
                        .map(|&x| half::f16::from_f32(x).to_f32())
                        .collect();
                    assert_eq!(got, want, "position {p}");
                }
            }
        }
    }

    #[test]
    fn bytes_follow_the_types() {
        let per_pos = 64;
        for t in [KvType::F32, KvType::F16, KvType::Q8_0, KvType::Q4_0] {
            let kv = KvConfig {
                sinks: 0,
                window: 0,
                ..KvConfig::uniform(t)
            };
            let mut s = KvStore::new(t, per_pos, 1, &kv);
            s.append(&rows(2, 10 * per_pos), 10);
            // Whole pages.
            assert_eq!(s.bytes(), t.bytes_for(KV_PAGE_POSITIONS * per_pos));
        }
        assert_eq!(KvType::Q8_0.bytes_for(64), 68);
        assert_eq!(KvType::Q4_0.bytes_for(64), 36);
    }
}
