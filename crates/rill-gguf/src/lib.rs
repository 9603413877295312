//! GGUF reader: header, metadata, tensor infos, memory-mapped tensor data, split files.
//!
//! Everything a file says is checked when it is opened (see [`GgufFile::open`]), so afterwards
//! [`GgufFile::tensor_data`] can hand out slices of the mapping without further checks.
//! Only GGUF versions 2 and 3, little-endian, are read.
//!
//! What is checked at open time: magic and version; every length and count against the bytes
//! left (nothing is allocated from an unchecked length); value types; bools are 0/1; strings
//! are UTF-8; no duplicate keys or tensor names; `general.alignment` is a power of two; at most
//! 4 dimensions and an element count that fits in int64; rows are whole blocks of the type;
//! offsets are aligned; data lies inside the file; tensors do not overlap.
//!
//! Tensors of a ggml type rill does not know are kept (with their raw id) so the rest of the
//! file stays usable, but they cannot be sized: only their offset is checked, `dtype()` and
//! [`GgufFile::try_tensor_data`] report them, and [`GgufFile::tensor_data`] gives an empty
//! slice for them.

mod cursor;
mod error;
mod header;
pub mod quant_mix;
mod split;
mod tensor;
mod value;
pub mod writer;

pub use error::GgufError;
pub use split::{KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT};
pub use tensor::{dtype_of_ggml_id, ggml_id_of, TensorInfo};
pub use value::{MetaValue, ValueType};

use header::{parse_header, Header};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The bytes of one file: mapped from disk, owned (for [`GgufFile::from_bytes`]), or
/// part of the program (for [`GgufFile::from_static`]).
enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
    Static(&'static [u8]),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
            Backing::Static(s) => s,
        }
    }
}

/// The granularity of [`GgufFile::release`]: a multiple of every page size
/// in use (4, 16 and 64 KiB), so the range it gives back is page-aligned.
const RELEASE_ALIGN: usize = 64 * 1024;

/// One file of a (possibly split) model.
struct Part {
    backing: Backing,
    data_start: u64,
    path: Option<PathBuf>,
}

/// An opened GGUF model: one file, or all the splits of a split model.
pub struct GgufFile {
    version: u32,
    alignment: u64,
    metadata: Vec<(String, MetaValue)>,
    meta_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    parts: Vec<Part>,
}

