//! Problem details (RFC 9457) as JSON, written by hand: a handful of string
//! members and the status do not need a JSON library.

use std::fmt::Write;

use http::StatusCode;

/// A problem details object being written: `type`, `title`, `status` and
/// `detail`, then extension members in the order they are added.
pub(super) struct Problem {
    json: String,
}

impl Problem {
    pub(super) fn new(kind: &str, title: &str, status: StatusCode, detail: &str) -> Self {
        let mut problem = Problem {
            json: String::with_capacity(160 + detail.len()),
        };
        problem.json.push('{');
        problem.push_member("type", kind);
        problem.json.push(',');
        problem.push_member("title", title);
        // A status code is three digits: nothing to escape.
        let _ = write!(problem.json, ",\"status\":{}", status.as_u16());
        problem.json.push(',');
        problem.push_member("detail", detail);
        problem
    }

    /// Adds the extension member `name` (a plain ASCII name) with `value`.
    pub(super) fn member(mut self, name: &str, value: &str) -> Self {
        self.json.push(',');
        self.push_member(name, value);
        self
    }

    pub(super) fn finish(mut self) -> String {
        self.json.push('}');
        self.json
    }

    fn push_member(&mut self, name: &str, value: &str) {
        push_string(&mut self.json, name);
        self.json.push(':');
        push_string(&mut self.json, value);
    }
}

/// `value` as a JSON string: keys and metadata come from requests and
/// holders, so quotes, backslashes and control characters are escaped.
fn push_string(json: &mut String, value: &str) {
    json.push('"');
    for c in value.chars() {
        match c {
            '"' => json.push_str("\\\""),
            '\\' => json.push_str("\\\\"),
            '\n' => json.push_str("\\n"),
            '\r' => json.push_str("\\r"),
            '\t' => json.push_str("\\t"),
            c if c < ' ' => {
                let _ = write!(json, "\\u{:04x}", u32::from(c));
            }
            c => json.push(c),
        }
    }
    json.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_json_strings_cannot_hold() {
        let json = Problem::new("about:blank", "Conflict", StatusCode::CONFLICT, "x")
            .member("key", "a\"b\\c\nd\u{1}é")
            .finish();
        assert_eq!(
            json,
            r#"{"type":"about:blank","title":"Conflict","status":409,"detail":"x","key":"a\"b\\c\nd\u0001é"}"#
        );
    }
}
