//! The prompt cache kept on disk (`--cache-dir`): the memory cache's
//! snapshots are written there at shutdown, one file per token prefix, and
//! a request after a restart resumes from the longest one its prompt
//! starts with. Each file names the model it belongs to and ends with a
//! checksum; a file of another model, another format version or a damaged
//! one is ignored with a warning. The folder is bounded: the oldest files
//! go first.

use rill_model::{Model, SequenceState, STATE_FORMAT_VERSION};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"RILLPC01";
const EXT: &str = "rillcache";

struct DiskEntry {
    tokens: Vec<u32>,
    path: PathBuf,
    bytes: u64,
}

pub(crate) struct DiskCache {
    dir: PathBuf,
    limit: u64,
    identity: Vec<u8>,
    index: Vec<DiskEntry>,
}

/// FNV-1a, 64 bits: enough to tell a damaged file from a good one.
fn checksum(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// What a file must say to belong to `model`: the state format and every
/// hyperparameter (RoPE scaling included) and the weights' size.
fn identity(model: &Model) -> Vec<u8> {
    format!(
        "rill state v{STATE_FORMAT_VERSION}; {:?}; weights {} B",
        model.config,
        model.decode_weight_bytes()
    )
    .into_bytes()
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, String> {
    b.get(at..at + 8)
        .map(|s| u64::from_le_bytes(s.try_into().unwrap()))
        .ok_or_else(|| "truncated".to_string())
}

impl DiskCache {
    /// The cache in `dir` (created if missing) for `model`, holding at
    /// most `limit` bytes; files that do not check out are reported in
    /// the log and left out.
    pub fn open(dir: &Path, limit: u64, model: &Model) -> std::io::Result<DiskCache> {
        std::fs::create_dir_all(dir)?;
        let mut c = DiskCache {
            dir: dir.to_path_buf(),
            limit,
            identity: identity(model),
            index: Vec::new(),
        };
        let mut files: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == EXT))
            .map(|p| {
                (
                    p.metadata()
                        .and_then(|m| m.modified())
                        .unwrap_or(std::time::UNIX_EPOCH),
                    p,
                )
            })
            .collect();
        files.sort();
        for (_, path) in files {
            match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| c.check(&b).map(|(t, _)| (t, b.len() as u64)))
            {
                Ok((tokens, bytes)) => c.index.push(DiskEntry {
                    tokens,
                    path,
                    bytes,
                }),
                Err(why) => tracing::warn!("prompt cache file {}: {why}; ignored", path.display()),
            }
        }
        Ok(c)
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// The tokens and state bytes of a file's contents, or why not.
    fn check<'b>(&self, b: &'b [u8]) -> Result<(Vec<u32>, &'b [u8]), String> {
        if b.len() < MAGIC.len() + 8 || &b[..MAGIC.len()] != MAGIC {
            return Err("not a rill prompt-cache file (or another version of it)".into());
        }
        let body = &b[..b.len() - 8];
        if checksum(body) != u64_at(b, b.len() - 8)? {
            return Err("checksum mismatch (a damaged file)".into());
        }
        let mut at = MAGIC.len();
        let n = u64_at(b, at)? as usize;
        at += 8;
        if body.get(at..at + n) != Some(&self.identity[..]) {
            return Err("written for another model or rill version".into());
        }
        at += n;
        let n = u64_at(b, at)? as usize;
        at += 8;
        let t = body
            .get(at..at + n.checked_mul(4).ok_or("truncated")?)
            .ok_or("truncated")?;
        let tokens = t
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        at += 4 * n;
        let n = u64_at(b, at)? as usize;
        at += 8;
        let state = body.get(at..at + n).ok_or("truncated")?;
        if at + n != body.len() {
            return Err("trailing bytes".into());
        }
        Ok((tokens, state))
    }

    /// The longest file whose tokens are a strict prefix of `prompt` and
    /// longer than `than`, loaded as a state of `capacity` positions.
    pub fn lookup(
        &self,
        model: &Model,
        prompt: &[u32],
        than: usize,
        capacity: usize,
    ) -> Option<(usize, SequenceState)> {
        let e = self
            .index
            .iter()
            .filter(|e| e.tokens.len() > than && e.tokens.len() < prompt.len())
            .filter(|e| prompt.starts_with(&e.tokens))
            .max_by_key(|e| e.tokens.len())?;
        let loaded = std::fs::read(&e.path)
            .map_err(|e| e.to_string())
            .and_then(|b| {
                let (_, state) = self.check(&b)?;
                SequenceState::decode(model, state, capacity)
            });
        match loaded {
            Ok(s) => Some((e.tokens.len(), s)),
            Err(why) => {
                tracing::warn!("prompt cache file {}: {why}; ignored", e.path.display());
                None
            }
        }
    }

    /// Write the state after `tokens` (unless a file holds it already),
    /// then drop the oldest files beyond the size bound.
    pub fn store(&mut self, tokens: &[u32], state: &SequenceState) -> std::io::Result<()> {
        if tokens.is_empty() || self.index.iter().any(|e| e.tokens == tokens) {
            return Ok(());
        }
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&(self.identity.len() as u64).to_le_bytes());
        b.extend_from_slice(&self.identity);
        b.extend_from_slice(&(tokens.len() as u64).to_le_bytes());
        for t in tokens {
            b.extend_from_slice(&t.to_le_bytes());
        }
        let s = state.encode();
        b.extend_from_slice(&(s.len() as u64).to_le_bytes());
        b.extend_from_slice(&s);
        let sum = checksum(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        if b.len() as u64 > self.limit {
            return Ok(());
        }
        let token_bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        let name = format!("{:016x}-{}.{EXT}", checksum(&token_bytes), tokens.len());
        let path = self.dir.join(name);
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, &b)?;
        std::fs::rename(&tmp, &path)?;
        self.index.push(DiskEntry {
            tokens: tokens.to_vec(),
            path,
            bytes: b.len() as u64,
        });
        while self.index.iter().map(|e| e.bytes).sum::<u64>() > self.limit {
            let old = self.index.remove(0);
            let _ = std::fs::remove_file(&old.path);
        }
        Ok(())
    }
}
