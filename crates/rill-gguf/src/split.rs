//! Split files as written by llama.cpp's `gguf-split`: `name-00001-of-00003.gguf`, ...
//! Every split is a complete GGUF file with its own header and data section; `split.no`
//! (0-based) and `split.count` say where it belongs, and the first split carries the model's
//! metadata and `split.tensors.count` (the total over all splits).

use crate::header::Header;
use crate::GgufError;
use std::path::{Path, PathBuf};

pub const KEY_SPLIT_NO: &str = "split.no";
pub const KEY_SPLIT_COUNT: &str = "split.count";
pub const KEY_SPLIT_TENSORS_COUNT: &str = "split.tensors.count";

/// `(split.no, split.count)` of a file that is one of several splits; `None` for a whole file.
pub(crate) fn split_position(h: &Header) -> Result<Option<(u64, u64)>, GgufError> {
    let int = |key: &str| -> Result<Option<u64>, GgufError> {
        match h.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                GgufError::Split(format!("`{key}` is not a non-negative integer: {v:?}"))
            }),
        }
    };
    let Some(count) = int(KEY_SPLIT_COUNT)? else {
        return Ok(None);
    };
    let no = int(KEY_SPLIT_NO)?;
    match (no, count) {
        (_, 0) => Err(GgufError::Split("`split.count` is 0".into())),
        (None | Some(0), 1) => Ok(None),
        (None, _) => Err(GgufError::Split(format!(
            "`split.count` is {count} but `split.no` is missing"
        ))),
        (Some(no), count) if no >= count => Err(GgufError::Split(format!(
            "`split.no` is {no} but `split.count` is {count}"
        ))),
        (Some(no), count) => Ok(Some((no, count))),
    }
}

/// A split file name taken apart: `prefix-NNNNN-of-MMMMM.gguf`.
pub(crate) struct SplitName {
    dir: PathBuf,
    prefix: String,
    no_width: usize,
    count_width: usize,
    /// 1-based, as in the name.
    pub no: u64,
    pub count: u64,
}

impl SplitName {
    pub fn parse(path: &Path) -> Option<SplitName> {
        let file = path.file_name()?.to_str()?;
        let stem = file.strip_suffix(".gguf")?;
        let (left, count_str) = stem.rsplit_once("-of-")?;
        let (prefix, no_str) = left.rsplit_once('-')?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(no_str) || !digits(count_str) {
            return None;
        }
        Some(SplitName {
            dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            prefix: prefix.to_string(),
            no_width: no_str.len(),
            count_width: count_str.len(),
            no: no_str.parse().ok()?,
            count: count_str.parse().ok()?,
        })
    }

    /// Path of split `index` (0-based).
    pub fn sibling(&self, index: u64) -> PathBuf {
        self.dir.join(format!(
            "{}-{:0nw$}-of-{:0cw$}.gguf",
            self.prefix,
            index + 1,
            self.count,
            nw = self.no_width,
            cw = self.count_width
        ))
    }
}

/// Paths of all `count` splits, given one of them (split `no`, 0-based).
pub(crate) fn sibling_paths(path: &Path, no: u64, count: u64) -> Result<Vec<PathBuf>, GgufError> {
    let name = SplitName::parse(path).ok_or_else(|| {
        GgufError::Split(format!(
            "{} is split {} of {count}, but its name does not follow the \
             `<name>-NNNNN-of-MMMMM.gguf` pattern, so the other splits cannot be found",
            path.display(),
            no + 1
        ))
    })?;
    if name.no != no + 1 || name.count != count {
        return Err(GgufError::Split(format!(
            "{} is named as split {} of {} but its metadata says split {} of {count}",
            path.display(),
            name.no,
            name.count,
            no + 1
        )));
    }
    Ok((0..count).map(|i| name.sibling(i)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_llama_cpp_names() {
        let n =
            SplitName::parse(Path::new("/m/Qwen3-Next-80B-Q4_K_M-00002-of-00003.gguf")).unwrap();
        assert_eq!((n.no, n.count), (2, 3));
        assert_eq!(
            n.sibling(0),
            Path::new("/m/Qwen3-Next-80B-Q4_K_M-00001-of-00003.gguf")
        );
        assert!(SplitName::parse(Path::new("model.gguf")).is_none());
        assert!(SplitName::parse(Path::new("a-0x-of-00002.gguf")).is_none());
        assert!(SplitName::parse(Path::new("a-00001-of-00002.bin")).is_none());
    }
}
