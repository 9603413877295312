//! A Hugging Face model folder as a weight source: `config.json` and the
//! (sharded) safetensors files, memory-mapped and read in place.
//!
//! Each file's tensors are mapped onto rill's canonical names at open time
//! ([`names`]); matrices are handed to the binder as they are stored (the
//! safetensors `[out, in]` row-major layout is ggml's `[in, out]`), the few
//! small vectors that need a transform (`1 + w` norms, `−exp(A_log)`) are
//! decoded to f32 with it, and per-expert tensors are handed out as a list
//! the binder stacks without copying.

pub mod config;
pub mod names;
pub mod quant;
pub mod to_gguf;

use super::{Scales, TensorRef, WeightSource};
use crate::config::ModelConfig;
use crate::error::ModelError;
use config::HfConfig;
use memmap2::Mmap;
use names::{Target, Transform};
use rill_dtype::DType;
use safetensors::{Dtype, SafeTensorError, SafeTensors};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One safetensors file of the folder, mapped.
struct Shard {
    /// The file name inside the folder.
    name: String,
    map: Mmap,
}

/// A tensor the model may read.
#[derive(Debug)]
struct Entry {
    /// `NAME' in 'FILE`: how messages name it.
    label: String,
    shard: usize,
    dtype: DType,
    /// ggml order (the file's shape reversed), conv taps squeezed.
    shape: Vec<u64>,
    /// Bytes in the shard's mapping.
    bytes: Range<usize>,
    scales: Option<EntryScales>,
    transform: Transform,
}

/// Where a weight's separate scales lie, and how they apply.
#[derive(Debug)]
struct EntryScales {
    shard: usize,
    bytes: Range<usize>,
    dtype: DType,
    kind: ScaleKind,
}

#[derive(Clone, Copy, Debug)]
enum ScaleKind {
    Tiles { rows: usize, cols: usize },
    Groups { group: usize, global: f32 },
}

/// A tensor as its file lists it.
struct Raw {
    name: String,
    shard: usize,
    file: String,
    dtype: Dtype,
    /// The file's order (outermost first).
    shape: Vec<u64>,
    /// Bytes in the shard's mapping.
    bytes: Range<usize>,
}

enum Slot {
    Whole(Entry),
    /// Per-expert tensors of one stack, by expert index.
    Experts(Vec<Option<Entry>>),
}

/// One tensor of the folder as `rill inspect` lists it.
#[derive(Clone, Debug)]
pub struct HfTensor {
    pub name: String,
    pub file: String,
    /// The safetensors dtype (`BF16`, `F8_E4M3`).
    pub dtype: String,
    /// The file's order (outermost first).
    pub shape: Vec<u64>,
    pub bytes: u64,
    /// The canonical name it binds to, or why it is not used.
    pub used_as: Result<String, String>,
}

/// A Hugging Face folder, opened.
pub struct HfSource {
    dir: PathBuf,
    config: HfConfig,
    scheme: quant::Scheme,
    shards: Vec<Shard>,
    slots: HashMap<String, Slot>,
    tensors: Vec<HfTensor>,
}

fn file_err(file: &Path, why: impl Into<String>) -> ModelError {
    ModelError::Checkpoint {
        file: file.display().to_string(),
        why: why.into(),
    }
}

fn read_text(path: &Path) -> Result<String, ModelError> {
    std::fs::read_to_string(path).map_err(|e| file_err(path, format!("cannot read: {e}")))
}

/// The rill encoding of a safetensors dtype the kernels read as stored.
fn plain_dtype(d: Dtype) -> Option<DType> {
    match d {
        Dtype::F32 => Some(DType::F32),
        Dtype::F16 => Some(DType::F16),
        Dtype::BF16 => Some(DType::BF16),
        _ => None,
    }
}

