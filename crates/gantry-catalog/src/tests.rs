use super::*;
use gantry_types::MigInstanceSpec;
use proptest::prelude::*;

fn layout(spec: &[(&str, u8)]) -> Vec<MigInstanceSpec> {
    spec.iter().map(|&(p, s)| MigInstanceSpec { profile: p.into(), start: s }).collect()
}

fn geometry(model: &str) -> &'static MigGeometry {
    let catalog = Catalog::embedded();
    let id = catalog.lookup(model).expect("model in catalog");
    catalog.model(id).mig.as_ref().expect("MIG-capable")
}

#[test]
fn every_reference_model_is_in_the_catalog() {
    let reference: serde_json::Value = serde_json::from_str(load::EMBEDDED_CATALOG).expect("reference parses");
    let ids: Vec<&str> = reference["gpus"].as_array().expect("gpus").iter().filter_map(|g| g["id"].as_str()).collect();
    assert_eq!(ids.len(), 16);
    for id in ids {
        assert!(Catalog::embedded().lookup(id).is_some(), "{id} missing");
    }
}

#[test]
fn lookups_by_id_nvml_name_and_alias() {
    let c = Catalog::embedded();
    let h100 = c.lookup("H100-SXM5-80GB").expect("id");
    let cases = ["NVIDIA H100 80GB HBM3", "nvidia h100 80gb hbm3", "h100-sxm5-80gb", "H800-SXM5-80GB"];
    for name in cases {
        assert_eq!(c.lookup(name), Some(h100), "{name}");
    }
    assert_eq!(c.model(c.lookup("Tesla T4").expect("nvml")).id, "T4-16GB");
    assert_eq!(c.model(c.lookup("A100-PCIE-40GB").expect("alias")).id, "A100-SXM4-40GB");
    assert_eq!(c.lookup("GeForce RTX 4090"), None);
}

#[test]
fn sources_and_unverified_flags_are_kept() {
    let c = Catalog::embedded();
    let a100 = c.model(c.lookup("A100-SXM4-80GB").expect("id"));
    assert!(a100.unverified);
    assert!(!a100.sources.is_empty());
    assert!(a100.mig.as_ref().expect("mig").profiles.iter().all(|p| p.unverified));
    let h100 = c.model(c.lookup("H100-SXM5-80GB").expect("id"));
    assert!(h100.mig.as_ref().expect("mig").profiles.iter().all(|p| !p.unverified));
}

#[test]
fn same_as_models_inherit_the_mig_table() {
    let c = Catalog::embedded();
    let pcie = c.model(c.lookup("A100-PCIE-80GB").expect("id"));
    let sxm = c.model(c.lookup("A100-SXM4-80GB").expect("id"));
    assert_eq!(pcie.mig, sxm.mig);
}

#[test]
fn every_placement_table_is_self_consistent() {
    for model in Catalog::embedded().models() {
        let Some(g) = &model.mig else {
            assert!(!model.mig_capable());
            continue;
        };
        if g.memory_slices == 8 {
            assert_eq!(g.compute_slices, 7, "{}", model.id);
        }
        for p in &g.profiles {
            for &s in &p.starts {
                assert!(s + p.placement_size <= g.memory_slices, "{} {} start {s}", model.id, p.name);
            }
            // max_instances is reachable: instances of this profile alone, added greedily, reach it.
            let idx = g.profile_index(&p.name).expect("own profile");
            let mut placed = Vec::new();
            while let Some(start) = g.free_start(&placed, idx) {
                placed.push(PlacedInstance { profile: idx, start });
            }
            assert_eq!(placed.len(), p.max_instances as usize, "{} {}", model.id, p.name);
        }
    }
}

#[test]
fn non_mig_models_have_no_geometry() {
    let c = Catalog::embedded();
    for id in ["T4-16GB", "L4-24GB", "V100-32GB", "A10-24GB", "L40S-48GB"] {
        assert!(c.model(c.lookup(id).expect("id")).mig.is_none(), "{id}");
    }
}

#[test]
fn four_3g_on_an_a100_40gb_break_the_instance_limit() {
    let err = geometry("A100-SXM4-40GB")
        .validate_layout("A100-SXM4-40GB", &layout(&[("3g.20gb", 0), ("3g.20gb", 4), ("3g.20gb", 0), ("3g.20gb", 4)]))
        .expect_err("4 x 3g.20gb cannot fit");
    assert!(matches!(err, MigLayoutError::TooManyOfProfile { max: 2, count: 4, .. }), "{err:?}");
    assert!(err.to_string().contains("at most 2 fit (rule: max instances per profile)"), "{err}");
}

