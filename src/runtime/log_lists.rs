//! Log fields that are lists: written as JSON arrays in JSON logs (and as
//! the quoted text `"[\"a\",\"b\"]"` in text logs), though tracing records every field value as
//! a number, a bool or a string.
//!
//! The field's value is [`List`]: its `Display` is the JSON array. tracing's
//! JSON formatter writes that as a string; [`ArraysInJson`] wraps the
//! formatter and puts the array itself in place of the string, for the
//! field names in [`LIST_FIELDS`] only, so no other field's text can
//! become structure.

use std::fmt;

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The fields logged as [`List`]s.
pub const LIST_FIELDS: [&str; 7] = [
    "keys",
    "pools_added",
    "pools_removed",
    "pools_changed",
    "backends_added",
    "backends_removed",
    "backends_changed",
];

/// A list field's value: `Display` writes it as a JSON array of strings.
pub struct List<'a, T>(pub &'a [T]);

impl<T: AsRef<str>> fmt::Display for List<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let items: Vec<&str> = self.0.iter().map(AsRef::as_ref).collect();
        // Serializing strings cannot fail.
        let text = serde_json::to_string(&items).map_err(|_| fmt::Error)?;
        f.write_str(&text)
    }
}

/// A JSON event formatter whose [`LIST_FIELDS`] come out as arrays.
pub struct ArraysInJson<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for ArraysInJson<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        // Only a string value that starts with `[` can be a list.
        if line.contains("\":\"[") {
            for name in LIST_FIELDS {
                line = unquote_array(&line, name);
            }
        }
        writer.write_str(&line)
    }
}

/// `line` with the string value of top-level field `name`, when it holds a
/// JSON array, replaced by that array.
fn unquote_array(line: &str, name: &str) -> String {
    let key = format!("\"{name}\":");
    let Some(at) = line.find(&key) else {
        return line.to_owned();
    };
    let start = at + key.len();
    let rest = &line[start..];
    let mut strings = serde_json::Deserializer::from_str(rest).into_iter::<String>();
    let Some(Ok(text)) = strings.next() else {
        return line.to_owned();
    };
    let end = start + strings.byte_offset();
    match serde_json::from_str::<Vec<serde_json::Value>>(&text) {
        Ok(_) => format!("{}{text}{}", &line[..start], &line[end..]),
        Err(_) => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_field_becomes_an_array_and_nothing_else_changes() {
        let list = List(&["admin.listen", "a\"b"]).to_string();
        assert_eq!(list, r#"["admin.listen","a\"b"]"#);
        let quoted = serde_json::to_string(&list).unwrap();
        let line = format!(r#"{{"message":"reload_partial","keys":{quoted},"err":"[1]"}}"#);
        let fixed = unquote_array(&line, "keys");
        let value: serde_json::Value = serde_json::from_str(&fixed).unwrap();
        assert_eq!(value["keys"], serde_json::json!(["admin.listen", "a\"b"]));
        assert_eq!(value["err"], "[1]", "not a list field: left a string");
        assert_eq!(unquote_array(&line, "pools_added"), line);
        // A string that is no array stays a string.
        let plain = r#"{"keys":"[not json"}"#;
        assert_eq!(unquote_array(plain, "keys"), plain);
    }
}