impl HfSource {
    /// Open the folder `dir`: its `config.json`, its index (when sharded)
    /// and every safetensors file.
    pub fn open(dir: &Path) -> Result<HfSource, ModelError> {
        let config_path = dir.join("config.json");
        if !config_path.is_file() {
            return Err(file_err(
                &config_path,
                "missing: a Hugging Face model folder has a config.json",
            ));
        }
        let config_label = config_path.display().to_string();
        let mut config = config::parse(&read_text(&config_path)?, &config_label)?;
        let modelopt_path = dir.join("hf_quant_config.json");
        let modelopt: Option<Value> = match modelopt_path.is_file() {
            true => Some(
                serde_json::from_str(&read_text(&modelopt_path)?)
                    .map_err(|e| file_err(&modelopt_path, format!("not valid JSON: {e}")))?,
            ),
            false => None,
        };
        let scheme = quant::scheme(
            config.quantization.as_ref(),
            modelopt.as_ref(),
            &config_label,
        )?;
        let (files, index) = shard_files(dir)?;
        let n_layer = config.model.n_layer;

        // Pass 1: every tensor of every file (a weight's scales may lie in
        // another shard).
        let mut shards = Vec::with_capacity(files.len());
        let mut raws: Vec<Raw> = Vec::new();
        for file in &files {
            let path = dir.join(file);
            let shard = open_shard(&path, file, index.as_ref())?;
            let (header, meta) = SafeTensors::read_metadata(&shard.map)
                .map_err(|e| shard_error(&path, &shard.map, e))?;
            let base = 8 + header;
            let mut infos: Vec<_> = meta.tensors().into_iter().collect();
            infos.sort_by(|a, b| a.0.cmp(&b.0));
            for (name, info) in infos {
                if let Some(ix) = &index {
                    if ix.get(&name).is_some_and(|f| f != file) {
                        return Err(file_err(
                            &path,
                            format!(
                                "holds tensor '{name}', which model.safetensors.index.json places in {}",
                                ix[&name]
                            ),
                        ));
                    }
                }
                let (start, end) = info.data_offsets;
                raws.push(Raw {
                    name,
                    shard: shards.len(),
                    file: file.clone(),
                    dtype: info.dtype,
                    shape: info.shape.iter().map(|&d| d as u64).collect(),
                    bytes: base + start..base + end,
                });
            }
            shards.push(shard);
        }
        if let Some(ix) = &index {
            let present: BTreeSet<&str> = raws.iter().map(|t| t.name.as_str()).collect();
            if let Some((name, file)) = ix.iter().find(|(n, _)| !present.contains(n.as_str())) {
                return Err(file_err(
                    &dir.join(file),
                    format!("model.safetensors.index.json places tensor '{name}' here, but the file does not hold it"),
                ));
            }
        }
        let by_name: HashMap<&str, &Raw> = raws.iter().map(|r| (r.name.as_str(), r)).collect();

        // Pass 2: map names, attach scales.
        let mut slots: HashMap<String, Slot> = HashMap::new();
        let mut tensors = Vec::with_capacity(raws.len());
        for raw in &raws {
            let name = raw.name.as_str();
            let path = dir.join(&raw.file);
            let companion = quant::companion_of(name);
            // compressed-tensors names the codes `X.weight_packed`
            let weight_name = match name.strip_suffix(".weight_packed") {
                Some(base) => format!("{base}.weight"),
                None => name.to_string(),
            };
            let target = match companion {
                Some(_) => Target::Skip("a scale"),
                None => names::map(&weight_name, n_layer, config.tied),
            };
            let used_as = match (&target, companion) {
                (_, Some((_, suffix))) if quant::is_activation_scale(suffix) => Err(
                    "an activation scale (W4A4): rill keeps its own activation precision"
                        .to_string(),
                ),
                (_, Some((base, _))) => Ok(format!("scales of {base}")),
                (Target::Tensor { name: c, .. }, None) => Ok(c.clone()),
                (Target::Expert { name: c, expert }, None) => Ok(format!("{c} (expert {expert})")),
                (Target::Skip(why), None) => Err(why.to_string()),
                (Target::Unknown, None) => Err("not a tensor rill knows".to_string()),
            };
            tensors.push(HfTensor {
                name: name.to_string(),
                file: raw.file.clone(),
                dtype: raw.dtype.to_string(),
                shape: raw.shape.clone(),
                bytes: (raw.bytes.end - raw.bytes.start) as u64,
                used_as,
            });
            let (canonical, transform, expert) = match target {
                Target::Tensor { name, transform } => (name, transform, None),
                Target::Expert { name, expert } => (name, Transform::None, Some(expert)),
                Target::Skip(_) | Target::Unknown => continue,
            };
            let base = weight_name.strip_suffix(".weight").unwrap_or(&weight_name);
            let (dtype, shape_hf, scales) = encoding(raw, base, &by_name, &shards, scheme, &path)?;
            let mut shape: Vec<u64> = shape_hf.iter().rev().copied().collect();
            if transform == Transform::Squeeze && shape.len() == 3 && shape[1] == 1 {
                shape.remove(1);
            }
            let entry = Entry {
                label: format!("{name}' in '{}", raw.file),
                shard: raw.shard,
                dtype,
                shape,
                bytes: raw.bytes.clone(),
                scales,
                transform,
            };
            insert(&mut slots, canonical, expert, entry, &path)?;
        }
        // The MTP head binds when the folder holds its weights (some
        // releases declare it and drop the tensors).
        let mtp_prefix = format!("blk.{n_layer}.");
        if slots.keys().any(|k| k.starts_with(&mtp_prefix)) {
            // One head: layers past the first are skipped by the name map.
            config.model.n_nextn = 1;
        }
        Ok(HfSource {
            dir: dir.to_path_buf(),
            config,
            scheme,
            shards,
            slots,
            tensors,
        })
    }

