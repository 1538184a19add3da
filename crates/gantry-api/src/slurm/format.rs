//! Slurm's `-o` formats (`%.18i %9P %N`): text, and fields by letter with a width —
//! `%.N` right-aligned, `%N` (or `%-N`) left-aligned, cut to the width; without one, as wide
//! as the value. `squeue` and `sinfo` give the letters their meanings.

use crate::text::shown;

/// The pieces of a format: text, or a field with its width and alignment.
pub enum Piece {
    Text(String),
    Field { key: char, width: Option<usize>, right: bool },
}

pub fn pieces(format: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut chars = format.chars().peekable();
    let mut text = String::new();
    while let Some(c) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        let right = chars.next_if_eq(&'.').is_some();
        chars.next_if_eq(&'-');
        let mut digits = String::new();
        while let Some(d) = chars.next_if(|d| d.is_ascii_digit()) {
            digits.push(d);
        }
        let Some(key) = chars.next() else { break };
        if !text.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut text)));
        }
        out.push(Piece::Field { key, width: digits.parse().ok(), right });
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    out
}

/// One line: each field's value from `value`, trailing blanks cut.
pub fn render(pieces: &[Piece], value: impl Fn(char) -> String) -> String {
    let mut line = String::new();
    for p in pieces {
        match p {
            Piece::Text(t) => line += t,
            Piece::Field { key, width, right } => {
                let v = shown(&value(*key));
                line += &match (width, right) {
                    (Some(w), true) => format!("{:>w$}", v.chars().take(*w).collect::<String>()),
                    (Some(w), false) => format!("{:<w$}", v.chars().take(*w).collect::<String>()),
                    (None, _) => v,
                };
            }
        }
    }
    line.trim_end().to_string() + "\n"
}
