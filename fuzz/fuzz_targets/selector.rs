//! Arbitrary text as a CEL device selector: compiled or refused, never a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(selector) = gantry_selector::Selector::compile(text) {
        let _ = selector.matches(&gantry_selector::DeviceAttributes::sample());
    }
});
