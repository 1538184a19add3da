//! MIG geometry: which GPU-instance layouts a model can hold.
//!
//! A layout is legal when every instance sits at one of its profile's legal starts on the
//! memory-slice axis, no two instances overlap, no profile exceeds its instance limit, the
//! compute slices add up to at most the GPU's, the GPU-instance count stays within its limit, and
//! at most one instance owns the media engines (`+me`). Each broken rule has its own error, so a
//! fleet file that asks for 4 × 3g.20gb on an A100-40GB is told which rule it broke.

use gantry_types::MigInstanceSpec;

/// Most instances the placement search tries before giving up on a layout given by counts.
/// A GPU holds at most 7 instances with at most 7 starts each, and instances of one profile
/// are tried in increasing order only, so a real layout needs a few hundred steps; the bound
/// keeps a hostile fleet file (counts far past any GPU's) from costing more than a moment.
pub const PLACEMENT_SEARCH_STEPS: u32 = 100_000;

/// The MIG table of one model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigGeometry {
    pub compute_slices: u8,
    pub memory_slices: u8,
    pub max_gpu_instances: u8,
    pub profiles: Vec<MigProfile>,
}

/// One GPU-instance profile, e.g. `3g.40gb`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigProfile {
    pub name: String,
    /// What `nvidia-smi mig -lgip` prints and NVML's create calls take.
    pub profile_id: u32,
    pub compute_slices: u8,
    pub memory_slices: u8,
    pub memory_gb_nominal: u32,
    /// Usable memory of one instance as NVML reports it (`nvidia-smi mig -lgip`'s GiB from
    /// the catalog's captures): less than the name says (A100-80GB 1g.10gb: 9.5 GiB). Always
    /// set once the catalog is loaded; see `memory_estimated`.
    pub memory_reported: Option<gantry_types::Bytes>,
    /// `memory_reported` was not read from a capture but estimated (a twin profile's, or the
    /// nominal share scaled by the lowest ratio seen for as many slices).
    pub memory_estimated: bool,
    pub max_instances: u8,
    /// Legal start positions on the memory-slice axis.
    pub starts: Vec<u8>,
    /// Memory slices occupied from the start.
    pub placement_size: u8,
    pub media_extensions: bool,
    pub unverified: bool,
}

impl MigProfile {
    /// The `<G>` of `[<C>c.]<G>g.<M>gb[+…]`.
    pub fn compute_slices_in_name(&self) -> Option<u8> {
        let base = self.name.rsplit('.').find(|part| part.ends_with('g'))?;
        base.trim_end_matches('g').parse().ok()
    }

    /// Memory-slice bit mask of an instance at `start`.
    pub fn mask_at(&self, start: u8) -> u16 {
        (((1u32 << self.placement_size) - 1) << start) as u16
    }
}

/// An instance of a validated layout: index into `MigGeometry::profiles` plus its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlacedInstance {
    pub profile: u8,
    pub start: u8,
}

/// A MIG layout that breaks a rule of the model's geometry. The message names the rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MigLayoutError {
    #[error("{model} has no MIG profile {profile}; it offers {available}")]
    UnknownProfile { model: String, profile: String, available: String },
    #[error("{profile} cannot start at memory slice {start} on {model} (rule: legal placements; starts are {legal:?})")]
    IllegalStart { model: String, profile: String, start: u8, legal: Vec<u8> },
    #[error("{count} × {profile} on {model}: at most {max} fit (rule: max instances per profile)")]
    TooManyOfProfile { model: String, profile: String, count: usize, max: u8 },
    #[error(
        "{first} at {first_start} and {second} at {second_start} overlap on {model} (rule: instances may not share memory slices)"
    )]
    Overlap { model: String, first: String, first_start: u8, second: String, second_start: u8 },
    #[error("layout uses {used} compute slices, {model} has {available} (rule: compute slices)")]
    ComputeSlicesExceeded { model: String, used: u32, available: u8 },
    #[error("layout has {count} GPU instances, {model} allows {max} (rule: max GPU instances)")]
    TooManyInstances { model: String, count: usize, max: u8 },
    #[error("{count} instances own media engines (+me); {model} allows one (rule: one +me instance)")]
    MediaExtensionsTwice { model: String, count: usize },
}

