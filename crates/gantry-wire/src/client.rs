//! A small blocking HTTP/1.1 client for the CLI and the tests: one request per connection
//! (`Connection: close`), plain HTTP to the controller (loopback or a trusted network; TLS
//! comes with auth). Our own 100 lines rather than an HTTP client stack.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Why a request got no answer (an answer with an error status is an answer: `Ok`).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server address is not `http://HOST:PORT`.
    #[error("{0}")]
    Address(String),
    #[error("cannot reach the gantry controller at {server}: {source} (is `gantry serve` running?)")]
    Unreachable { server: String, source: std::io::Error },
    #[error("the token contains a line break")]
    BadToken,
    /// Sending or reading failed midway.
    #[error("{0}")]
    Io(String),
    /// The answer is not HTTP as this client reads it.
    #[error("malformed response: {0}")]
    Malformed(String),
}

/// Largest response read (a job list of a big queue is a few MiB).
const RESPONSE_BYTES_MAX: u64 = 256 << 20;

/// `http://host:port` → `host:port`.
fn authority(server: &str) -> Result<&str, ClientError> {
    let rest = server.strip_prefix("http://").ok_or_else(|| {
        ClientError::Address(format!("server {server:?} must start with http:// (https comes with authentication)"))
    })?;
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.contains('/') {
        return Err(ClientError::Address(format!("server {server:?} must be http://HOST:PORT")));
    }
    Ok(rest)
}

/// Send `method path` with an optional body and bearer token; returns the status code and the
/// body text.
pub fn request(
    server: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, String), ClientError> {
    let host = authority(server)?;
    let mut stream =
        TcpStream::connect(host).map_err(|source| ClientError::Unreachable { server: server.to_string(), source })?;
    stream.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| ClientError::Io(e.to_string()))?;
    let body = body.unwrap_or("");
    if token.is_some_and(|t| t.contains(['\r', '\n'])) {
        return Err(ClientError::BadToken);
    }
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{auth}Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .and_then(|_| stream.write_all(body.as_bytes()))
        .map_err(|e| ClientError::Io(e.to_string()))?;
    let mut raw = Vec::new();
    stream
        .take(RESPONSE_BYTES_MAX)
        .read_to_end(&mut raw)
        .map_err(|e| ClientError::Io(format!("reading the response: {e}")))?;
    let split =
        raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| ClientError::Malformed("no header end".into()))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut payload = raw[split + 4..].to_vec();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ClientError::Malformed(format!("status line {:?}", head.lines().next().unwrap_or(""))))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if chunked {
        payload = dechunk(&payload)?;
    }
    Ok((status, String::from_utf8_lossy(&payload).into_owned()))
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, ClientError> {
    let mut out = Vec::new();
    loop {
        let line_end =
            data.windows(2).position(|w| w == b"\r\n").ok_or_else(|| ClientError::Malformed("chunk".into()))?;
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| ClientError::Malformed(format!("chunk size {size_text:?}")))?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size + 2 {
            return Err(ClientError::Malformed("truncated chunk".into()));
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_must_be_plain_http_host_port() {
        assert_eq!(authority("http://127.0.0.1:8177/").expect("valid"), "127.0.0.1:8177");
        assert!(authority("https://x:1").expect_err("tls").to_string().contains("must start with http://"));
        assert!(authority("http://x:1/v1").expect_err("path").to_string().contains("must be http://HOST:PORT"));
    }

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").expect("valid"), b"abcde");
        assert!(dechunk(b"zz\r\n").is_err());
        assert!(dechunk(b"9\r\nabc\r\n").is_err());
    }
}
