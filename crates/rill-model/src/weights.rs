//! Typed views of the weights, bound to their bytes in the file.
//!
//! Matrices stay in their file encoding (memory-mapped, zero copy) and are
//! decoded inside the kernels — unless the run's kernels read another
//! layout of an encoding faster ([`LoadLayout`]): such a matrix is copied
//! once, rewritten, and its file pages let go. Only vectors (norm weights,
//! biases, decay constants — a few KB per layer) are decoded to f32 at
//! load time.

use std::cell::RefCell;

use crate::error::ModelError;
use crate::source::{Scales, TensorRef, WeightSource};
use rill_dtype::DType;
use rill_kernels::{layout, quant, Isa, MatRef, Precision};

/// Which encodings the bound matrices are held in, for the kernels of one
/// run (`rill_kernels::layout`). The default keeps every matrix as its file
/// stores it; [`LoadLayout::for_run`] rewrites those its kernels read
/// faster in another layout (the same values: any kernel class still
/// computes with the model, the others only slower).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LoadLayout {
    run: Option<(Isa, Precision)>,
}

impl LoadLayout {
    /// The layouts kernel class `kernels` reads fastest at `precision`.
    pub fn for_run(kernels: Isa, precision: Precision) -> LoadLayout {
        LoadLayout {
            run: Some((kernels, precision)),
        }
    }

    /// The encoding a matrix stored as `dtype` is rewritten into, if any;
    /// `granule`: the rows every slice the model takes of it starts at a
    /// multiple of (`rill_kernels::layout::load_layout`).
    pub fn target(&self, dtype: DType, granule: usize) -> Option<DType> {
        let (isa, precision) = self.run?;
        layout::load_layout(isa, precision, dtype, granule)
    }
}

/// Source bytes copied per step of a rewrite, each step's file pages let
/// go once it is done: the peak stays the file plus a step per core.
const REWRITE_STEP: usize = 16 << 20;

/// Bytes of one tensor inside a source the model keeps.
///
/// The source (`Arc<dyn WeightSource>`) is owned by the [`crate::Model`]
/// together with every `Bytes`, and a source keeps its bytes at one address
/// while it lives (a mapping, or the program's own data), so the pointer
/// stays valid for as long as the model does.
#[derive(Clone, Copy)]
pub(crate) struct Bytes {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the bytes are immutable, shared read-only by all threads.
unsafe impl Send for Bytes {}
unsafe impl Sync for Bytes {}

impl Bytes {
    fn of(s: &[u8]) -> Bytes {
        Bytes {
            ptr: s.as_ptr(),
            len: s.len(),
        }
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: see the type's documentation.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// A matrix's separate scale tensor ([`Scales`]), held like its [`Bytes`].
#[derive(Clone, Copy)]
enum StoredScales {
    None,
    Tiles {
        bytes: Bytes,
        dtype: DType,
        tile_rows: usize,
        tile_cols: usize,
        row0: usize,
    },
    Groups {
        bytes: Bytes,
        dtype: DType,
        group: usize,
        global: f32,
    },
    Rows {
        bytes: Bytes,
        block_rows: usize,
        row0: usize,
    },
}

impl StoredScales {
    fn of(s: Scales<'_>) -> StoredScales {
        match s {
            Scales::None => StoredScales::None,
            Scales::Tiles {
                data,
                dtype,
                tile_rows,
                tile_cols,
                row0,
            } => StoredScales::Tiles {
                bytes: Bytes::of(data),
                dtype,
                tile_rows,
                tile_cols,
                row0,
            },
            Scales::Groups {
                data,
                dtype,
                group,
                global,
            } => StoredScales::Groups {
                bytes: Bytes::of(data),
                dtype,
                group,
                global,
            },
            Scales::Rows {
                data,
                block_rows,
                row0,
            } => StoredScales::Rows {
                bytes: Bytes::of(data),
                block_rows,
                row0,
            },
        }
    }

    fn view(&self) -> Scales<'_> {
        match *self {
            StoredScales::None => Scales::None,
            StoredScales::Tiles {
                ref bytes,
                dtype,
                tile_rows,
                tile_cols,
                row0,
            } => Scales::Tiles {
                data: bytes.as_slice(),
                dtype,
                tile_rows,
                tile_cols,
                row0,
            },
            StoredScales::Groups {
                ref bytes,
                dtype,
                group,
                global,
            } => Scales::Groups {
                data: bytes.as_slice(),
                dtype,
                group,
                global,
            },
            StoredScales::Rows {
                ref bytes,
                block_rows,
                row0,
            } => Scales::Rows {
                data: bytes.as_slice(),
                block_rows,
                row0,
            },
        }
    }

    fn byte_len(&self) -> usize {
        match self {
            StoredScales::None => 0,
            StoredScales::Tiles { bytes, .. }
            | StoredScales::Groups { bytes, .. }
            | StoredScales::Rows { bytes, .. } => bytes.len,
        }
    }
}

/// A 2-D weight: `rows` output features of `cols` inputs each.
pub(crate) struct Matrix {
    pub dtype: DType,
    pub rows: usize,
    pub cols: usize,
    bytes: Bytes,
    scales: StoredScales,
}

impl Matrix {
    pub fn view(&self) -> MatRef<'_> {
        MatRef {
            scales: self.scales.view(),
            ..MatRef::new(self.dtype, self.rows, self.cols, self.bytes.as_slice())
        }
    }

