//! Arbitrary bytes as a workload file: the parser must return jobs or an error, never panic;
//! jobs it accepts must compile and place (or be refused) on a small fleet without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

const FLEET: &str = include_str!("../../examples/demo-fleet.toml");

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let catalog = gantry_catalog::Catalog::embedded();
    let Ok(jobs) = gantry_spec::parse_workload(text, catalog) else { return };
    let fleet = gantry_spec::parse_fleet(FLEET, catalog).expect("demo fleet is valid");
    let mut engine = gantry_engine::Engine::new(&fleet, catalog, gantry_engine::EngineConfig::default()).expect("engine");
    for job in jobs.iter().take(64) {
        if let Ok(compiled) = engine.compile(job) {
            let _ = engine.place(&compiled);
        }
    }
    engine.check_invariants().expect("ledger consistent");
});
