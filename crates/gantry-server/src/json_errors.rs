//! hyper answers a request it cannot parse itself, before any handler sees it: a malformed
//! request line or header is `400 Bad Request`, too many or too large headers `431`, each with
//! an empty body and `connection: close`. Every other error of the API is a JSON object with
//! `error`; so are these, by this wrapper around a connection's stream: an answer that starts
//! like hyper's (a 4xx, `connection: close`, `content-length: 0` — never one of the API's,
//! whose errors all have a body) is sent instead as the same status with a JSON body saying
//! what was wrong.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection's stream whose writes are watched for hyper's bodiless error answers.
#[derive(Debug)]
pub struct JsonErrors<I> {
    inner: I,
    /// A rewritten answer not yet all written.
    pending: Vec<u8>,
}

impl<I> JsonErrors<I> {
    pub fn new(inner: I) -> JsonErrors<I> {
        JsonErrors { inner, pending: Vec::new() }
    }
}

/// hyper's answer to an unparsable request, rewritten, if `head` is one.
fn rewrite(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let (status, error) = if text.starts_with("HTTP/1.1 400 ") {
        ("400 Bad Request", "malformed request: its request line or a header could not be parsed as HTTP/1.1")
    } else if text.starts_with("HTTP/1.1 431 ") {
        ("431 Request Header Fields Too Large", "the request's headers are too many or too large")
    } else {
        return None;
    };
    let lower = text.to_ascii_lowercase();
    if !text.ends_with("\r\n\r\n")
        || !lower.contains("\r\ncontent-length: 0\r\n")
        || !lower.contains("\r\nconnection: close\r\n")
    {
        return None;
    }
    let body = serde_json::json!({ "error": error }).to_string();
    Some(
        format!(
            "HTTP/1.1 {status}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<I: AsyncWrite + Unpin> JsonErrors<I> {
    /// Write what is pending; ready once nothing is.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.pending.is_empty() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.pending) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    self.pending.drain(..n);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for JsonErrors<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for JsonErrors<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.drain(cx)?.is_pending() {
            return Poll::Pending;
        }
        if let Some(answer) = rewrite(buf) {
            this.pending = answer;
            // The rewritten answer stands for all of hyper's; it is written out by the
            // following calls (hyper flushes, then shuts the connection down).
            let _ = this.drain(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.drain(cx)?.is_pending() {
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.drain(cx)?.is_pending() {
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    /// One contiguous buffer per write (hyper then writes each answer's head whole), so an
    /// error answer can be recognised.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_bodiless_errors_are_rewritten() {
        let canned = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: Thu, 26 Nov 2026 00:39:25 GMT\r\n\r\n";
        let answer = String::from_utf8(rewrite(canned).expect("rewritten")).expect("text");
        assert!(answer.starts_with("HTTP/1.1 431 ") && answer.contains("content-type: application/json"), "{answer}");
        let body = answer.split("\r\n\r\n").nth(1).expect("a body");
        let json: serde_json::Value = serde_json::from_str(body).expect("JSON");
        assert!(json["error"].as_str().is_some_and(|e| e.contains("headers")), "{json}");
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 17\r\n\r\n{\"error\":\"nope\"}";
        assert_eq!(rewrite(ours), None, "the API's own answers are left alone");
        assert_eq!(rewrite(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"), None);
    }
}