    /// Bytes of the encoded matrix and its scales.
    pub fn byte_len(&self) -> usize {
        self.bytes.len + self.scales.byte_len()
    }
}

/// A stack of expert matrices: one tensor `[cols, rows, n_expert]` (ggml
/// order), or one `[cols, rows]` tensor per expert (a Hugging Face
/// checkpoint's `experts.{e}.*`), each read where it lies.
pub(crate) enum Experts {
    Stacked { all: Matrix, rows: usize },
    PerExpert(Vec<Matrix>),
}

impl Experts {
    /// Bytes of one expert's matrix.
    pub fn bytes_per_expert(&self) -> usize {
        match self {
            Experts::Stacked { all, rows } => all.byte_len() / (all.rows / rows.max(&1)).max(1),
            Experts::PerExpert(parts) => parts.first().map_or(0, Matrix::byte_len),
        }
    }

    pub fn expert(&self, e: usize) -> MatRef<'_> {
        match self {
            Experts::Stacked { all, rows } => all.view().slice_rows(e * rows, (e + 1) * rows),
            Experts::PerExpert(parts) => parts[e].view(),
        }
    }

    /// Expert `e`, rows `start..end` (a fused gate/up tensor holds both halves).
    pub fn expert_rows(&self, e: usize, start: usize, end: usize) -> MatRef<'_> {
        match self {
            Experts::Stacked { all, rows } => {
                all.view().slice_rows(e * rows + start, e * rows + end)
            }
            Experts::PerExpert(parts) => parts[e].view().slice_rows(start, end),
        }
    }
}

/// Decode a 1-D tensor of `n` values to f32. Accepts `[n]` or `[1, n]`-like
/// shapes with the same element count (converters squeeze differently).
pub(crate) fn decode_vector(t: &TensorRef, n: usize) -> Result<Vec<f32>, ModelError> {
    let count: u64 = t.shape.iter().product();
    let want = [n as u64];
    let flat = TensorRef {
        shape: if count == n as u64 { &want } else { t.shape },
        ..*t
    };
    check(&flat, &want)?;
    if t.scales != Scales::None {
        return Err(ModelError::UnsupportedType {
            name: t.name.into(),
            dtype: t.dtype,
        });
    }
    if !n.is_multiple_of(t.dtype.block_len())
        || t.data.len() != t.dtype.bytes_for(n as u64).unwrap_or(0) as usize
    {
        return Err(ModelError::BadShape {
            name: t.name.into(),
            got: t.shape.to_vec(),
            want: want.to_vec(),
        });
    }
    let mut out = vec![0f32; n];
    // Small tensors, decoded once at load: the scalar decoder (every
    // kernel class gives its bits) keeps loading free of a class choice.
    quant::dequantize_with(Isa::Scalar, t.dtype, t.data, &mut out);
    Ok(out)
}

fn check(t: &TensorRef, want: &[u64]) -> Result<DType, ModelError> {
    if t.shape != want {
        return Err(ModelError::BadShape {
            name: t.name.to_string(),
            got: t.shape.to_vec(),
            want: want.to_vec(),
        });
    }
    // Separate scales come only with the codes of checkpoints that have
    // them; output scales (GGUF NVFP4's `.scale`) with any matrix.
    let scaled_codes = matches!(t.dtype, DType::F8E4M3 | DType::E2M1);
    let plain = matches!(t.scales, Scales::None | Scales::Rows { .. });
    if !quant::is_supported(t.dtype) || (!plain && !scaled_codes) {
        return Err(ModelError::UnsupportedType {
            name: t.name.to_string(),
            dtype: t.dtype,
        });
    }
    Ok(t.dtype)
}

