//! Text for a GitHub comment (`plan --format markdown`, `diff --format markdown`). A value
//! written raw can close the comment's `<details>`, open HTML, hide text in a comment, add a
//! link or an image (a tracking pixel), or break the table it sits in. Two forms:
//!
//! * [`text`]: prose (a reason, a note) — markdown and HTML punctuation backslash-escaped,
//!   entities disarmed, line breaks flattened, controls escaped;
//! * [`code`]: a value (a node, a field, a before/after) as a code span, which GitHub renders
//!   literally — fenced with more backticks than the value holds, pipes escaped for tables.

use super::terminal;

/// Characters that start markdown or HTML syntax anywhere in a line.
fn needs_escape(c: char) -> bool {
    matches!(
        c,
        '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '~' | '&' | '!' | '#'
    )
}

/// Prose, safe inline and inside a table cell.
pub fn text(value: &str) -> String {
    let flat = terminal::escape_line(&value.replace(['\n', '\r'], " ")).into_owned();
    let mut out = String::with_capacity(flat.len() + 8);
    for c in flat.chars() {
        if needs_escape(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A value as a code span, safe inside a table cell.
pub fn code(value: &str) -> String {
    let flat = terminal::escape_line(&value.replace(['\n', '\r'], " ")).into_owned();
    // GitHub splits table cells at `|` even inside code spans, unless escaped.
    let flat = flat.replace('|', "\\|");
    let longest = flat.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    // A space on each side keeps a value starting or ending with a backtick apart from the
    // fence (CommonMark strips one such space).
    if flat.starts_with('`') || flat.ends_with('`') || flat.is_empty() {
        format!("{fence} {flat} {fence}")
    } else {
        format!("{fence}{flat}{fence}")
    }
}

/// Lines as a fenced code block (`lang` names its highlighting): fenced with more backticks
/// than any line holds, so no line can close it; control characters escaped.
pub fn code_block(lang: &str, lines: &[String]) -> String {
    let lines: Vec<String> = lines
        .iter()
        .map(|l| terminal::escape_line(l).into_owned())
        .collect();
    let longest = lines
        .iter()
        .flat_map(|l| l.split(|c| c != '`').map(str::len))
        .max()
        .unwrap_or(0);
    let fence = "`".repeat((longest + 1).max(3));
    let mut out = format!("{fence}{lang}\n");
    for line in &lines {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&fence);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_block_cannot_be_closed_by_its_lines() {
        let block = code_block("diff", &["+a ``` b".into(), "-\u{1b}[2J".into()]);
        assert_eq!(block, "````diff\n+a ``` b\n-\\x1b[2J\n````\n");
    }

    #[test]
    fn prose_cannot_open_html_links_images_or_break_a_table() {
        assert_eq!(
            text("</details><img src=x onerror=alert(1)> <!-- hidden -->"),
            "\\</details\\>\\<img src=x onerror=alert(1)\\> \\<\\!-- hidden --\\>"
        );
        assert_eq!(
            text("[click](https://evil) ![px](https://evil/p.png) a|b"),
            "\\[click\\](https://evil) \\!\\[px\\](https://evil/p.png) a\\|b"
        );
        assert_eq!(text("two\nlines &lt;"), "two lines \\&lt;");
        assert_eq!(text("esc \u{1b}[31m"), "esc \\\\x1b\\[31m");
        assert_eq!(
            text("failed_manual_intervention"),
            "failed\\_manual\\_intervention"
        );
    }

    #[test]
    fn code_spans_hold_any_value() {
        assert_eq!(code("dc1/c07u43"), "`dc1/c07u43`");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`x`"), "`` `x` ``");
        assert_eq!(code("a|b\nc"), "`a\\|b c`");
        assert_eq!(code(""), "`  `");
    }
}
