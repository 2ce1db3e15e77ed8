//! Reads the contract's own `allow: [127.0.0.1/32, ::1/128]`.
//!
//! serde_yaml's libyaml follows YAML 1.1, where a plain scalar inside `[...]`
//! may not start with `:`; YAML 1.2 allows it. When a file fails to parse,
//! IPv6 literals in that position are quoted and the file is read again.

/// The text with each flow-sequence item that is an IPv6 literal starting
/// with `::` (optionally `/prefix`) put in double quotes; `None` when there is
/// none. Quoted strings and comments are left alone. The repair is narrow on
/// purpose: a run of `[0-9a-f:./]` directly after `[` or `,` and ending at `,`
/// or `]` cannot be anything else in a file libyaml has just refused.
pub(super) fn quote_flow_ipv6(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len() + 8);
    let mut prev = b'\n'; // last significant byte outside quotes and comments
    let mut quote: Option<u8> = None;
    let mut comment = false;
    let mut changed = false;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let after_blank = i == 0 || b[i - 1].is_ascii_whitespace();
        if comment {
            comment = c != b'\n';
        } else if let Some(q) = quote {
            if q == b'"' && c == b'\\' && i + 1 < b.len() {
                out.extend_from_slice(&b[i..i + 2]);
                i += 2;
                continue;
            }
            if c == q {
                quote = None;
                prev = c;
            }
        } else if c == b'#' && after_blank {
            comment = true;
        } else if (c == b'"' || c == b'\'') && (after_blank || b"[{,:".contains(&b[i - 1])) {
            quote = Some(c);
        } else if c == b':' && matches!(prev, b'[' | b',') && b.get(i + 1) == Some(&b':') {
            let len = b[i..]
                .iter()
                .take_while(|x| x.is_ascii_hexdigit() || b":./".contains(x))
                .count();
            let end = i + len;
            let next = b[end..].iter().find(|x| **x != b' ' && **x != b'\t');
            if matches!(next, None | Some(b',' | b']' | b'\n' | b'\r')) {
                out.push(b'"');
                out.extend_from_slice(&b[i..end]);
                out.push(b'"');
                changed = true;
                prev = b'"';
                i = end;
                continue;
            }
        } else if !c.is_ascii_whitespace() {
            prev = c;
        }
        out.push(c);
        i += 1;
    }
    if changed {
        String::from_utf8(out).ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::quote_flow_ipv6;

    #[test]
    fn quotes_ipv6_items_in_flow_sequences() {
        let cases = [
            (
                "allow: [127.0.0.1/32, ::1/128]\n",
                Some("allow: [127.0.0.1/32, \"::1/128\"]\n"),
            ),
            ("allow: [ ::1 , ::/0]", Some("allow: [ \"::1\" , \"::/0\"]")),
            (
                "allow: [::ffff:10.0.0.1/128]  # c",
                Some("allow: [\"::ffff:10.0.0.1/128\"]  # c"),
            ),
            ("allow: [\"::1/128\"]", None),
            ("allow:\n  - ::1/128\n", None),
            ("name: \"x, ::1\"", None),
            ("# [a, ::1]\nx: 1", None),
            ("allow: [::1/128x]", None),
        ];
        for (input, want) in cases {
            assert_eq!(quote_flow_ipv6(input).as_deref(), want, "{input}");
        }
    }
}
