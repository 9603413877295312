//! A sequence state as bytes and back: what a prompt cache kept on disk
//! stores. Every length is checked against the model on the way back, so
//! a file of another model or a damaged one is an error, never a state
//! that indexes out of bounds. (The file's identity and checksum are the
//! caller's.)

use crate::kv::{KvCache, KvConfig, KvType};
use crate::model::Model;
use crate::state::{LayerState, RewindRing, SequenceState};

/// Version of the encoding; a state of another version is refused.
pub const STATE_FORMAT_VERSION: u32 = 3;

pub(crate) fn put_u64(out: &mut Vec<u8>, x: u64) {
    out.extend_from_slice(&x.to_le_bytes());
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u64(out, b.len() as u64);
    out.extend_from_slice(b);
}

pub(crate) fn put_f32s(out: &mut Vec<u8>, v: &[f32]) {
    put_u64(out, v.len() as u64);
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

/// Reads what the `put_*` functions wrote; every read is bounds-checked.
pub(crate) struct Reader<'a> {
    pub buf: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if n > self.buf.len() {
            return Err("truncated state".into());
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }

    pub fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    pub fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    pub fn usize(&mut self) -> Result<usize, String> {
        usize::try_from(self.u64()?).map_err(|_| "a length out of range".to_string())
    }

    pub fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let n = self.usize()?;
        Ok(self.take(n)?.to_vec())
    }

    pub fn f32s(&mut self) -> Result<Vec<f32>, String> {
        let n = self.usize()?;
        let b = self.take(n.checked_mul(4).ok_or("a length out of range")?)?;
        Ok(b.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect())
    }

    fn kv_type(&mut self) -> Result<KvType, String> {
        let name = String::from_utf8(self.bytes()?).map_err(|_| "a bad KV type name")?;
        name.parse()
    }
}

impl SequenceState {
    /// The state as bytes (position, KV config, every layer, the MTP
    /// head's cache and seed; not the rewind ring, which is scratch).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes() + 256);
        put_u64(&mut out, STATE_FORMAT_VERSION as u64);
        put_u64(&mut out, self.pos as u64);
        let kv = self.kv;
        put_bytes(&mut out, kv.k.name().as_bytes());
        put_bytes(&mut out, kv.v.name().as_bytes());
        put_u64(&mut out, kv.sinks as u64);
        put_u64(&mut out, kv.window as u64);
        put_u64(&mut out, kv.rotate as u64);
        put_u64(&mut out, self.layers.len() as u64);
        for l in &self.layers {
            match l {
                LayerState::Recurrent { conv, ssm } => {
                    out.push(0);
                    put_f32s(&mut out, conv);
                    put_f32s(&mut out, ssm);
                }
                LayerState::Attention { kv } => {
                    out.push(1);
                    kv.k.write_to(&mut out);
                    kv.v.write_to(&mut out);
                }
            }
        }
        match &self.mtp {
            None => out.push(0),
            Some(m) => {
                out.push(1);
                put_u64(&mut out, m.pos as u64);
                m.kv.k.write_to(&mut out);
                m.kv.v.write_to(&mut out);
                put_f32s(&mut out, &m.seed);
            }
        }
        // qwen4exp: the QSA layers' index keys and the PLE history.
        match &self.hyper {
            None => out.push(0),
            Some(h) => {
                out.push(1);
                for keys in &h.index {
                    match keys {
                        None => out.push(0),
                        Some(k) => {
                            out.push(1);
                            k.write_to(&mut out);
                        }
                    }
                }
                match &h.ple {
                    None => out.push(0),
                    Some(p) => {
                        out.push(1);
                        p.write_to(&mut out);
                    }
                }
            }
        }
        out
    }

    /// A state of `model` from [`encode`](Self::encode)'s bytes, able to
    /// hold `capacity` positions. Refused when anything disagrees with
    /// the model (layer kinds, sizes, positions) or the bytes run short.
    pub fn decode(model: &Model, bytes: &[u8], capacity: usize) -> Result<SequenceState, String> {
        let r = &mut Reader { buf: bytes };
        let version = r.u64()?;
        if version != STATE_FORMAT_VERSION as u64 {
            return Err(format!(
                "state format {version}, this rill reads {STATE_FORMAT_VERSION}"
            ));
        }
        let pos = r.usize()?;
        let kv = KvConfig {
            k: r.kv_type()?,
            v: r.kv_type()?,
            sinks: r.usize()?,
            window: r.usize()?,
            rotate: r.u64()? != 0,
        };
        let mut st =
            SequenceState::with_kv(model, capacity.max(pos), kv).map_err(|e| e.to_string())?;
        st.pos = pos;
        if r.usize()? != st.layers.len() {
            return Err("another number of layers".into());
        }
        for l in &mut st.layers {
            let tag = r.u8()?;
            match (l, tag) {
                (LayerState::Recurrent { conv, ssm }, 0) => {
                    let (c, s) = (r.f32s()?, r.f32s()?);
                    if c.len() != conv.len() || s.len() != ssm.len() {
                        return Err("recurrent state of another size".into());
                    }
                    (*conv, *ssm) = (c, s);
                }
                (LayerState::Attention { kv }, 1) => read_cache(r, kv, pos)?,
                _ => return Err("another layer kind".into()),
            }
        }
        match (&mut st.mtp, r.u8()?) {
            (None, 0) => {}
            (Some(m), 1) => {
                m.pos = r.usize()?;
                read_cache(r, &mut m.kv, m.pos)?;
                m.seed = r.f32s()?;
                if !(m.seed.is_empty() || m.seed.len() == model.config.n_embd) {
                    return Err("an MTP seed of another size".into());
                }
            }
            _ => return Err("an MTP head where the model has none (or none where it has)".into()),
        }
        match (&mut st.hyper, r.u8()?) {
            (None, 0) => {}
            (Some(h), 1) => {
                for keys in h.index.iter_mut() {
                    match (keys, r.u8()?) {
                        (None, 0) => {}
                        (Some(k), 1) => k.read_into(r, pos)?,
                        _ => return Err("index keys for another layer kind".into()),
                    }
                }
                match (&mut h.ple, r.u8()?) {
                    (None, 0) => {}
                    (Some(p), 1) => p.read_into(r)?,
                    _ => return Err("a PLE history where the model has none".into()),
                }
            }
            _ => return Err("a qwen4exp state for another model (or none for one)".into()),
        }
        if !r.buf.is_empty() {
            return Err("trailing bytes after the state".into());
        }
        st.ring = RewindRing::default();
        Ok(st)
    }
}

fn read_cache(r: &mut Reader, kv: &mut KvCache, pos: usize) -> Result<(), String> {
    for side in [&mut kv.k, &mut kv.v] {
        side.read_from(r)?;
        if side.positions() != pos {
            return Err(format!(
                "a KV cache of {} positions in a state at {pos}",
                side.positions()
            ));
        }
    }
    Ok(())
}
