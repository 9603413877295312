//! `--mem-budget`: the one budget the engine plans sequence states and the
//! prompt cache against (see rill-engine's `budget.rs`).

/// The budget in bytes: `flag_mib` when given (0 = none), else what the
/// machine has available (`MemAvailable`) minus the weights, which the
/// mapped file will hold in the page cache, with a tenth kept back for
/// everything else the process allocates. Said on stderr.
pub fn resolve(flag_mib: Option<usize>, weight_bytes: u64) -> Option<usize> {
    let budget = match flag_mib {
        Some(0) => None,
        Some(m) => Some(m << 20),
        None => available_bytes().map(|avail| {
            let left = avail.saturating_sub(weight_bytes);
            (left - left / 10) as usize
        }),
    };
    match budget {
        Some(b) => eprintln!(
            "rill: memory budget {} MiB for sequence states and the prompt cache{}",
            b >> 20,
            if flag_mib.is_none() {
                " (available memory minus the weights; --mem-budget to set)"
            } else {
                ""
            }
        ),
        None => eprintln!("rill: no memory budget (--mem-budget 0 or no /proc/meminfo)"),
    }
    budget
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
fn available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mem_available_and_keeps_the_weights_out() {
        let text = "MemTotal: 100 kB\nMemFree: 10 kB\nMemAvailable:   2097152 kB\n";
        assert_eq!(parse_mem_available(text), Some(2 << 30));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
        assert_eq!(resolve(Some(0), 0), None);
        assert_eq!(resolve(Some(512), 1 << 40), Some(512 << 20));
    }
}
