//! The one token estimate used where no tokenizer is at hand: UTF-8 bytes / 4, rounded up.
//!
//! The skills section's budget, the summarization trigger's default estimator and `trellis inspect`
//! all count with it. Close for English prose and code; it undercounts scripts that take one token
//! per character (CJK).

/// Estimated tokens of `text`: UTF-8 bytes / 4, rounded up.
pub fn estimate_tokens(text: &str) -> usize {
    text.len().div_ceil(4)
}

/// Estimated tokens of `bytes` bytes of UTF-8 text or JSON: bytes / 4, rounded up.
pub fn tokens_for_bytes(bytes: u64) -> u64 {
    bytes.div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_bytes_are_one_token_rounded_up() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens("ü"), 1);
        assert_eq!(tokens_for_bytes(9), 3);
    }
}
