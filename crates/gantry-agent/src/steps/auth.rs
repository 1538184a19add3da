//! Proof of belonging to a run without showing its key: each side of a step connection sends
//! a fresh random challenge and the other answers with HMAC-SHA256 under the run's step key
//! over a role label, the challenge and what it asks. A process listening on a port it should
//! not hold learns neither the key nor an answer it could reuse.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::io::Read;

/// A fresh challenge: 16 bytes from the kernel's random source, in hex.
pub fn challenge() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(hex(&bytes))
}

/// The answer to `challenge` for `role` (what the answer is for) over `message`.
pub fn answer(key: &str, role: &str, challenge: &str, message: &str) -> String {
    hex(&mac(key, role, challenge, message).finalize().into_bytes())
}

/// Whether `answer` is the right one (compared in constant time).
pub fn check(key: &str, role: &str, challenge: &str, message: &str, answer: &str) -> bool {
    let Some(bytes) = unhex(answer) else { return false };
    mac(key, role, challenge, message).verify_slice(&bytes).is_ok()
}

fn mac(key: &str, role: &str, challenge: &str, message: &str) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes a key of any length");
    for part in [role, challenge, message] {
        mac.update(&(part.len() as u64).to_be_bytes());
        mac.update(part.as_bytes());
    }
    mac
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_key_holder_answers_and_an_answer_fits_one_challenge() {
        let c = challenge().expect("urandom");
        assert_eq!(c.len(), 32);
        let a = answer("k1", "order", &c, "{\"argv\":[\"true\"]}");
        assert!(check("k1", "order", &c, "{\"argv\":[\"true\"]}", &a));
        assert!(!check("k2", "order", &c, "{\"argv\":[\"true\"]}", &a), "another key");
        assert!(!check("k1", "order", &challenge().expect("urandom"), "{\"argv\":[\"true\"]}", &a), "replayed");
        assert!(!check("k1", "order", &c, "{\"argv\":[\"id\"]}", &a), "another order");
        assert!(!check("k1", "host", &c, "{\"argv\":[\"true\"]}", &a), "another role");
        for bad in ["", "zz", "abc", "é1"] {
            assert!(!check("k1", "order", &c, "x", bad));
        }
    }
}
