//! Arbitrary bytes as a fleet file: a fleet or an error, never a panic; an accepted fleet
//! must build an engine (every MIG layout legal, every model known).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let catalog = gantry_catalog::Catalog::embedded();
    if let Ok(fleet) = gantry_spec::parse_fleet(text, catalog) {
        if fleet.nodes.len() <= 1000 {
            gantry_engine::Engine::new(&fleet, catalog, gantry_engine::EngineConfig::default()).expect("a validated fleet builds an engine");
        }
    }
});