/// Looks tensors up by name, checks shapes and types, and binds them.
pub(crate) struct Binder<'a> {
    pub source: &'a dyn WeightSource,
    pub layout: LoadLayout,
    /// The bytes of the matrices rewritten for `layout` (each at a fixed
    /// address: the mappings move, their pages do not); the model keeps them.
    pub rewritten: RefCell<Vec<memmap2::MmapMut>>,
}

impl Binder<'_> {
    /// Tensor `t` (of ggml shape `shape`) as a `rows × cols` matrix, in the
    /// layout `layout` wants for it when `products` (a matrix the kernels
    /// multiply by, not a table whose rows are looked up) is `Some(granule)`:
    /// the rows every slice the model takes of it starts at a multiple of.
    fn bind(
        &self,
        t: &TensorRef,
        shape: &[u64],
        rows: usize,
        cols: usize,
        products: Option<usize>,
    ) -> Result<Matrix, ModelError> {
        let dtype = check(t, shape)?;
        let target = products
            .filter(|_| t.scales == Scales::None)
            .and_then(|granule| self.layout.target(dtype, granule));
        let (dtype, bytes) = match target {
            Some(to) => (to, self.rewrite(t, to, cols)?),
            None => (dtype, Bytes::of(t.data)),
        };
        Ok(Matrix {
            dtype,
            rows,
            cols,
            bytes,
            scales: StoredScales::of(t.scales),
        })
    }

    /// A copy of `t`'s data rewritten as `to`, the file's pages let go a
    /// step at a time as they are copied. The copy lies in anonymous
    /// memory on 2 MiB pages where the kernel gives them, as the file's
    /// mapping asks (with 4 KiB pages, TLB misses cost a decode 20-30%).
    fn rewrite(&self, t: &TensorRef, to: DType, cols: usize) -> Result<Bytes, ModelError> {
        let n = t.data.len();
        let rb = cols / t.dtype.block_len() * t.dtype.block_bytes();
        let bb = layout::unit_bytes(to, rb);
        let mut map =
            memmap2::MmapMut::map_anon(n.max(1)).map_err(|_| ModelError::OutOfMemory {
                name: t.name.to_string(),
                dtype: to,
                bytes: n,
            })?;
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::HugePage);
        let step = (REWRITE_STEP / bb * bb).max(bb);
        // Steps shared out to the cores (a model's Q6_K matrices are
        // gigabytes): each copies, rewrites and lets go of one step at a time.
        let steps: Vec<(&[u8], &mut [u8])> =
            t.data.chunks(step).zip(map.chunks_mut(step)).collect();
        let next = std::sync::Mutex::new(steps.into_iter());
        let whole = std::sync::atomic::AtomicBool::new(true);
        let workers = std::thread::available_parallelism().map_or(1, |c| c.get().min(8));
        let source = self.source;
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| {
                    let take = || next.lock().map_or(None, |mut it| it.next());
                    while let Some((src, dst)) = take() {
                        dst.copy_from_slice(src);
                        if !layout::rewrite(t.dtype, to, rb, dst) {
                            whole.store(false, std::sync::atomic::Ordering::Relaxed);
                        }
                        source.release(src);
                    }
                });
            }
        });
        if !whole.into_inner() {
            return Err(ModelError::Inconsistent(format!(
                "{}: {n} bytes are not whole {} blocks",
                t.name, t.dtype
            )));
        }
        let bytes = Bytes::of(&map[..n]);
        self.rewritten.borrow_mut().push(map);
        Ok(bytes)
    }

    /// A `rows × cols` table whose rows are looked up (an embedding), kept
    /// as the file stores it whatever the layout: a lookup reads a few rows.
    pub fn table(&self, name: &str, rows: usize, cols: usize) -> Result<Matrix, ModelError> {
        self.named(name, rows, cols, None)
    }

    /// Tensor `name` as a `rows × cols` matrix (ggml shape `[cols, rows]`),
    /// as [`Self::bind`] holds it.
    fn named(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        products: Option<usize>,
    ) -> Result<Matrix, ModelError> {
        let shape = [cols as u64, rows as u64];
        self.bind(&self.get(name)?, &shape, rows, cols, products)
    }

    pub fn has(&self, name: &str) -> Result<bool, ModelError> {
        Ok(self.source.tensor(name)?.is_some())
    }

    fn get(&self, name: &str) -> Result<TensorRef<'_>, ModelError> {
        self.source
            .tensor(name)?
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))
    }

    /// The shape of a tensor (ggml order), if present; a per-expert list
    /// has the stacked shape `[.., n_expert]`.
    pub fn shape(&self, name: &str) -> Result<Option<Vec<u64>>, ModelError> {
        if let Some(t) = self.source.tensor(name)? {
            return Ok(Some(t.shape.to_vec()));
        }
        Ok(self.source.expert_tensors(name)?.and_then(|parts| {
            let mut shape = parts.first()?.shape.to_vec();
            shape.push(parts.len() as u64);
            Some(shape)
        }))
    }

    /// A `rows × cols` matrix (ggml shape `[cols, rows]`).
    pub fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Matrix, ModelError> {
        self.named(name, rows, cols, Some(rows))
    }

    /// A `rows × cols` matrix used as parts of `part_rows` rows each (a
    /// fused projection the model slices).
    pub fn matrix_parts(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
        part_rows: usize,
    ) -> Result<Matrix, ModelError> {
        self.named(name, rows, cols, Some(part_rows))
    }

    /// `n_expert` stacked `rows × cols` matrices (ggml shape `[cols, rows, n_expert]`).
    pub fn experts(
        &self,
        name: &str,
        n_expert: usize,
        rows: usize,
        cols: usize,
    ) -> Result<Experts, ModelError> {
        self.stacked(name, n_expert, rows, cols, Some(rows))
    }

    /// [`Self::experts`] whose matrices are used as parts of `part_rows`
    /// rows each (a fused gate/up tensor: its halves).
    pub fn expert_parts(
        &self,
        name: &str,
        n_expert: usize,
        rows: usize,
        cols: usize,
        part_rows: usize,
    ) -> Result<Experts, ModelError> {
        self.stacked(name, n_expert, rows, cols, Some(part_rows))
    }

    /// A lookup table stored in `parts` stacked parts of `rows × cols` (as
    /// [`Self::experts`]), kept as the file stores it (see [`Self::table`]).
    pub fn table_parts(
        &self,
        name: &str,
        parts: usize,
        rows: usize,
        cols: usize,
    ) -> Result<Experts, ModelError> {
        self.stacked(name, parts, rows, cols, None)
    }

    fn stacked(
        &self,
        name: &str,
        n_expert: usize,
        rows: usize,
        cols: usize,
        products: Option<usize>,
    ) -> Result<Experts, ModelError> {
        if let Some(parts) = self.source.expert_tensors(name)? {
            if parts.len() != n_expert {
                return Err(ModelError::Inconsistent(format!(
                    "{name}: {} experts stored, {n_expert} expected",
                    parts.len()
                )));
            }
            let shape = [cols as u64, rows as u64];
            let mats = parts
                .iter()
                .map(|t| self.bind(t, &shape, rows, cols, products))
                .collect::<Result<Vec<_>, ModelError>>()?;
            return Ok(Experts::PerExpert(mats));
        }
        let shape = [cols as u64, rows as u64, n_expert as u64];
        Ok(Experts::Stacked {
            all: self.bind(&self.get(name)?, &shape, rows * n_expert, cols, products)?,
            rows,
        })
    }

    /// A vector of `n` values, decoded to f32 (with the source's transforms).
    pub fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, ModelError> {
        self.source.vector(name, n)
    }

    /// The raw f32 contents of a small tensor with exactly `shape`.
    pub fn small(&self, name: &str, shape: &[u64]) -> Result<Vec<f32>, ModelError> {
        let t = self.get(name)?;
        let dtype = check(&t, shape)?;
        if t.scales != Scales::None {
            return Err(ModelError::UnsupportedType {
                name: name.into(),
                dtype,
            });
        }
        let n: u64 = shape.iter().product();
        let mut out = vec![0f32; n as usize];
        // As `decode_vector`: the scalar decoder, any class's bits.
        quant::dequantize_with(Isa::Scalar, dtype, t.data, &mut out);
        Ok(out)
    }
}
