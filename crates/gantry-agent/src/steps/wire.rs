//! What step connections carry: one JSON object per line, each line bounded (a peer that
//! sends more is cut off, not buffered).

use super::StepError;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};

/// The longest line a step connection accepts: an order carries `srun`'s environment and
/// argv, which the kernel bounds well below this.
pub const MAX_LINE: u64 = 4 << 20;

/// What a listener says first: the challenge the caller must answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Challenge {
    pub challenge: String,
}

/// A step host reporting to its hub: where it listens, its answer, and its own challenge for
/// the hub.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    pub node_index: u32,
    pub port: u16,
    pub answer: String,
    pub challenge: String,
}

/// The hub's reply to a report: its own answer, or why not.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub enum Welcome {
    Answer(String),
    Refused(String),
}

/// `srun` to a step host: one task to run (`order` is a [`TaskOrder`] as JSON, the text the
/// answer covers).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signed {
    pub order: String,
    pub answer: String,
}

/// One task of a step, as its node runs it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskOrder {
    pub argv: Vec<String>,
    /// Variables over the node's own (srun's environment and the task's place in the step).
    pub env: Vec<(String, String)>,
    pub cwd: Option<String>,
    /// Its place among the step's tasks on its node (its GPUs with `gpus_per_task`).
    pub local_id: u32,
    pub gpus_per_task: Option<u32>,
}

/// A step host to `srun`: a task's output, its end, or why it did not start.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub enum News {
    Out(String),
    Err(String),
    Exit(i32),
    Refused(String),
}

/// Write one message as a line.
pub fn send(to: &mut impl Write, message: &impl Serialize) -> Result<(), StepError> {
    let mut line = serde_json::to_vec(message).expect("step messages serialize");
    line.push(b'\n');
    to.write_all(&line).and_then(|()| to.flush()).map_err(StepError::io("cannot write to a step connection"))
}

/// Read one message; `None` at the end of the connection.
pub fn receive<T: for<'de> Deserialize<'de>>(from: &mut impl BufRead) -> Result<Option<T>, StepError> {
    let mut line = Vec::new();
    let read = std::io::Read::take(from, MAX_LINE + 1)
        .read_until(b'\n', &mut line)
        .map_err(StepError::io("cannot read a step connection"))?;
    if read == 0 {
        return Ok(None);
    }
    if line.len() as u64 > MAX_LINE {
        return Err(StepError::Refused(format!("a step message over {MAX_LINE} bytes")));
    }
    serde_json::from_slice(&line).map(Some).map_err(|e| StepError::Refused(format!("a malformed step message: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_bad_lines_are_refused() {
        let mut buf = Vec::new();
        send(&mut buf, &News::Out("hi".into())).expect("written");
        send(&mut buf, &News::Exit(3)).expect("written");
        let mut r = std::io::BufReader::new(&buf[..]);
        assert_eq!(receive::<News>(&mut r).expect("ok"), Some(News::Out("hi".into())));
        assert_eq!(receive::<News>(&mut r).expect("ok"), Some(News::Exit(3)));
        assert_eq!(receive::<News>(&mut r).expect("ok"), None);
        let mut r = std::io::BufReader::new(&b"{\"exit\": 1, \"more\": 2}\n"[..]);
        assert!(receive::<News>(&mut r).is_err());
        let long = vec![b'x'; MAX_LINE as usize + 10];
        let mut r = std::io::BufReader::new(&long[..]);
        assert!(matches!(receive::<News>(&mut r), Err(StepError::Refused(m)) if m.contains("over")));
    }
}