    /// How the folder is quantized.
    pub fn scheme(&self) -> quant::Scheme {
        self.scheme
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What `config.json` says.
    pub fn hf_config(&self) -> &HfConfig {
        &self.config
    }

    /// Every tensor of every file, in file order then name order.
    pub fn tensors(&self) -> &[HfTensor] {
        &self.tensors
    }

    /// The safetensors files, by name.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.shards.iter().map(|s| s.name.as_str())
    }

    /// Every mapped byte, file by file (to read the pages ahead of use).
    pub fn mapped(&self) -> impl Iterator<Item = &[u8]> {
        self.shards.iter().map(|s| &s.map[..])
    }

    fn entry_ref<'a>(&'a self, e: &'a Entry) -> TensorRef<'a> {
        let scales = match &e.scales {
            None => Scales::None,
            Some(s) => {
                let data = &self.shards[s.shard].map[s.bytes.clone()];
                match s.kind {
                    ScaleKind::Tiles { rows, cols } => Scales::Tiles {
                        data,
                        dtype: s.dtype,
                        tile_rows: rows,
                        tile_cols: cols,
                        row0: 0,
                    },
                    ScaleKind::Groups { group, global } => Scales::Groups {
                        data,
                        dtype: s.dtype,
                        group,
                        global,
                    },
                }
            }
        };
        TensorRef {
            name: &e.label,
            dtype: e.dtype,
            shape: &e.shape,
            data: &self.shards[e.shard].map[e.bytes.clone()],
            scales,
        }
    }
}

/// The rill encoding of a scale tensor.
fn scale_dtype(d: Dtype) -> Option<DType> {
    match d {
        Dtype::F8_E4M3 => Some(DType::F8E4M3),
        other => plain_dtype(other),
    }
}

