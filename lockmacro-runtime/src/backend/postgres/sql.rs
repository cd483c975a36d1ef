//! Values written into statements. Every statement goes as one simple query
//! (no prepared statement, named or unnamed, to outlive it), so that it
//! works through a pooler in transaction mode; values are quoted here.

use std::fmt::Write;
use std::time::Duration;

/// `value` as an escape string literal (`E'...'`): backslashes and quotes
/// doubled, which is exact whatever `standard_conforming_strings` says.
/// Keys reach here checked for NUL, which PostgreSQL's text cannot hold.
pub(super) fn text(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 4);
    quoted.push_str("E'");
    for c in value.chars() {
        match c {
            '\'' => quoted.push_str("''"),
            '\\' => quoted.push_str("\\\\"),
            c => quoted.push(c),
        }
    }
    quoted.push('\'');
    quoted
}

/// `value` as a text literal, or `NULL`.
pub(super) fn text_or_null(value: Option<&str>) -> String {
    value.map_or_else(|| "NULL".to_owned(), text)
}

/// `values` as a `text[]`.
pub(super) fn texts<'a>(values: impl IntoIterator<Item = &'a str>) -> String {
    let mut array = String::from("ARRAY[");
    for (i, value) in values.into_iter().enumerate() {
        if i > 0 {
            array.push(',');
        }
        array.push_str(&text(value));
    }
    array.push_str("]::text[]");
    array
}

/// `values` as an array of `kind` (`bigint`, `integer`).
pub(super) fn numbers(values: impl IntoIterator<Item = u64>, kind: &str) -> String {
    let mut array = String::from("ARRAY[");
    for (i, value) in values.into_iter().enumerate() {
        if i > 0 {
            array.push(',');
        }
        let _ = write!(array, "{value}");
    }
    let _ = write!(array, "]::{kind}[]");
    array
}

/// A duration in whole milliseconds, rounded up, for `interval` arithmetic
/// on the server.
pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros().div_ceil(1000)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::{numbers, text, texts};

    #[test]
    fn quotes_and_backslashes_are_doubled() {
        assert_eq!(text(r"it's a \ key"), r"E'it''s a \\ key'");
        assert_eq!(texts(["a", "b'"]), "ARRAY[E'a',E'b''']::text[]");
        assert_eq!(numbers([1, 2], "bigint"), "ARRAY[1,2]::bigint[]");
    }
}
