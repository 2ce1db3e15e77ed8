//! Fuzz harness: the Blockbook `/api/` status parser (`probe::http::parse_blockbook`).

use pin_proxy::inspect::parse_blockbook;

/// Longest error detail accepted: the parser truncates to 160 characters
/// plus an ellipsis; anything near this means truncation was bypassed.
const MAX_DETAIL_CHARS: usize = 256;

/// Parse `data` as a response body: `Ok` or a short `Err`, never a panic.
pub fn run(data: &[u8]) {
    if let Err(detail) = parse_blockbook(data) {
        let chars = detail.chars().count();
        assert!(chars <= MAX_DETAIL_CHARS, "error detail of {chars} chars");
    }
}
