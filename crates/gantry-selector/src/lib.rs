//! CEL device selectors (`selector = "device.memory_gib >= 80 && device.architecture == 'hopper'"`).
//!
//! The key decision: the `cel` crate is wrapped behind [`Selector`] and [`DeviceAttributes`], so
//! the rest of gantry never sees a CEL type and the interpreter can be swapped (the CEL crates
//! move fast; see STACK.md). A selector is compiled once per job and evaluated once per *device
//! class* (model × sharing mode × NVLink), not once per GPU, so its cost does not grow with the
//! fleet.
//!
//! Attributes a selector can read, all under `device`:
//!
//! | attribute | type | example |
//! |---|---|---|
//! | `model` | string | `"H100-SXM5-80GB"` |
//! | `architecture` | string | `"hopper"` |
//! | `memory_gib` | int | `80` |
//! | `compute_capability` | double | `9.0` |
//! | `sm_count` | int | `132` (0 if unknown) |
//! | `mig_capable` | bool | `true` |
//! | `nvlink` | bool | `true` when the GPU has NVLink peers |
//! | `mode` | string | `"whole"`, `"mig"`, `"mps"`, `"time-slice"` |

use serde::Serialize;
use std::fmt;

/// Longest selector accepted; a limit so a hostile spec cannot hand the parser megabytes.
pub const SELECTOR_LEN_MAX: usize = 4096;

/// What a selector sees of one GPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeviceAttributes {
    pub model: String,
    pub architecture: String,
    pub memory_gib: i64,
    pub compute_capability: f64,
    pub sm_count: i64,
    pub mig_capable: bool,
    pub nvlink: bool,
    pub mode: String,
}

impl DeviceAttributes {
    /// A plausible device used to check a selector right after compiling it, so references to
    /// attributes that do not exist fail at submit time rather than during scheduling.
    pub fn sample() -> DeviceAttributes {
        DeviceAttributes {
            model: "H100-SXM5-80GB".into(),
            architecture: "hopper".into(),
            memory_gib: 80,
            compute_capability: 9.0,
            sm_count: 132,
            mig_capable: true,
            nvlink: true,
            mode: "whole".into(),
        }
    }
}

/// Why a selector was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("selector is {len} characters, the limit is {SELECTOR_LEN_MAX}")]
    TooLong { len: usize },
    #[error("selector does not parse: {message}")]
    Parse { message: String },
    #[error("selector fails on a device: {message}")]
    Evaluate { message: String },
    #[error("selector must be true or false, it gave {got}")]
    NotBool { got: String },
}

/// A compiled device selector.
pub struct Selector {
    source: String,
    program: cel::Program,
}

impl fmt::Debug for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Selector").field("source", &self.source).finish()
    }
}

impl Selector {
    /// Parse and type-check against a sample device.
    pub fn compile(source: &str) -> Result<Selector, SelectorError> {
        if source.len() > SELECTOR_LEN_MAX {
            return Err(SelectorError::TooLong { len: source.len() });
        }
        // The CEL parser has panicked on some malformed inputs in past releases; a bad selector
        // must be an error for the user, never a crash of the scheduler.
        let parsed = std::panic::catch_unwind(|| cel::Program::compile(source));
        let program = match parsed {
            Ok(Ok(program)) => program,
            Ok(Err(errors)) => {
                return Err(SelectorError::Parse { message: errors.to_string().trim().replace('\n', "; ") });
            }
            Err(_) => return Err(SelectorError::Parse { message: "the CEL parser gave up on this input".into() }),
        };
        let selector = Selector { source: source.to_string(), program };
        selector.matches(&DeviceAttributes::sample())?;
        Ok(selector)
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Does this device satisfy the selector?
    pub fn matches(&self, device: &DeviceAttributes) -> Result<bool, SelectorError> {
        let mut context = cel::Context::default();
        context.add_variable("device", device).map_err(|e| SelectorError::Evaluate { message: e.to_string() })?;
        match self.program.execute(&context) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(SelectorError::NotBool { got: format!("{other:?}") }),
            Err(e) => Err(SelectorError::Evaluate { message: e.to_string() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a10() -> DeviceAttributes {
        DeviceAttributes {
            model: "A10-24GB".into(),
            architecture: "ampere".into(),
            memory_gib: 24,
            compute_capability: 8.6,
            sm_count: 72,
            mig_capable: false,
            nvlink: false,
            mode: "whole".into(),
        }
    }

    #[test]
    fn selects_on_memory_and_architecture() {
        let s = Selector::compile("device.memory_gib >= 80 && device.architecture == 'hopper'").expect("compiles");
        assert!(s.matches(&DeviceAttributes::sample()).expect("evaluates"));
        assert!(!s.matches(&a10()).expect("evaluates"));
    }

    #[test]
    fn string_functions_work() {
        let s =
            Selector::compile("device.model.startsWith('A10') && device.compute_capability >= 8.0").expect("compiles");
        assert!(s.matches(&a10()).expect("evaluates"));
    }

    #[test]
    fn bad_selectors_are_errors_not_panics() {
        let cases = [
            ("device.memory_gib >=", "does not parse"),
            ("device.no_such_attribute == 1", "fails on a device"),
            ("device.memory_gib", "must be true or false"),
            ("((((", "does not parse"),
        ];
        for (source, needle) in cases {
            let err = Selector::compile(source).expect_err(source);
            assert!(err.to_string().contains(needle), "{source}: {err}");
        }
        let long = "true && ".repeat(1000) + "true";
        assert!(matches!(Selector::compile(&long), Err(SelectorError::TooLong { .. })));
    }
}
