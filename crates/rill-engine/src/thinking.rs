//! A budget for the thinking block (llama.cpp's `--reasoning-budget`,
//! Anthropic's `thinking.budget_tokens`): once the model has thought for
//! its budget without closing the block, the engine writes the closing
//! tokens itself (an optional message, then `</think>`), and the model
//! answers from there.

/// What a request asks of its thinking: given only when the prompt opens a
/// thinking block that the model is to close.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThinkingBudget {
    /// Most tokens the model may think before the block is closed for it.
    pub tokens: usize,
    /// The token that closes the block (`</think>`).
    pub end: u32,
    /// What is written to close it, ending with `end` (e.g. the tokens of
    /// "\n\nTime is up.\n" and then `</think>`).
    pub closing: Vec<u32>,
}

/// The budget as a sequence spends it.
#[derive(Debug)]
pub(crate) struct Thinking {
    budget: ThinkingBudget,
    /// Tokens thought so far.
    spent: usize,
    /// Closing tokens written so far, once the budget is spent.
    closed: usize,
    /// The block is closed (by the model or by the engine).
    over: bool,
}

impl Thinking {
    pub fn new(budget: ThinkingBudget) -> Thinking {
        // A closing without the end token would never end the block.
        let mut budget = budget;
        if budget.closing.last() != Some(&budget.end) {
            budget.closing.push(budget.end);
        }
        Thinking {
            budget,
            spent: 0,
            closed: 0,
            over: false,
        }
    }

    /// The token the engine writes next instead of sampling, while it
    /// closes the block.
    pub fn forced(&self) -> Option<u32> {
        let spent_all = self.spent >= self.budget.tokens;
        (!self.over && spent_all)
            .then(|| self.budget.closing.get(self.closed).copied())
            .flatten()
    }

    /// Tokens the model may still choose before the engine takes over
    /// (`usize::MAX` once the block is closed): a draft longer than this
    /// would be cut by the closing anyway.
    pub fn free_tokens(&self) -> usize {
        if self.over {
            usize::MAX
        } else {
            self.budget.tokens.saturating_sub(self.spent)
        }
    }

    /// Token `id` was taken (sampled, or the forced one).
    pub fn taken(&mut self, id: u32) {
        if self.over {
            return;
        }
        if self.forced() == Some(id) {
            self.closed += 1;
            self.over = self.closed == self.budget.closing.len();
        } else if id == self.budget.end {
            self.over = true;
        } else {
            self.spent += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(tokens: usize) -> Thinking {
        Thinking::new(ThinkingBudget {
            tokens,
            end: 9,
            closing: vec![7],
        })
    }

    #[test]
    fn the_closing_is_forced_once_the_budget_is_spent() {
        let mut t = budget(2);
        assert_eq!((t.forced(), t.free_tokens()), (None, 2));
        t.taken(1);
        t.taken(2);
        assert_eq!((t.forced(), t.free_tokens()), (Some(7), 0));
        t.taken(7);
        assert_eq!(t.forced(), Some(9));
        t.taken(9);
        assert_eq!((t.forced(), t.free_tokens()), (None, usize::MAX));
        t.taken(3);
        assert_eq!(t.forced(), None);
    }

    #[test]
    fn a_block_the_model_closes_in_time_is_left_alone() {
        let mut t = budget(3);
        t.taken(1);
        t.taken(9);
        for id in [1, 2, 3, 4] {
            t.taken(id);
            assert_eq!(t.forced(), None);
        }
    }

    #[test]
    fn a_zero_budget_closes_at_once() {
        let t = budget(0);
        assert_eq!(t.forced(), Some(7));
    }
}