/// The encoding of weight `raw` (`base`: its name without `.weight`), its
/// shape in elements (file order) and its scales: as stored for F32 / F16
/// / BF16, with its companions for FP8 and NVFP4 codes.
fn encoding(
    raw: &Raw,
    base: &str,
    by_name: &HashMap<&str, &Raw>,
    shards: &[Shard],
    scheme: quant::Scheme,
    path: &Path,
) -> Result<(DType, Vec<u64>, Option<EntryScales>), ModelError> {
    let err = |tensor: &str, why: String| ModelError::CheckpointTensor {
        file: path.display().to_string(),
        tensor: tensor.to_string(),
        why,
    };
    if let Some(d) = plain_dtype(raw.dtype) {
        return Ok((d, raw.shape.clone(), None));
    }
    let companion = |suffix: &str| by_name.get(format!("{base}.{suffix}").as_str()).copied();
    let matrix = |shape: &[u64]| -> Result<(usize, usize), ModelError> {
        match shape {
            [o, i] => Ok((*o as usize, *i as usize)),
            _ => Err(err(
                &raw.name,
                format!("a quantized weight of shape {shape:?}, not 2-D"),
            )),
        }
    };
    let scale_of = |s: &Raw, kind: ScaleKind, want: u64| -> Result<EntryScales, ModelError> {
        let dtype = scale_dtype(s.dtype)
            .ok_or_else(|| err(&s.name, format!("scales of dtype {}", s.dtype)))?;
        let count: u64 = s.shape.iter().product();
        if count != want || dtype.bytes_for(want) != Some((s.bytes.end - s.bytes.start) as u64) {
            return Err(err(
                &s.name,
                format!(
                    "{count} scales of shape {:?} for '{}' (expected {want})",
                    s.shape, raw.name
                ),
            ));
        }
        Ok(EntryScales {
            shard: s.shard,
            bytes: s.bytes.clone(),
            dtype,
            kind,
        })
    };
    match raw.dtype {
        Dtype::F8_E4M3 => {
            let (o, i) = matrix(&raw.shape)?;
            if let Some(s) = companion("weight_scale_inv") {
                let (br, bc) = match scheme {
                    quant::Scheme::Fp8 { block } => block,
                    _ => (128, 128),
                };
                let want = (o.div_ceil(br) * i.div_ceil(bc)) as u64;
                let sc = scale_of(s, ScaleKind::Tiles { rows: br, cols: bc }, want)?;
                return Ok((DType::F8E4M3, raw.shape.clone(), Some(sc)));
            }
            if let Some(s) = companion("weight_scale") {
                // ModelOpt FP8: one scale for the whole tensor, one tile.
                let sc = scale_of(s, ScaleKind::Tiles { rows: o.max(1), cols: i.max(1) }, 1)?;
                return Ok((DType::F8E4M3, raw.shape.clone(), Some(sc)));
            }
            Err(err(&raw.name, "an F8_E4M3 weight without its weight_scale_inv or weight_scale".into()))
        }
        Dtype::U8 => {
            let (o, half) = matrix(&raw.shape)?;
            let i = 2 * half;
            let s = companion("weight_scale").ok_or_else(|| {
                err(&raw.name, "packed FP4 codes without their weight_scale".into())
            })?;
            let n_groups = match s.shape[..] {
                [so, sg] if so as usize == o && sg > 0 && i % sg as usize == 0 => sg as usize,
                _ => {
                    return Err(err(
                        &s.name,
                        format!("NVFP4 scales of shape {:?} for codes of shape [{o}, {half}]", s.shape),
                    ))
                }
            };
            let global = match (companion("weight_scale_2"), companion("weight_global_scale")) {
                (Some(g), _) => read_scalar(g, shards).map_err(|why| err(&g.name, why))?,
                // compressed-tensors stores the reciprocal
                (None, Some(g)) => 1.0 / read_scalar(g, shards).map_err(|why| err(&g.name, why))?,
                (None, None) => {
                    return Err(err(
                        &raw.name,
                        "NVFP4 codes without weight_scale_2 or weight_global_scale".into(),
                    ))
                }
            };
            let kind = ScaleKind::Groups {
                group: i / n_groups,
                global,
            };
            let sc = scale_of(s, kind, (o * n_groups) as u64)?;
            Ok((DType::E2M1, vec![o as u64, i as u64], Some(sc)))
        }
        other => Err(err(
            &raw.name,
            format!("dtype {other}: rill reads F32, F16, BF16, F8_E4M3 (FP8) and packed U8 (NVFP4) weights"),
        )),
    }
}

