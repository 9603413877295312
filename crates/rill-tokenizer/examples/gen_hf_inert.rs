//! Dev tool: print the HF_INERT table for src/nfc.rs from tests/fixtures/hf_nfc_active.txt.gz.
use std::io::Read;

fn main() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/hf_nfc_active.txt.gz"
    );
    let mut s = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut s)
        .unwrap();
    let mut active = vec![false; 0x110000];
    for line in s.lines() {
        let mut it = line.split(' ').map(|x| x.parse::<usize>().unwrap());
        let (a, b) = (it.next().unwrap(), it.next().unwrap());
        active[a..=b].iter_mut().for_each(|x| *x = true);
    }
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for u in 0..0x110000u32 {
        let Some(c) = char::from_u32(u) else { continue };
        if rill_tokenizer::nfc::crate_nfc_relevant(c) && !active[u as usize] {
            match runs.last_mut() {
                Some(r) if r.1 + 1 == u => r.1 = u,
                _ => runs.push((u, u)),
            }
        }
    }
    let n: u32 = runs.iter().map(|r| r.1 - r.0 + 1).sum();
    eprintln!("{} runs, {n} chars", runs.len());
    for chunk in runs.chunks(6) {
        let parts: Vec<String> = chunk
            .iter()
            .map(|(a, b)| format!("(0x{a:X}, 0x{b:X})"))
            .collect();
        println!("    {},", parts.join(", "));
    }
}