impl MigGeometry {
    pub fn profile(&self, name: &str) -> Option<&MigProfile> {
        self.profiles.iter().find(|p| p.name.eq_ignore_ascii_case(name))
    }

    pub fn profile_index(&self, name: &str) -> Option<u8> {
        self.profiles.iter().position(|p| p.name.eq_ignore_ascii_case(name)).map(|i| i as u8)
    }

    /// Check a layout against every rule; on success return it in canonical order (by start).
    pub fn validate_layout(
        &self,
        model: &str,
        instances: &[MigInstanceSpec],
    ) -> Result<Vec<PlacedInstance>, MigLayoutError> {
        let mut placed = Vec::with_capacity(instances.len());
        for spec in instances {
            let index = self.profile_index(&spec.profile).ok_or_else(|| MigLayoutError::UnknownProfile {
                model: model.into(),
                profile: spec.profile.clone(),
                available: self.profiles.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
            })?;
            let profile = &self.profiles[index as usize];
            if !profile.starts.contains(&spec.start) {
                return Err(MigLayoutError::IllegalStart {
                    model: model.into(),
                    profile: profile.name.clone(),
                    start: spec.start,
                    legal: profile.starts.clone(),
                });
            }
            placed.push(PlacedInstance { profile: index, start: spec.start });
        }
        self.check_counts(model, &placed)?;
        self.check_overlaps(model, &placed)?;
        placed.sort_by_key(|p| (p.start, p.profile));
        Ok(placed)
    }

    fn check_counts(&self, model: &str, placed: &[PlacedInstance]) -> Result<(), MigLayoutError> {
        for (index, profile) in self.profiles.iter().enumerate() {
            let count = placed.iter().filter(|p| p.profile as usize == index).count();
            if count > profile.max_instances as usize {
                return Err(MigLayoutError::TooManyOfProfile {
                    model: model.into(),
                    profile: profile.name.clone(),
                    count,
                    max: profile.max_instances,
                });
            }
        }
        if placed.len() > self.max_gpu_instances as usize {
            return Err(MigLayoutError::TooManyInstances {
                model: model.into(),
                count: placed.len(),
                max: self.max_gpu_instances,
            });
        }
        let used: u32 = placed.iter().map(|p| self.profiles[p.profile as usize].compute_slices as u32).sum();
        if used > self.compute_slices as u32 {
            return Err(MigLayoutError::ComputeSlicesExceeded {
                model: model.into(),
                used,
                available: self.compute_slices,
            });
        }
        let media = placed.iter().filter(|p| self.profiles[p.profile as usize].media_extensions).count();
        if media > 1 {
            return Err(MigLayoutError::MediaExtensionsTwice { model: model.into(), count: media });
        }
        Ok(())
    }

    fn check_overlaps(&self, model: &str, placed: &[PlacedInstance]) -> Result<(), MigLayoutError> {
        for (i, a) in placed.iter().enumerate() {
            let pa = &self.profiles[a.profile as usize];
            for b in &placed[i + 1..] {
                let pb = &self.profiles[b.profile as usize];
                if pa.mask_at(a.start) & pb.mask_at(b.start) != 0 {
                    return Err(MigLayoutError::Overlap {
                        model: model.into(),
                        first: pa.name.clone(),
                        first_start: a.start,
                        second: pb.name.clone(),
                        second_start: b.start,
                    });
                }
            }
        }
        Ok(())
    }