#[test]
fn legal_layouts_from_the_issue() {
    let cases: [(&str, &str, &[(&str, u8)]); 4] = [
        ("3x2g+1x1g on A100-80GB", "A100-SXM4-80GB", &[("2g.20gb", 0), ("2g.20gb", 2), ("2g.20gb", 4), ("1g.10gb", 6)]),
        ("4g+3g on A100-80GB", "A100-SXM4-80GB", &[("4g.40gb", 0), ("3g.40gb", 4)]),
        (
            "7x1g on H100",
            "H100-SXM5-80GB",
            &[
                ("1g.10gb", 0),
                ("1g.10gb", 1),
                ("1g.10gb", 2),
                ("1g.10gb", 3),
                ("1g.10gb", 4),
                ("1g.10gb", 5),
                ("1g.10gb", 6),
            ],
        ),
        ("7g whole on A30? no: 4g on A30", "A30-24GB", &[("4g.24gb", 0)]),
    ];
    for (name, model, spec) in cases {
        let result = geometry(model).validate_layout(model, &layout(spec));
        assert!(result.is_ok(), "{name}: {result:?}");
    }
}

#[test]
fn illegal_layouts_name_their_rule() {
    let cases: [(&str, &str, &[(&str, u8)], &str); 6] = [
        ("overlap", "A100-SXM4-80GB", &[("3g.40gb", 0), ("4g.40gb", 0)], "rule: instances may not share"),
        ("bad start", "H100-SXM5-80GB", &[("1g.10gb", 7)], "rule: legal placements"),
        ("unknown profile", "H100-SXM5-80GB", &[("1g.5gb", 0)], "has no MIG profile 1g.5gb"),
        (
            "8 x 1g",
            "H100-SXM5-80GB",
            &[
                ("1g.10gb", 0),
                ("1g.10gb", 1),
                ("1g.10gb", 2),
                ("1g.10gb", 3),
                ("1g.10gb", 4),
                ("1g.10gb", 5),
                ("1g.10gb", 6),
                ("1g.10gb", 6),
            ],
            "rule: max instances per profile",
        ),
        ("two +me", "H100-SXM5-80GB", &[("1g.10gb+me", 0), ("1g.10gb+me", 1)], "max instances per profile"),
        (
            "compute",
            "A100-SXM4-80GB",
            &[("4g.40gb", 0), ("2g.20gb", 4), ("1g.20gb", 6), ("1g.10gb", 6)],
            "rule: compute slices",
        ),
    ];
    for (name, model, spec, needle) in cases {
        let err = geometry(model).validate_layout(model, &layout(spec)).expect_err(name);
        assert!(err.to_string().contains(needle), "{name}: {err}");
    }
}

proptest! {
    /// Whatever order profiles are requested in, every layout `free_start` builds is legal.
    #[test]
    fn layouts_built_by_free_start_are_always_legal(model_pick in 0usize..16, picks in proptest::collection::vec(0u8..16, 0..24)) {
        let c = Catalog::embedded();
        let mig_models: Vec<&GpuModel> = c.models().iter().filter(|m| m.mig.is_some()).collect();
        let model = mig_models[model_pick % mig_models.len()];
        let g = model.mig.as_ref().expect("mig");
        let mut placed = Vec::new();
        for pick in picks {
            let profile = pick % g.profiles.len() as u8;
            if let Some(start) = g.free_start(&placed, profile) {
                placed.push(PlacedInstance { profile, start });
            }
        }
        let spec: Vec<MigInstanceSpec> = placed.iter().map(|p| MigInstanceSpec { profile: g.profiles[p.profile as usize].name.clone(), start: p.start }).collect();
        prop_assert!(g.validate_layout(&model.id, &spec).is_ok());
    }
}

#[test]
fn generic_models_extend_a_copy_of_the_catalog() {
    let base = Catalog::embedded();
    let extended = base.with_generic_models(["G2", "T4-16GB", "P100"]);
    assert_eq!(extended.models().len(), base.models().len() + 2, "known names are not duplicated");
    let g2 = extended.model(extended.lookup("g2").expect("generic model"));
    assert!(g2.mig.is_none() && g2.unverified);
    assert!(base.lookup("G2").is_none(), "the embedded catalog is untouched");
}

