//! A log sink that can never stall or crash the server.
//!
//! Request logs go to stderr through a bounded queue and a writer thread:
//! when stderr is slow (a full pipe nobody reads) lines are dropped instead
//! of blocking the I/O threads, and when it is gone (a closed pipe) write
//! errors are ignored instead of panicking.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

/// Lines waiting for the writer thread before new ones are dropped.
const QUEUE: usize = 4096;

/// A `std::io::Write` handle on the shared queue (cheap to clone).
#[derive(Clone)]
pub struct LogSink {
    tx: SyncSender<Vec<u8>>,
    dropped: Arc<AtomicU64>,
}

impl LogSink {
    /// Start the writer thread; lines go to `out` (stderr in the server).
    pub fn new(mut out: impl Write + Send + 'static) -> LogSink {
        let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let lost = dropped.clone();
        let spawned = std::thread::Builder::new()
            .name("rill-log".into())
            .spawn(move || {
                for line in rx {
                    let n = lost.swap(0, Relaxed);
                    if n > 0 {
                        let _ = writeln!(out, "[{n} log lines dropped]");
                    }
                    let _ = out.write_all(&line);
                    let _ = out.flush();
                }
            });
        if spawned.is_err() {
            // No thread: every line counts as dropped, nothing blocks.
            dropped.fetch_add(1, Relaxed);
        }
        LogSink { tx, dropped }
    }

    pub fn stderr() -> LogSink {
        LogSink::new(std::io::stderr())
    }

    /// Lines dropped since the writer last caught up.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }
}

impl Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.tx.try_send(buf.to_vec()) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Relaxed);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogSink {
    type Writer = LogSink;

    fn make_writer(&'a self) -> LogSink {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that blocks forever, like a full pipe; says when it has.
    struct Stuck(Arc<std::sync::atomic::AtomicBool>);
    impl Write for Stuck {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            self.0.store(true, Relaxed);
            loop {
                std::thread::park();
            }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A writer whose reader is gone.
    struct Broken;
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
    }

    #[test]
    fn a_stuck_or_broken_stderr_neither_blocks_nor_fails() {
        let stuck = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut sink = LogSink::new(Stuck(stuck.clone()));
        // Once the writer thread is inside a write that never returns, the
        // queue fills and every further line is dropped (and counted: the
        // writer, stuck, cannot take the count).
        sink.write_all(b"first\n").unwrap();
        while !stuck.load(Relaxed) {
            std::thread::yield_now();
        }
        for _ in 0..QUEUE * 2 {
            sink.write_all(b"line\n").unwrap();
        }
        assert_eq!(sink.dropped(), QUEUE as u64);
        let mut sink = LogSink::new(Broken);
        for _ in 0..100 {
            sink.write_all(b"line\n").unwrap();
        }
    }
}