/// The value of a one-element F32 / BF16 / F16 tensor.
fn read_scalar(t: &Raw, shards: &[Shard]) -> Result<f32, String> {
    let count: u64 = t.shape.iter().product();
    let d = plain_dtype(t.dtype).filter(|_| count == 1).ok_or_else(|| {
        format!(
            "a global scale must be one F32 / BF16 / F16 value, not {} {:?}",
            t.dtype, t.shape
        )
    })?;
    let mut v = [0f32];
    rill_kernels::quant::dequantize_with(
        rill_kernels::Isa::Scalar,
        d,
        &shards[t.shard].map[t.bytes.clone()],
        &mut v,
    );
    Ok(v[0])
}

/// Put `entry` in its slot; two tensors for one place is an error.
fn insert(
    slots: &mut HashMap<String, Slot>,
    canonical: String,
    expert: Option<usize>,
    entry: Entry,
    path: &Path,
) -> Result<(), ModelError> {
    let twice = |label: &str| file_err(path, format!("a second tensor for '{label}'"));
    match expert {
        None => {
            if slots.contains_key(&canonical) {
                return Err(twice(&canonical));
            }
            slots.insert(canonical, Slot::Whole(entry));
        }
        Some(e) => {
            let slot = slots
                .entry(canonical.clone())
                .or_insert_with(|| Slot::Experts(Vec::new()));
            let Slot::Experts(list) = slot else {
                return Err(twice(&canonical));
            };
            if list.len() <= e {
                list.resize_with(e + 1, || None);
            }
            if list[e].is_some() {
                return Err(twice(&format!("{canonical} expert {e}")));
            }
            list[e] = Some(entry);
        }
    }
    Ok(())
}

/// The weight files, and the index's tensor → file map when sharded.
#[allow(clippy::type_complexity)]
fn shard_files(dir: &Path) -> Result<(Vec<String>, Option<HashMap<String, String>>), ModelError> {
    let index_path = dir.join("model.safetensors.index.json");
    if index_path.is_file() {
        let v: Value = serde_json::from_str(&read_text(&index_path)?)
            .map_err(|e| file_err(&index_path, format!("not valid JSON: {e}")))?;
        let map = v
            .get("weight_map")
            .and_then(Value::as_object)
            .ok_or_else(|| file_err(&index_path, "no `weight_map` object"))?;
        let mut index = HashMap::with_capacity(map.len());
        for (name, file) in map {
            let file = file
                .as_str()
                .filter(|f| !f.contains('/') && !f.contains('\\') && f.ends_with(".safetensors"))
                .ok_or_else(|| {
                    file_err(
                        &index_path,
                        format!(
                            "tensor '{name}' maps to {file}, not a .safetensors file of the folder"
                        ),
                    )
                })?;
            index.insert(name.clone(), file.to_string());
        }
        let files: BTreeSet<String> = index.values().cloned().collect();
        return Ok((files.into_iter().collect(), Some(index)));
    }
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok((vec!["model.safetensors".into()], None));
    }
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| file_err(dir, format!("cannot list the folder: {e}")))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(file_err(dir, "no .safetensors weight files in the folder"));
    }
    Ok((files, None))
}

