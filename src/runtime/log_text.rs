//! Text log fields as `key=value` (logfmt): a value is written bare when
//! it is one plain word (no whitespace, control character, `"` or `=`),
//! else in double quotes with `"` and `\` escaped and control characters
//! written as escapes, as logfmt parsers read them. So
//! `reason=client_closed` reads (and greps) as written, a value with spaces
//! stays one value, and no value, whatever a peer put in it, can end the
//! line or start another. The `log.*` fields of events that come from the
//! `log` crate (a library's) are left out, as tracing's own text format
//! does; JSON lines keep them.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// The text format's field formatter: the event name (`message`) first as
/// it is, then each field as `key=value`, separated by one space.
#[derive(Debug, Clone, Copy, Default)]
pub struct Logfmt;

impl<'w> FormatFields<'w> for Logfmt {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = Fields {
            out: writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct Fields<'w> {
    out: Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl Fields<'_> {
    fn field(&mut self, name: &str, value: &str) {
        if self.result.is_ok() {
            self.result = self.write(name, value);
        }
    }

    fn write(&mut self, name: &str, value: &str) -> fmt::Result {
        if name.starts_with("log.") {
            return Ok(());
        }
        if !std::mem::take(&mut self.first) {
            self.out.write_char(' ')?;
        }
        if name == "message" {
            return write_escaped(&mut self.out, value);
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        write!(self.out, "{name}=")?;
        write_value(&mut self.out, value)
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.field(field.name(), value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.field(field.name(), &value.to_string());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.field(field.name(), &value.to_string());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.field(field.name(), if value { "true" } else { "false" });
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%` fields come here too, through their `Display`.
        self.field(field.name(), &format!("{value:?}"));
    }
}

/// `value` bare when it is one plain word: not empty, no whitespace,
/// control character, `"` or `=`; else quoted.
fn write_value(out: &mut impl fmt::Write, value: &str) -> fmt::Result {
    let bare = !value.is_empty()
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '=');
    if bare {
        return out.write_str(value);
    }
    out.write_char('"')?;
    for c in value.chars() {
        match c {
            '"' => out.write_str("\\\"")?,
            '\\' => out.write_str("\\\\")?,
            c => write_char_escaped(out, c)?,
        }
    }
    out.write_char('"')
}

/// `text` as it is, but for control characters, written as escapes.
fn write_escaped(out: &mut impl fmt::Write, text: &str) -> fmt::Result {
    text.chars().try_for_each(|c| write_char_escaped(out, c))
}

fn write_char_escaped(out: &mut impl fmt::Write, c: char) -> fmt::Result {
    match c {
        '\n' => out.write_str("\\n"),
        '\r' => out.write_str("\\r"),
        '\t' => out.write_str("\\t"),
        c if c.is_control() => write!(out, "\\u{{{:x}}}", u32::from(c)),
        c => out.write_char(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(v: &str) -> String {
        let mut out = String::new();
        write_value(&mut out, v).unwrap();
        out
    }

    #[test]
    fn plain_words_are_bare_and_everything_else_is_one_quoted_value() {
        assert_eq!(value("client_closed"), "client_closed");
        assert_eq!(value("127.0.0.1:8333"), "127.0.0.1:8333");
        assert_eq!(value("[::1]:8333"), "[::1]:8333");
        assert_eq!(value(r#"["a","b"]"#), r#""[\"a\",\"b\"]""#);
        assert_eq!(value("a=b"), r#""a=b""#);
        assert_eq!(value("/path/x-1_2.3,4:5"), "/path/x-1_2.3,4:5");
        assert_eq!(value(""), r#""""#);
        assert_eq!(
            value("connection refused (os error 111)"),
            r#""connection refused (os error 111)""#
        );
        assert_eq!(value(r#""quoted""#), r#""\"quoted\"""#);
        assert_eq!(value(r"back\slash x"), r#""back\\slash x""#);
        // No value can end the line.
        assert_eq!(value("one\ntwo"), r#""one\ntwo""#);
        assert_eq!(value("cr\rtab\tnul\0"), r#""cr\rtab\tnul\u{0}""#);
    }

    /// Through tracing itself: the event name first, then the fields.
    #[test]
    fn an_event_is_its_name_then_key_value_pairs() {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_target(false)
            .without_time()
            .fmt_fields(Logfmt)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let err = "connection refused\nINFO forged";
            tracing::info!(pool = "p", conn = 7u64, up = true, reason = "client_closed", err = %err, "closed");
            // As the `log` crate's records arrive: their origin left out.
            tracing::info!(
                log.target = "reqwest::connect",
                log.line = 929u64,
                "starting"
            );
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            " INFO closed pool=p conn=7 up=true reason=client_closed \
             err=\"connection refused\\nINFO forged\"\n INFO starting\n"
        );
    }
}
