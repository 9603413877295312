//! Minimal NumPy `.npy` (format 1.0) writer for little-endian float32 arrays.

use std::io::{self, Write};

/// Write `data` with `shape` (C order) as a float32 `.npy` stream.
pub fn write_f32<W: Write>(mut w: W, shape: &[usize], data: &[f32]) -> io::Result<()> {
    assert_eq!(
        shape.iter().product::<usize>(),
        data.len(),
        "shape does not match data"
    );
    let dims = match shape {
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {dims}, }}");
    // Magic (6) + version (2) + length (2) + header + '\n' is padded to 64 bytes.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    w.write_all(b"\x93NUMPY\x01\x00")?;
    w.write_all(&(header.len() as u16).to_le_bytes())?;
    w.write_all(header.as_bytes())?;
    let mut buf = Vec::with_capacity(data.len() * 4);
    for v in data {
        buf.extend_from_slice(&v.to_le_bytes());
    }
    w.write_all(&buf)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_aligned_and_data_follows() {
        let mut out = Vec::new();
        write_f32(&mut out, &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        assert_eq!(&out[..8], b"\x93NUMPY\x01\x00");
        let hlen = u16::from_le_bytes([out[8], out[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        let header = std::str::from_utf8(&out[10..10 + hlen]).unwrap();
        assert!(header.contains("'shape': (2, 3)"));
        assert!(header.ends_with('\n'));
        let body = &out[10 + hlen..];
        assert_eq!(body.len(), 24);
        assert_eq!(f32::from_le_bytes(body[20..24].try_into().unwrap()), 6.0);
    }
}