/// Map one weight file; a missing one names the tensors the index expected in it.
fn open_shard(
    path: &Path,
    file: &str,
    index: Option<&HashMap<String, String>>,
) -> Result<Shard, ModelError> {
    let f = File::open(path).map_err(|e| {
        let expected = index
            .map(|ix| {
                let mut names: Vec<&str> = ix
                    .iter()
                    .filter(|(_, f)| f.as_str() == file)
                    .map(|(n, _)| n.as_str())
                    .collect();
                names.sort();
                match names.split_first() {
                    Some((first, [])) => format!(" (it holds '{first}')"),
                    Some((first, rest)) => {
                        format!(" (it holds '{first}' and {} more tensors)", rest.len())
                    }
                    None => String::new(),
                }
            })
            .unwrap_or_default();
        file_err(path, format!("cannot open the weight file{expected}: {e}"))
    })?;
    // SAFETY: the mapping is read-only; like every loader of memory-mapped
    // weights, rill assumes the file is not changed while it runs.
    let map = unsafe { Mmap::map(&f) }.map_err(|e| file_err(path, format!("cannot map: {e}")))?;
    Ok(Shard {
        name: file.to_string(),
        map,
    })
}

/// A safetensors header rill cannot use, said with the tensor at fault
/// where there is one (a truncated file: the first tensor past its end).
fn shard_error(path: &Path, bytes: &[u8], e: SafeTensorError) -> ModelError {
    if matches!(e, SafeTensorError::MetadataIncompleteBuffer) {
        if let Some((name, end, have)) = first_truncated(bytes) {
            return ModelError::CheckpointTensor {
                file: path.display().to_string(),
                tensor: name,
                why: format!(
                    "the file is truncated: the tensor's data ends at byte {end}, the file has {have}"
                ),
            };
        }
    }
    file_err(path, format!("not a readable safetensors file: {e:?}"))
}

/// The first tensor (by offset) whose data runs past the end of `bytes`.
fn first_truncated(bytes: &[u8]) -> Option<(String, usize, usize)> {
    let n = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?) as usize;
    let header: Value = serde_json::from_slice(bytes.get(8..8usize.checked_add(n)?)?).ok()?;
    let mut ends: Vec<(usize, String)> = header
        .as_object()?
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .filter_map(|(k, v)| {
            let end = v.get("data_offsets")?.get(1)?.as_u64()? as usize;
            Some((8 + n + end, k.clone()))
        })
        .collect();
    ends.sort();
    ends.into_iter()
        .find(|(end, _)| *end > bytes.len())
        .map(|(end, name)| (name, end, bytes.len()))
}

impl WeightSource for HfSource {
    fn describe(&self) -> String {
        format!("Hugging Face folder {}", self.dir.display())
    }

    fn config(&self) -> Result<ModelConfig, ModelError> {
        Ok(self.config.model.clone())
    }

    fn tensor(&self, name: &str) -> Result<Option<TensorRef<'_>>, ModelError> {
        match self.slots.get(name) {
            Some(Slot::Whole(e)) => Ok(Some(self.entry_ref(e))),
            _ => Ok(None),
        }
    }

    fn expert_tensors(&self, name: &str) -> Result<Option<Vec<TensorRef<'_>>>, ModelError> {
        let Some(Slot::Experts(list)) = self.slots.get(name) else {
            return Ok(None);
        };
        list.iter()
            .enumerate()
            .map(|(e, entry)| {
                entry.as_ref().map(|x| self.entry_ref(x)).ok_or_else(|| {
                    ModelError::MissingTensor(format!("{name} (expert {e} of {})", list.len()))
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>, ModelError> {
        let Some(Slot::Whole(e)) = self.slots.get(name) else {
            return Err(ModelError::MissingTensor(name.to_string()));
        };
        let mut v = crate::weights::decode_vector(&self.entry_ref(e), n)?;
        match e.transform {
            Transform::PlusOne => v.iter_mut().for_each(|x| *x += 1.0),
            Transform::NegExp => v.iter_mut().for_each(|x| *x = -x.exp()),
            Transform::None | Transform::Squeeze => {}
        }
        Ok(v)
    }
}
