//! The text of one generated sequence: token bytes → complete UTF-8 →
//! stop strings. Shared by the single-sequence loop and the scheduler so
//! both release text, hold back stop-string prefixes and flush the tail the
//! same way.

use crate::stop::{Fed, StopMatcher};
use rill_tokenizer::{StreamDecoder, Tokenizer, TokenizerError};

pub(crate) struct TextOutput {
    decoder: StreamDecoder,
    stops: StopMatcher,
}

impl TextOutput {
    /// `keep_stop`: a stop string found is part of the text.
    pub fn new(stop: &[String], keep_stop: bool) -> TextOutput {
        let stops = StopMatcher::new(stop);
        TextOutput {
            decoder: StreamDecoder::skipping_special(),
            stops: if keep_stop {
                stops.keeping_the_stop()
            } else {
                stops
            },
        }
    }

    /// Feed one generated token: the text that became final, and whether a
    /// stop string ended the sequence (looked for only when `check_stops`).
    pub fn push(
        &mut self,
        tok: &Tokenizer,
        id: u32,
        check_stops: bool,
    ) -> Result<Fed, TokenizerError> {
        let text = self.decoder.push(tok, id)?;
        Ok(match check_stops {
            true => self.stops.feed(&text),
            false => self.stops.feed_unchecked(&text),
        })
    }

    /// Generation ended (end-of-generation token, length, cancel): release
    /// everything held. A stop string completed by the tail still counts.
    pub fn finish(&mut self) -> Fed {
        let mut fed = self.stops.feed(&self.decoder.finish());
        if !fed.stopped {
            fed.emit.push_str(&self.stops.flush());
        }
        fed
    }
}