impl GgufFile {
    /// Let the mapped pages that lie wholly inside `bytes` (a slice of this
    /// file, e.g. tensor data the caller has copied) leave the process's
    /// memory; a later read maps them in again from the file. Owned and
    /// static files keep theirs. A hint: failures change nothing.
    pub fn release(&self, bytes: &[u8]) {
        let (start, end) = (
            bytes.as_ptr() as usize,
            bytes.as_ptr() as usize + bytes.len(),
        );
        for part in &self.parts {
            let Backing::Mmap(map) = &part.backing else {
                continue;
            };
            let base = map.as_ptr() as usize;
            if start < base || end > base + map.len() {
                continue;
            }
            let first = (start - base).div_ceil(RELEASE_ALIGN) * RELEASE_ALIGN;
            let last = (end - base) / RELEASE_ALIGN * RELEASE_ALIGN;
            if last > first {
                // SAFETY: a read-only mapping of the file: pages dropped
                // are read again from the file if touched, the same bytes.
                #[cfg(unix)]
                let _ = unsafe {
                    map.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        first,
                        last - first,
                    )
                };
            }
            return;
        }
    }

    /// Open a GGUF file. A split file (`name-00001-of-00003.gguf`, with `split.count` > 1 in
    /// its metadata) opens all its siblings from the same directory, whichever split `path`
    /// names; metadata comes from the first split and the tensor lists are merged in split order.
    ///
    /// The files are memory-mapped: they must not be modified while the `GgufFile` lives.
    pub fn open(path: &Path) -> Result<GgufFile, GgufError> {
        let (header, part) = read_part(path)?;
        let Some((no, count)) = split::split_position(&header).map_err(|e| e.in_file(path))? else {
            return assemble(vec![(header, part)]);
        };
        let paths = split::sibling_paths(path, no, count)?;
        let mut opened = Vec::with_capacity(paths.len());
        let mut this = Some((header, part));
        for (i, p) in paths.iter().enumerate() {
            let i = i as u64;
            if i == no {
                opened.extend(this.take());
                continue;
            }
            if !p.exists() {
                return Err(GgufError::MissingSplit {
                    path: p.clone(),
                    no: i + 1,
                    count,
                });
            }
            let (h, part) = read_part(p)?;
            check_position(&h, i, count).map_err(|e| e.in_file(p))?;
            opened.push((h, part));
        }
        assemble(opened)
    }

    /// Open exactly one file, without following split siblings (for inspecting one split).
    pub fn open_single(path: &Path) -> Result<GgufFile, GgufError> {
        let part = read_part(path)?;
        assemble(vec![part])
    }

    /// Parse a whole GGUF file held in memory. Like [`GgufFile::open_single`], a split file
    /// is read on its own (see [`GgufFile::split_position`]); use
    /// [`GgufFile::from_split_bytes`] for a whole split set.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        let header = parse_header(&bytes)?;
        let part = Part {
            backing: Backing::Owned(bytes),
            data_start: header.data_start,
            path: None,
        };
        assemble(vec![(header, part)])
    }

    /// Parse a GGUF file that is part of the program (`include_bytes!`), without copying
    /// it. Tensor data is read in place, so the bytes should start on a 64-byte boundary
    /// like a mapping's pages (the kernels' wide loads then do not split cache lines).
    pub fn from_static(bytes: &'static [u8]) -> Result<GgufFile, GgufError> {
        let header = parse_header(bytes)?;
        let part = Part {
            backing: Backing::Static(bytes),
            data_start: header.data_start,
            path: None,
        };
        assemble(vec![(header, part)])
    }

    /// Parse all splits of a split model held in memory, in split order.
    pub fn from_split_bytes(splits: Vec<Vec<u8>>) -> Result<GgufFile, GgufError> {
        let count = splits.len() as u64;
        if count == 0 {
            return Err(GgufError::Split("no split files given".into()));
        }
        let mut parts = Vec::with_capacity(splits.len());
        for (i, bytes) in splits.into_iter().enumerate() {
            let header = parse_header(&bytes)?;
            if count > 1 {
                check_position(&header, i as u64, count)?;
            }
            let part = Part {
                backing: Backing::Owned(bytes),
                data_start: header.data_start,
                path: None,
            };
            parts.push((header, part));
        }
        assemble(parts)
    }

    /// GGUF version of the (first) file: 2 or 3.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Data alignment of the (first) file (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Number of files the model was read from.
    pub fn n_splits(&self) -> usize {
        self.parts.len()
    }

    /// Paths of the files the model was read from (empty for in-memory files).
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.parts.iter().filter_map(|p| p.path.as_deref())
    }

    /// `(split.no, split.count)` of the first file read when it is one of several splits.
    /// Useful after [`GgufFile::open_single`] / [`GgufFile::from_bytes`], which do not
    /// follow siblings.
    pub fn split_position(&self) -> Option<(u64, u64)> {
        let count = self.get(KEY_SPLIT_COUNT)?.as_u64()?;
        let no = self.get(KEY_SPLIT_NO)?.as_u64()?;
        (count > 1).then_some((no, count))
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// All metadata entries, in file order.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &MetaValue)> {
        self.metadata.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// All tensors, in file order (splits in order).
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of a tensor, zero copy.
    ///
    /// Returns an empty slice for a tensor whose ggml type rill does not know (it cannot be
    /// sized; [`TensorInfo::dtype`] reports it). Panics if `info` does not describe a tensor
    /// of this file (a caller bug; nothing in a file can cause it).
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        match self.try_tensor_data(info) {
            Ok(data) => data,
            Err(GgufError::UnknownTensorType { .. }) => &[],
            Err(e) => panic!("GgufFile::tensor_data: {e}"),
        }
    }

    /// The bytes of a tensor, or an error when its type is unknown or `info` does not
    /// describe a tensor of this file.
    pub fn try_tensor_data(&self, info: &TensorInfo) -> Result<&[u8], GgufError> {
        let range = self.tensor_file_range(info)?;
        let bytes = self.parts[info.split].backing.bytes();
        // The range was checked against the file at open time; `get` keeps this panic-free
        // regardless.
        usize::try_from(range.start)
            .ok()
            .zip(usize::try_from(range.end).ok())
            .and_then(|(s, e)| bytes.get(s..e))
            .ok_or_else(|| GgufError::ForeignTensor(info.name.clone()))
    }

    /// Where a tensor's bytes lie in its split file (absolute byte offsets; the file is
    /// `paths().nth(info.split)` for files opened from disk). For readers that want to do
    /// their own I/O, and for cross-checks.
    pub fn tensor_file_range(&self, info: &TensorInfo) -> Result<std::ops::Range<u64>, GgufError> {
        // Use our own copy of the info so a modified clone cannot point anywhere else.
        let own = self
            .tensor(&info.name)
            .filter(|own| *own == info)
            .ok_or_else(|| GgufError::ForeignTensor(info.name.clone()))?;
        let size = own.size_bytes()?;
        // Validated at open time: this does not overflow.
        let start = self.parts[own.split].data_start + own.offset;
        Ok(start..start + size)
    }
}

