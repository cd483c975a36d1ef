//! RESP, both ways: requests in (multibulk arrays of bulk strings, or an
//! inline line as `redis-cli` and `nc` send), replies out in RESP2 or RESP3.
//!
//! Written here rather than taken from a crate: a server reads one shape of
//! request and writes a dozen reply types, a hundred lines against a
//! dependency whose client-oriented frame types would still need mapping.

use crate::keyspace::Bytes;
use crate::reply::{Reply, format_double};

/// A request that cannot be read; the server answers it and closes, as
/// Redis does.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtocolError(pub String);

/// Largest bulk argument Redis accepts by default (`proto-max-bulk-len`).
const MAX_BULK: usize = 512 * 1024 * 1024;

/// Reads one request from the front of `buf`: `Ok(None)` until it is
/// complete, else the arguments and how many bytes they took. An empty
/// inline line gives an empty request, which the server skips.
pub fn parse_request(buf: &[u8]) -> Result<Option<(Vec<Bytes>, usize)>, ProtocolError> {
    let Some(first) = buf.first() else {
        return Ok(None);
    };
    if *first != b'*' {
        let Some(end) = find_crlf(buf, 0).or_else(|| buf.iter().position(|b| *b == b'\n')) else {
            return Ok(None);
        };
        let line = &buf[..end];
        let consumed = if buf.get(end) == Some(&b'\r') {
            end + 2
        } else {
            end + 1
        };
        let args = line
            .split(|b| b.is_ascii_whitespace())
            .filter(|part| !part.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        return Ok(Some((args, consumed)));
    }
    let Some((count, mut at)) = read_number(buf, 1)? else {
        return Ok(None);
    };
    if count > 1024 * 1024 {
        return Err(ProtocolError("invalid multibulk length".into()));
    }
    let mut args = Vec::with_capacity(count.max(0) as usize);
    for _ in 0..count.max(0) {
        match buf.get(at) {
            None => return Ok(None),
            Some(b'$') => {}
            Some(other) => {
                return Err(ProtocolError(format!(
                    "expected '$', got '{}'",
                    *other as char
                )));
            }
        }
        let Some((len, start)) = read_number(buf, at + 1)? else {
            return Ok(None);
        };
        if len < 0 || len as usize > MAX_BULK {
            return Err(ProtocolError("invalid bulk length".into()));
        }
        let end = start + len as usize;
        if buf.len() < end + 2 {
            return Ok(None);
        }
        args.push(buf[start..end].to_vec());
        at = end + 2;
    }
    Ok(Some((args, at)))
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| from + i)
}

/// The number from `at` to the next CRLF, and where the text after it
/// starts.
fn read_number(buf: &[u8], at: usize) -> Result<Option<(i64, usize)>, ProtocolError> {
    let Some(end) = find_crlf(buf, at) else {
        if buf.len() - at > 32 {
            return Err(ProtocolError("invalid length".into()));
        }
        return Ok(None);
    };
    let text =
        std::str::from_utf8(&buf[at..end]).map_err(|_| ProtocolError("invalid length".into()))?;
    let n = text
        .parse()
        .map_err(|_| ProtocolError("invalid length".into()))?;
    Ok(Some((n, end + 2)))
}

/// Writes `reply` in RESP3 if `resp3`, else in RESP2.
pub fn encode(reply: &Reply, resp3: bool, out: &mut Vec<u8>) {
    let line = |out: &mut Vec<u8>, prefix: u8, text: &str| {
        out.push(prefix);
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(b"\r\n");
    };
    match reply {
        Reply::Status(text) => line(out, b'+', text),
        Reply::Error(text) => line(out, b'-', &text.replace(['\r', '\n'], " ")),
        Reply::Int(i) => line(out, b':', &i.to_string()),
        Reply::Bulk(bytes) => {
            line(out, b'$', &bytes.len().to_string());
            out.extend_from_slice(bytes);
            out.extend_from_slice(b"\r\n");
        }
        Reply::Nil if resp3 => out.extend_from_slice(b"_\r\n"),
        Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
        Reply::NilArray if resp3 => out.extend_from_slice(b"_\r\n"),
        Reply::NilArray => out.extend_from_slice(b"*-1\r\n"),
        Reply::Double(d) if resp3 => line(out, b',', &format_double(*d)),
        Reply::Double(d) => encode(&Reply::bulk(format_double(*d)), false, out),
        Reply::Array(items) => {
            line(out, b'*', &items.len().to_string());
            items.iter().for_each(|item| encode(item, resp3, out));
        }
        Reply::Push(items) => {
            line(
                out,
                if resp3 { b'>' } else { b'*' },
                &items.len().to_string(),
            );
            items.iter().for_each(|item| encode(item, resp3, out));
        }
        Reply::Map(pairs) => {
            if resp3 {
                line(out, b'%', &pairs.len().to_string());
            } else {
                line(out, b'*', &(pairs.len() * 2).to_string());
            }
            for (key, value) in pairs {
                encode(key, resp3, out);
                encode(value, resp3, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_whole_or_not_at_all() {
        let full = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n";
        let (args, used) = parse_request(full).unwrap().unwrap();
        assert_eq!(args, vec![b"GET".to_vec(), b"k".to_vec()]);
        assert_eq!(
            parse_request(&full[used..]).unwrap().unwrap().0,
            vec![b"PING".to_vec()]
        );
        for cut in 1..used {
            assert_eq!(parse_request(&full[..cut]).unwrap(), None, "cut at {cut}");
        }
        assert_eq!(
            parse_request(b"SET a  b\r\n").unwrap().unwrap().0,
            vec![b"SET".to_vec(), b"a".to_vec(), b"b".to_vec()]
        );
        assert!(parse_request(b"*1\r\n+x\r\n").is_err());
    }

    #[test]
    fn replies_in_both_protocols() {
        let mut two = Vec::new();
        let mut three = Vec::new();
        let reply = Reply::Array(vec![
            Reply::Nil,
            Reply::Double(1.5),
            Reply::Map(vec![(Reply::bulk("a"), Reply::Int(1))]),
        ]);
        encode(&reply, false, &mut two);
        encode(&reply, true, &mut three);
        assert_eq!(two, b"*3\r\n$-1\r\n$3\r\n1.5\r\n*2\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(three, b"*3\r\n_\r\n,1.5\r\n%1\r\n$1\r\na\r\n:1\r\n");
        let mut nil = Vec::new();
        encode(&Reply::NilArray, false, &mut nil);
        assert_eq!(nil, b"*-1\r\n");
    }
}
