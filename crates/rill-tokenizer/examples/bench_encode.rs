//! Encoding throughput on long prompts.
//!
//! cargo run --release -p rill-tokenizer --example bench_encode [GGUF] [TEXT_FILE...]
//!
//! Without a GGUF it uses the test fixture vocabulary (Qwen3.5); without text files it measures
//! the test corpus (mixed scripts, code, emoji) concatenated to ~4 MB and an English-and-code
//! text built from its ASCII strings.
use rill_tokenizer::Tokenizer;
use std::io::Read;
use std::time::Instant;

fn gunzip(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).expect("fixture"))
        .read_to_end(&mut out)
        .expect("gzip");
    out
}

fn measure(tok: &Tokenizer, name: &str, text: &str) {
    // warm up, then best of 3
    let n = tok.encode(text, true).len();
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        let ids = tok.encode(text, true);
        best = best.min(t.elapsed().as_secs_f64());
        assert_eq!(ids.len(), n);
    }
    let mb = text.len() as f64 / 1e6;
    println!(
        "{name}: {mb:.2} MB, {n} tokens, {:.3} s → {:.1} MB/s, {:.2} M tokens/s",
        best,
        mb / best,
        n as f64 / best / 1e6
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let t = Instant::now();
    let tok = match args.first().filter(|a| a.ends_with(".gguf")) {
        Some(p) => Tokenizer::from_gguf_path(p.as_ref())?,
        None => {
            let g = rill_gguf::GgufFile::from_bytes(gunzip("qwen35-vocab.gguf.gz"))?;
            Tokenizer::from_gguf(&g)?
        }
    };
    println!(
        "loaded {} tokens in {:.2} s",
        tok.vocab_size(),
        t.elapsed().as_secs_f64()
    );
    let files: Vec<&String> = args.iter().filter(|a| !a.ends_with(".gguf")).collect();
    if !files.is_empty() {
        for f in files {
            measure(&tok, f, &std::fs::read_to_string(f)?);
        }
        return Ok(());
    }
    let corpus = String::from_utf8(gunzip("corpus.jsonl.gz"))?;
    let texts: Vec<String> = corpus
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json");
            v["text"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    let mut mixed = String::new();
    while mixed.len() < 4_000_000 {
        for s in &texts {
            mixed.push_str(s);
            mixed.push('\n');
        }
    }
    let mut ascii = String::new();
    while ascii.len() < 4_000_000 {
        for s in texts
            .iter()
            .filter(|s| s.is_ascii() && s.len() > 30 && !s.contains("<|"))
        {
            ascii.push_str(s);
            ascii.push('\n');
        }
    }
    measure(&tok, "mixed corpus", &mixed);
    measure(&tok, "ASCII prose+code", &ascii);
    Ok(())
}