    /// A layout from instances with starts (`fixed`) and profiles without (`counted`, as
    /// mig-parted users write `"1g.10gb": 7`): the fixed ones checked, then the others placed
    /// by searching the legal starts, largest first and lowest start first, backing up when a
    /// later instance finds no room — so every layout the hardware can hold is found (on an
    /// A100-80GB, `all-balanced`'s 3g.40gb must sit at slice 4 for both 1g.10gb to fit; a
    /// greedy pass put it at 0 and refused the layout). The search is bounded by
    /// [`PLACEMENT_SEARCH_STEPS`]. When no placement exists, the error names the rule the
    /// greedy placement would break (too many of a profile, of instances, of compute slices, a
    /// second media instance, or the instance it would overlap).
    pub fn place_counts(
        &self,
        model: &str,
        fixed: &[MigInstanceSpec],
        counted: &[(String, u32)],
    ) -> Result<Vec<PlacedInstance>, MigLayoutError> {
        let mut layout = self.validate_layout(model, fixed)?;
        let mut wanted = Vec::new();
        for (name, count) in counted {
            let index = self.profile_index(name).ok_or_else(|| MigLayoutError::UnknownProfile {
                model: model.into(),
                profile: name.clone(),
                available: self.profiles.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
            })?;
            let profile = &self.profiles[index as usize];
            if *count > u32::from(profile.max_instances) {
                // Refused before anything is built: a count is the file's to choose.
                return Err(MigLayoutError::TooManyOfProfile {
                    model: model.into(),
                    profile: profile.name.clone(),
                    count: *count as usize,
                    max: profile.max_instances,
                });
            }
            wanted.extend(std::iter::repeat_n(index, *count as usize));
        }
        // Largest first: small instances fill what big ones leave.
        wanted.sort_by_key(|&i| {
            let p = &self.profiles[i as usize];
            (std::cmp::Reverse(p.placement_size), std::cmp::Reverse(p.compute_slices), i)
        });
        let mut steps = PLACEMENT_SEARCH_STEPS;
        let fixed_len = layout.len();
        if self.search(&mut layout, fixed_len, &wanted, &mut steps) {
            layout.sort_by_key(|p| (p.start, p.profile));
            return Ok(layout);
        }
        layout.truncate(fixed_len);
        for index in wanted {
            match self.free_start(&layout, index) {
                Some(start) => layout.push(PlacedInstance { profile: index, start }),
                None => {
                    // Put it at its first legal start: the check says which rule that breaks.
                    let first = self.profiles[index as usize].starts.first().copied().unwrap_or(0);
                    let mut over = layout.clone();
                    over.push(PlacedInstance { profile: index, start: first });
                    let broken = self.check_counts(model, &over).and_then(|()| self.check_overlaps(model, &over));
                    // (free_start found no start, so one of the checks fails.)
                    return Err(broken.err().unwrap_or(MigLayoutError::TooManyInstances {
                        model: model.into(),
                        count: over.len(),
                        max: self.max_gpu_instances,
                    }));
                }
            }
        }
        layout.sort_by_key(|p| (p.start, p.profile));
        Ok(layout)
    }

    /// Place `wanted` (largest first) onto `layout` (whose first `fixed` instances were given
    /// with their starts) by depth-first search over the legal starts; true when all are
    /// placed. Instances of one profile go at increasing starts (the same set in another order
    /// is the same layout), and each step counts against `steps`.
    fn search(&self, layout: &mut Vec<PlacedInstance>, fixed: usize, wanted: &[u8], steps: &mut u32) -> bool {
        let Some((&profile, rest)) = wanted.split_first() else { return true };
        let after = layout[fixed..].iter().filter(|i| i.profile == profile).map(|i| i.start).max();
        for start in self.free_starts(layout, profile) {
            if after.is_some_and(|a| start <= a) {
                continue;
            }
            if *steps == 0 {
                return false;
            }
            *steps -= 1;
            layout.push(PlacedInstance { profile, start });
            if self.search(layout, fixed, rest, steps) {
                return true;
            }
            layout.pop();
        }
        false
    }

    /// The lowest legal start at which one more instance of `profile` can join `layout` with
    /// every rule still holding, if any. The planner and the property tests build layouts with it.
    pub fn free_start(&self, layout: &[PlacedInstance], profile: u8) -> Option<u8> {
        self.free_starts(layout, profile).next()
    }

    /// Every legal start at which one more instance of `profile` can join `layout`, lowest first.
    pub fn free_starts<'a>(&'a self, layout: &[PlacedInstance], profile: u8) -> impl Iterator<Item = u8> + use<'a> {
        let p = &self.profiles[profile as usize];
        let occupied = layout.iter().fold(0u16, |m, i| m | self.profiles[i.profile as usize].mask_at(i.start));
        let same = layout.iter().filter(|i| i.profile == profile).count();
        let compute: u32 = layout.iter().map(|i| self.profiles[i.profile as usize].compute_slices as u32).sum();
        let media = layout.iter().any(|i| self.profiles[i.profile as usize].media_extensions);
        let full = same >= p.max_instances as usize
            || layout.len() >= self.max_gpu_instances as usize
            || compute + p.compute_slices as u32 > self.compute_slices as u32
            || (media && p.media_extensions);
        p.starts.iter().copied().filter(move |&s| !full && p.mask_at(s) & occupied == 0)
    }
}
