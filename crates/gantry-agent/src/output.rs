//! Reading a task's output in pieces: from an offset (a reader following it) or its end (a
//! reader asking for the latest), at most a bounded number of bytes, through the agent's own
//! checked file access ([`crate::files`]: no name from a job becomes a path, no symlink is
//! followed, no FIFO blocks the reader). The agent answers the controller's reads with it, and
//! a `serve --local` controller reads its in-process agents' files with it: both give the same
//! bytes for the same read.

use crate::files::{JobDir, Kind};
use gantry_wire::{LogChunk, LogRead, LogStream};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Part of one stream: `bytes` from `offset`, of a stream `size` bytes long when read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Piece {
    pub offset: u64,
    pub size: u64,
    pub bytes: Vec<u8>,
}

impl Piece {
    /// Where the next read goes on from.
    pub fn end(&self) -> u64 {
        self.offset + self.bytes.len() as u64
    }
}

/// The agent's file kind of a stream.
pub fn kind(stream: LogStream) -> Kind {
    match stream {
        LogStream::Out => Kind::Out,
        LogStream::Err => Kind::Err,
    }
}

/// Read task `rank`'s `stream` of run (`job`, `attempt`) under `data_dir`: from `offset`, or
/// the last `max` bytes when `offset` is `None`; at most `max` bytes, never ending inside a
/// UTF-8 character unless the stream does (a follower's next read starts where this ends),
/// and, read from the end, starting at a character. A stream not written yet is empty.
pub fn read_piece(
    data_dir: &Path,
    (job, attempt, rank): (u64, u32, u32),
    stream: LogStream,
    offset: Option<u64>,
    max: u64,
) -> std::io::Result<Piece> {
    let opened = JobDir::open(data_dir, job, attempt, false).and_then(|dir| dir.open_log(rank, kind(stream)));
    let mut file = match opened {
        Ok(Some(file)) => file,
        Ok(None) => return Ok(Piece::default()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Piece::default()),
        Err(e) => return Err(e),
    };
    let size = file.metadata()?.len();
    let from_end = offset.is_none();
    let start = offset.unwrap_or(size.saturating_sub(max)).min(size);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes)?;
    let mut piece = Piece { offset: start, size: size.max(start + bytes.len() as u64), bytes };
    if from_end && piece.offset > 0 {
        let skip = piece.bytes.iter().take(3).take_while(|b| is_continuation(**b)).count();
        piece.bytes.drain(..skip);
        piece.offset += skip as u64;
    }
    let whole = complete_utf8_len(&piece.bytes);
    if whole > 0 {
        piece.bytes.truncate(whole);
    }
    Ok(piece)
}

/// Is `b` a UTF-8 continuation byte (`10xxxxxx`)?
fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// The length of `bytes` without a UTF-8 character cut short at its end (what is not UTF-8
/// at all is kept: output need not be text).
fn complete_utf8_len(bytes: &[u8]) -> usize {
    let tail = bytes.len().saturating_sub(4);
    for at in (tail..bytes.len()).rev() {
        let b = bytes[at];
        if is_continuation(b) {
            continue;
        }
        let needs = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if bytes.len() - at < needs { at } else { bytes.len() };
    }
    bytes.len()
}

/// The agent's answer to the controller's `read` of one of its tasks' output.
pub fn answer(data_dir: &Path, read: &LogRead) -> LogChunk {
    let max = read.max_bytes.min(gantry_wire::LOG_READ_BYTES_MAX);
    match read_piece(data_dir, (read.job, read.attempt, read.rank), read.stream, read.offset, max) {
        Ok(piece) => LogChunk::new(read.id, piece.offset, piece.size, &piece.bytes),
        Err(e) => LogChunk {
            id: read.id,
            error: Some(format!("this output cannot be read on its node: {e}")),
            ..LogChunk::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(tag: &str, text: &[u8]) -> std::path::PathBuf {
        let data = std::env::temp_dir().join(format!("gantry-output-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data).expect("dir");
        let dir = JobDir::open(&data, 7, 0, true).expect("job dir");
        dir.append(0, Kind::Out, std::str::from_utf8(text).expect("utf-8")).expect("writes");
        data
    }

    #[test]
    fn a_stream_reads_from_an_offset_or_its_end_in_whole_characters() {
        let data = written("pieces", "héllo wörld\n".as_bytes());
        let read = |offset, max| read_piece(&data, (7, 0, 0), LogStream::Out, offset, max).expect("reads");
        let whole = read(Some(0), 1 << 20);
        assert_eq!((whole.offset, whole.size, whole.bytes.as_slice()), (0, 14, "héllo wörld\n".as_bytes()));
        // Two bytes stop inside "é": the piece ends before it, and the next read starts there.
        let first = read(Some(0), 2);
        assert_eq!(first.bytes, b"h");
        let next = read(Some(first.end()), 2);
        assert_eq!(next.bytes, "é".as_bytes());
        // From the end: starts at a character, not inside "ö".
        let last = read(None, 5);
        assert_eq!(String::from_utf8(last.bytes.clone()).expect("utf-8"), "rld\n");
        assert_eq!(last.end(), 14);
        // Past the end: nothing, and where the stream ends.
        let beyond = read(Some(99), 10);
        assert_eq!((beyond.offset, beyond.bytes.len()), (14, 0));
        // A task not started yet, or a stream never written: empty, not an error.
        assert_eq!(read_piece(&data, (8, 0, 0), LogStream::Out, None, 10).expect("reads"), Piece::default());
        assert_eq!(read_piece(&data, (7, 0, 0), LogStream::Err, None, 10).expect("reads"), Piece::default());
        let _ = std::fs::remove_dir_all(&data);
    }

    #[test]
    fn bytes_that_are_not_utf8_are_carried_as_they_are() {
        assert_eq!(complete_utf8_len(&[0xFF, 0xFE, 0x80]), 3, "not UTF-8 at all: kept");
        assert_eq!(complete_utf8_len(&[b'a', 0xE2, 0x82]), 1, "a cut euro sign is left for later");
        assert_eq!(complete_utf8_len(&[0xE2, 0x82]), 0, "all cut: the caller keeps it");
        assert_eq!(complete_utf8_len(&[b'a', 0xE2, 0x82, 0xAC]), 4);
        let chunk = LogChunk::new(3, 10, 13, &[0, 0xFF, b'\n']);
        assert_eq!(chunk.bytes(), Some(vec![0, 0xFF, b'\n']));
        assert_eq!(LogChunk { data: "not base64!".into(), ..chunk }.bytes(), None);
    }
}