/// Whatever counts are asked for, `place_counts` gives a layout every rule accepts with
/// exactly those instances, or an error: for every MIG model, every pair of profiles and
/// counts up to 7 of each.
#[test]
fn placed_counts_are_always_legal_layouts_or_refused() {
    let catalog = Catalog::embedded();
    for model in catalog.models() {
        let Some(geometry) = &model.mig else { continue };
        for a in &geometry.profiles {
            for b in &geometry.profiles {
                for (na, nb) in (1..=7u32).flat_map(|x| (0..=3u32).map(move |y| (x, y))) {
                    let mut counted = vec![(a.name.clone(), na)];
                    if nb > 0 {
                        counted.push((b.name.clone(), nb));
                    }
                    let Ok(layout) = geometry.place_counts(&model.id, &[], &counted) else { continue };
                    assert_eq!(layout.len() as u32, na + nb, "{} {counted:?}", model.id);
                    let specs: Vec<gantry_types::MigInstanceSpec> = layout
                        .iter()
                        .map(|p| gantry_types::MigInstanceSpec {
                            profile: geometry.profiles[p.profile as usize].name.clone(),
                            start: p.start,
                        })
                        .collect();
                    assert!(geometry.validate_layout(&model.id, &specs).is_ok(), "{} {counted:?}", model.id);
                }
            }
        }
    }
}

/// A MIG instance holds what NVML reports, not what its name says; profiles no capture read
/// are estimated from a twin or conservatively, never above the nominal share.
#[test]
fn mig_memory_is_what_the_driver_reports() {
    let catalog = Catalog::embedded();
    let usable = |model: &str, profile: &str| {
        let m = catalog.model(catalog.lookup(model).expect("model"));
        let p = m.mig.as_ref().expect("MIG").profile(profile).expect("profile");
        (m.mig_memory(p).0 as f64 / f64::from(1u32 << 30), p.memory_estimated)
    };
    assert_eq!(usable("A100-SXM4-80GB", "1g.10gb"), (9.5, false));
    assert_eq!(usable("A100-SXM4-80GB", "3g.40gb"), (39.5, false));
    assert_eq!(usable("A100-SXM4-40GB", "1g.5gb"), (4.75, false));
    // Not read on an H100 PCIe: estimated below 10 GiB (the lowest 1-slice ratio seen: H200).
    let (pcie, estimated) = usable("H100-PCIe-80GB", "1g.10gb");
    assert!(estimated && pcie < 9.75 && pcie > 9.0, "{pcie}");
    for model in catalog.models() {
        let Some(g) = &model.mig else { continue };
        for p in &g.profiles {
            let nominal = model.memory.0 / u64::from(g.memory_slices) * u64::from(p.memory_slices);
            let usable = model.mig_memory(p).0;
            assert!(usable > nominal * 8 / 10 && usable <= nominal, "{} {}: {usable} of {nominal}", model.id, p.name);
        }
    }
}

/// Slurm's `AutoDetect=nvml` types a MIG instance by compute slices and NVML's memory rounded
/// to whole GiB (gpu_nvml.c), so a 7g.80gb on an A100-80GB (79.25 GiB) is `7g.79gb`; both that
/// name, with or without slurmd's `nvidia_a100_` prefix, and the catalog's lead to the profile.
#[test]
fn slurm_names_mig_instances_by_reported_memory() {
    let catalog = Catalog::embedded();
    let model = |id: &str| catalog.model(catalog.lookup(id).expect("model"));
    let slurm = |id: &str, profile: &str| {
        let m = model(id);
        m.slurm_mig_type(m.mig.as_ref().expect("MIG").profile(profile).expect("profile"))
    };
    assert_eq!(slurm("A100-SXM4-80GB", "1g.10gb"), "1g.10gb");
    assert_eq!(slurm("A100-SXM4-80GB", "3g.40gb"), "3g.40gb");
    assert_eq!(slurm("A100-SXM4-80GB", "7g.80gb"), "7g.79gb");
    assert_eq!(slurm("A100-SXM4-80GB", "1g.10gb+me"), "1g.10gb");
    assert_eq!(slurm("H200-SXM-141GB", "1g.18gb"), "1g.16gb");
    let a100 = model("A100-SXM4-80GB");
    for ty in ["7g.79gb", "nvidia_a100_7g.79gb", "7g.80gb", "7G.80GB"] {
        assert_eq!(a100.profile_for_slurm_type(ty).map(|p| p.name.as_str()), Some("7g.80gb"), "{ty}");
    }
    assert_eq!(a100.profile_for_slurm_type("1g.10gb").map(|p| p.name.as_str()), Some("1g.10gb"), "not its +me twin");
    assert!(a100.profile_for_slurm_type("2g.12gb").is_none());
    assert_eq!(catalog.profile_for_slurm_type("nvidia_a100_7g.79gb").as_deref(), Some("7g.80gb"));
    // Every model's Slurm names lead back to their profiles.
    for m in catalog.models() {
        let Some(g) = &m.mig else { continue };
        for p in g.profiles.iter().filter(|p| !p.name.ends_with("+me")) {
            assert_eq!(
                m.profile_for_slurm_type(&m.slurm_mig_type(p)).map(|q| &q.name),
                Some(&p.name),
                "{} {}",
                m.id,
                p.name
            );
        }
    }
}