/// Map and parse one file; errors name the file.
fn read_part(path: &Path) -> Result<(Header, Part), GgufError> {
    let io = |source| GgufError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let backing = if len == 0 {
        // Mapping an empty file fails on some platforms; the parser reports it properly.
        Backing::Owned(Vec::new())
    } else {
        // SAFETY: the mapping is read-only; like every mmap-based reader we rely on the file
        // not being truncated or rewritten while it is mapped (documented on `open`).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        // Ask for 2 MiB pages where the kernel and file system can give
        // them (large page-cache folios): decoding streams gigabytes of
        // weights per token, and with 4 KiB pages every few rows cost a TLB
        // miss and restart the hardware prefetcher (~20-30% of decode speed
        // measured on Q4_K). A hint: refused or unsupported changes nothing.
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::HugePage);
        Backing::Mmap(map)
    };
    let header = parse_header(backing.bytes()).map_err(|e| e.in_file(path))?;
    let part = Part {
        backing,
        data_start: header.data_start,
        path: Some(path.to_path_buf()),
    };
    Ok((header, part))
}

fn check_position(h: &Header, no: u64, count: u64) -> Result<(), GgufError> {
    match split::split_position(h)? {
        Some(pos) if pos == (no, count) => Ok(()),
        found => {
            let found = found.map_or("not a split file".to_string(), |(n, c)| {
                format!("split {} of {c}", n + 1)
            });
            Err(GgufError::Split(format!(
                "expected split {} of {count}, but the file says it is {found}",
                no + 1
            )))
        }
    }
}

/// Check each part's tensors against its data section and merge them into one model.
fn assemble(parts: Vec<(Header, Part)>) -> Result<GgufFile, GgufError> {
    let mut tensors = Vec::new();
    let mut tensor_index = HashMap::new();
    let mut metadata = Vec::new();
    let (mut version, mut alignment) = (0, 0);
    let mut out_parts = Vec::with_capacity(parts.len());
    for (i, (header, part)) in parts.into_iter().enumerate() {
        let locate = |e: GgufError| match &part.path {
            Some(p) => e.in_file(p),
            None => e,
        };
        let data_len = (part.backing.bytes().len() as u64).saturating_sub(header.data_start);
        tensor::check_layout(&header.tensors, header.alignment, data_len).map_err(locate)?;
        if i == 0 {
            version = header.version;
            alignment = header.alignment;
            metadata = header.metadata;
        }
        for mut t in header.tensors {
            t.split = i;
            if tensor_index.insert(t.name.clone(), tensors.len()).is_some() {
                return Err(locate(GgufError::DuplicateTensor(t.name)));
            }
            tensors.push(t);
        }
        out_parts.push(part);
    }
    let meta_index: HashMap<String, usize> = metadata
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (k.clone(), i))
        .collect();
    if out_parts.len() > 1 {
        if let Some(v) = meta_index
            .get(KEY_SPLIT_TENSORS_COUNT)
            .map(|&i| &metadata[i].1)
        {
            if v.as_u64() != Some(tensors.len() as u64) {
                return Err(GgufError::Split(format!(
                    "the first split says `{KEY_SPLIT_TENSORS_COUNT}` = {v:?}, but the splits hold {} tensors",
                    tensors.len()
                )));
            }
        }
    }
    Ok(GgufFile {
        version,
        alignment,
        metadata,
        meta_index,
        tensors,
        tensor_index,
        parts: out_parts,
    })
}

// A model is shared by every thread that runs it.
const _: fn() = || {
    fn check<T: Send + Sync>() {}
    check::<GgufFile>();
};
