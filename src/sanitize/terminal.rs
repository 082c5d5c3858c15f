//! Text for a terminal. A manifest value, a MAAS error or a hostname MAAS reports can carry
//! `ESC [ … m` sequences, OSC titles, BEL, C1 controls (U+0080–U+009F, which some terminals
//! obey like ESC) or bidirectional overrides (which make a line read differently from what it
//! is). Each is shown as a visible escape (`\x1b`, `\u{9b}`, `\u{202e}`) instead.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Would this character act on the terminal (or reorder what is shown) rather than print?
fn is_unsafe(c: char, keep_newlines: bool) -> bool {
    match c {
        '\n' | '\t' => !keep_newlines,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        // Bidirectional embeddings, overrides and isolates; the line and paragraph separators.
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}' => true,
        _ => false,
    }
}

fn escape_with(text: &str, keep_newlines: bool) -> Cow<'_, str> {
    if !text.chars().any(|c| is_unsafe(c, keep_newlines)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !is_unsafe(c, keep_newlines) {
            out.push(c);
        } else if (c as u32) < 0x80 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    Cow::Owned(out)
}

/// Text of several lines: newlines and tabs kept, every other control escaped.
pub fn escape(text: &str) -> Cow<'_, str> {
    escape_with(text, true)
}

/// One line (a field, a table cell): newlines and tabs escaped too.
pub fn escape_line(text: &str) -> Cow<'_, str> {
    escape_with(text, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn control_sequences_are_shown_not_sent() {
        assert_eq!(
            escape("site \u{1b}[2J\u{1b}]0;owned\u{7} ok\nnext\tcol"),
            "site \\x1b[2J\\x1b]0;owned\\x07 ok\nnext\tcol"
        );
        assert_eq!(escape("csi \u{9b}31m"), "csi \\u{9b}31m");
        assert_eq!(escape("abc\u{202e}fed"), "abc\\u{202e}fed");
        assert_eq!(escape_line("a\nb\rc\td"), "a\\x0ab\\x0dc\\x09d");
        assert!(matches!(escape("plain text, é ü 漢字"), Cow::Borrowed(_)));
    }

    proptest! {
        #[test]
        fn nothing_unsafe_survives(text in "\\PC*|[\\x00-\\x{a0}\\x{2028}-\\x{206f}]{0,40}") {
            let shown = escape(&text);
            prop_assert!(!shown.chars().any(|c| is_unsafe(c, true)));
            let line = escape_line(&text);
            prop_assert!(!line.chars().any(|c| c.is_control()));
        }
    }
}