/// `gantry catalog h100` reads a name as `--gpus h100:1` does: an exact name is one model, a
/// prefix every model it starts; a name that matches nothing gets the closest ids.
#[test]
fn a_name_resolves_as_a_jobs_gpu_model_does_and_a_miss_gets_suggestions() {
    let catalog = Catalog::embedded();
    let ids = |name: &str| -> Vec<String> {
        catalog.resolve(name).into_iter().map(|id| catalog.model(id).id.clone()).collect()
    };
    assert_eq!(ids("NVIDIA H100 80GB HBM3"), ["H100-SXM5-80GB"]);
    let h100 = ids("h100");
    for model in ["H100-SXM5-80GB", "H100-PCIe-80GB", "H100-NVL-94GB"] {
        assert!(h100.iter().any(|m| m == model), "{model} in {h100:?}");
    }
    assert!(ids("").is_empty() && ids("zz9").is_empty());
    let close = catalog.suggest("H10-SXM5");
    assert_eq!(close.first(), Some(&"H100-SXM5-80GB"), "{close:?}");
    assert!(catalog.suggest("qqqq").is_empty());
}

/// The placement search is complete: every multiset of profiles that some legal layout holds
/// (every legal layout of every MIG model, enumerated by brute force) is placed from its
/// counts alone — NVIDIA's `all-balanced` among them, which a largest-first greedy pass
/// refused on 7-slice GPUs.
#[test]
fn every_legal_layouts_counts_are_placed() {
    fn enumerate(
        geometry: &crate::mig::MigGeometry,
        options: &[PlacedInstance],
        at: usize,
        layout: &mut Vec<PlacedInstance>,
        seen: &mut std::collections::BTreeSet<Vec<(String, u32)>>,
    ) {
        if !layout.is_empty() {
            let mut counts: std::collections::BTreeMap<String, u32> = Default::default();
            for i in layout.iter() {
                *counts.entry(geometry.profiles[i.profile as usize].name.clone()).or_default() += 1;
            }
            seen.insert(counts.into_iter().collect());
        }
        for (next, option) in options.iter().enumerate().skip(at) {
            if geometry.free_starts(layout, option.profile).any(|s| s == option.start) {
                layout.push(*option);
                enumerate(geometry, options, next + 1, layout, seen);
                layout.pop();
            }
        }
    }
    let catalog = Catalog::embedded();
    for model in catalog.models() {
        let Some(geometry) = &model.mig else { continue };
        let options: Vec<PlacedInstance> = geometry
            .profiles
            .iter()
            .enumerate()
            .flat_map(|(i, p)| p.starts.iter().map(move |&start| PlacedInstance { profile: i as u8, start }))
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        enumerate(geometry, &options, 0, &mut Vec::new(), &mut seen);
        assert!(seen.len() > 10, "{}: {} layouts", model.id, seen.len());
        for counts in &seen {
            let placed = geometry.place_counts(&model.id, &[], counts);
            assert!(placed.is_ok(), "{}: {counts:?} is a legal layout's counts: {placed:?}", model.id);
        }
    }
    // Counts no GPU can hold are refused at once, naming the rule.
    let a100 = catalog.model(catalog.lookup("A100-SXM4-80GB").expect("id")).mig.as_ref().expect("MIG");
    let err = a100.place_counts("A100-SXM4-80GB", &[], &[("1g.10gb".into(), 1_000_000)]).expect_err("too many");
    assert!(err.to_string().contains("1g.10gb"), "{err}");
}
