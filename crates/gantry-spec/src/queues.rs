//! The queue file (`queues.toml`): the queue tree (org → team → project), fair-share weights,
//! quotas per flavor, the usage half-life, the starvation bound, preemption's bounds
//! (`queue_preemption.rs`) and GPU billing weights; and
//! Slurm's partitions and QOS names (`queue_partitions.rs`).
//!
//! Checked whole before anything uses it: unknown parents, parent cycles, duplicate names,
//! unknown flavors, a limit below its guarantee, children guaranteed more than their parent
//! holds — each an error naming the queue and the field. See docs/formats.md.

use crate::error::{SpecError, from_toml};
use crate::fleet::{SPEC_BYTES_MAX, unknown_model};
use crate::quantity::{Duration, seconds};
use gantry_catalog::Catalog;
use gantry_types::{Flavor, QueueSpec, QueueTree, Quota, UserLimit};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// Most queues one tree may hold.
pub const QUEUES_MAX: usize = 10_000;
/// Deepest tree (org → team → project is 3).
pub const QUEUE_DEPTH_MAX: usize = 8;
/// Largest fair-share weight.
pub const QUEUE_WEIGHT_MAX: i64 = 1_000_000;
/// Largest quota, in GPUs.
const QUOTA_GPUS_MAX: f64 = 1_000_000.0;
/// Defaults: usage halves weekly; nothing waits more than three days before going first.
pub const HALF_LIFE_DEFAULT_S: u64 = 7 * 86_400;
pub const STARVATION_DEFAULT_S: u64 = 3 * 86_400;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueFile {
    fair_share: Option<FairShareEntry>,
    preemption: Option<crate::queue_preemption::PreemptionEntry>,
    billing: Option<BTreeMap<String, f64>>,
    #[serde(default)]
    queue: Vec<QueueEntry>,
    user_limits: Option<UserLimitEntry>,
    #[serde(default)]
    user: Vec<UserEntry>,
    #[serde(default)]
    partition: Vec<crate::queue_partitions::PartitionEntry>,
    #[serde(default)]
    qos: Vec<crate::queue_partitions::QosEntry>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct UserLimitEntry {
    max_running_jobs: Option<i64>,
    max_gpus: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserEntry {
    name: String,
    max_running_jobs: Option<i64>,
    max_gpus: Option<f64>,
}

/// Most `[[user]]` overrides one file may hold.
pub const USERS_MAX: usize = 100_000;

fn user_limit(at: &str, max_running_jobs: Option<i64>, max_gpus: Option<f64>) -> Result<UserLimit, SpecError> {
    Ok(UserLimit {
        max_running_jobs: max_running_jobs
            .map(|n| {
                crate::quantity::count(
                    &format!("{at} / max_running_jobs"),
                    n,
                    0,
                    1_000_000,
                    "jobs one user may run at once (0 = none)",
                )
            })
            .transpose()?,
        max_gpus_milli: max_gpus.map(|g| gpus_to_milli(&format!("{at} / max_gpus"), g)).transpose()?,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FairShareEntry {
    half_life: Option<Duration>,
    starvation: Option<Duration>,
    reclaim_protect: Option<Duration>,
    greedy_reserve_after: Option<Duration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueEntry {
    name: String,
    parent: Option<String>,
    weight: Option<i64>,
    #[serde(default)]
    quota: Vec<QuotaEntry>,
    priority: Option<PriorityEntry>,
}

/// `priority = { default = 0, max = 10 }`: what the queue grants its members' jobs.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PriorityEntry {
    default: Option<i64>,
    max: Option<i64>,
}

/// A queue's priority range, checked: both within the jobs' range, the default not above
/// the maximum. Left out, `max` is the default or 0, whichever is higher; `default` is 0, or
/// the maximum when that is below 0.
fn priority_range(at: &str, entry: Option<&PriorityEntry>) -> Result<gantry_types::PriorityRange, SpecError> {
    let Some(entry) = entry else { return Ok(gantry_types::PriorityRange::default()) };
    let (lo, hi) = crate::workload::PRIORITY_RANGE;
    let check = |field: &str, v: i64| -> Result<i32, SpecError> {
        if v < lo || v > hi {
            return Err(SpecError::new(
                format!("{at} / priority / {field}"),
                format!("{v} is out of range {lo}..={hi}"),
            ));
        }
        Ok(v as i32)
    };
    let max = entry.max.map(|m| check("max", m)).transpose()?;
    let default = entry.default.map(|d| check("default", d)).transpose()?;
    let (default, max) = match (default, max) {
        (Some(d), Some(m)) => (d, m),
        (Some(d), None) => (d, d.max(0)),
        (None, Some(m)) => (m.min(0), m),
        (None, None) => (0, 0),
    };
    if default > max {
        return Err(SpecError::new(format!("{at} / priority"), format!("default {default} is above max {max}"))
            .hint("a queue's jobs get `default` when they name no priority; members may name up to `max`"));
    }
    Ok(gantry_types::PriorityRange { default, max })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotaEntry {
    flavor: String,
    guaranteed: Option<f64>,
    limit: Option<f64>,
    lend: Option<bool>,
    borrow: Option<f64>,
}

fn gpus_to_milli(field: &str, value: f64) -> Result<u64, SpecError> {
    if !value.is_finite() || !(0.0..=QUOTA_GPUS_MAX).contains(&value) {
        return Err(SpecError::new(field, format!("{value} is outside 0..={QUOTA_GPUS_MAX} GPUs")));
    }
    Ok((value * 1000.0).round() as u64)
}

fn flavor(field: &str, name: &str, catalog: &Catalog) -> Result<Flavor, SpecError> {
    if name == "milli" {
        return Ok(Flavor::MilliPool);
    }
    match catalog.lookup(name) {
        Some(id) => Ok(Flavor::Model(catalog.model(id).id.clone())),
        None => Err(unknown_model(field, name, catalog)
            .hint("a flavor is a GPU model from `gantry catalog`, or \"milli\" for the milli-GPU share pool")),
    }
}

/// Parse and validate a queue file.
pub fn parse_queues(text: &str, catalog: &Catalog) -> Result<QueueTree, SpecError> {
    if text.len() > SPEC_BYTES_MAX {
        return Err(SpecError::new("", format!("queue file is {} bytes, the limit is {SPEC_BYTES_MAX}", text.len())));
    }
    let file: QueueFile = toml::from_str(text).map_err(|e| from_toml("queue", text, e))?;
    if file.queue.is_empty() {
        return Err(
            SpecError::new("queue", "the file has no queues").hint("add a [[queue]] table; see docs/formats.md")
        );
    }
    if file.queue.len() > QUEUES_MAX {
        return Err(SpecError::new("queue", format!("{} queues, the limit is {QUEUES_MAX}", file.queue.len())));
    }
    let [half_life_s, starvation_s, reclaim_protect_s, greedy_reserve_after_s] = fair_share_settings(file.fair_share)?;
    let preemption = crate::queue_preemption::rules(file.preemption)?;
    let billing_milli = billing_weights(file.billing.unwrap_or_default(), catalog)?;
    let parent_of = parents(&file.queue, text)?;
    let order = parents_first(&file.queue, &parent_of)?;
    let mut new_index = vec![0usize; order.len()];
    for (new, &old) in order.iter().enumerate() {
        new_index[old] = new;
    }
    let mut queues = Vec::with_capacity(order.len());
    for &old in &order {
        queues.push(queue_spec(&file.queue[old], parent_of[old].map(|p| new_index[p]), catalog)?);
    }
    check_children_fit(&queues)?;
    let defaults = file.user_limits.unwrap_or_default();
    let user_default = user_limit("user_limits", defaults.max_running_jobs, defaults.max_gpus)?;
    let partitions = crate::queue_partitions::partitions(&file.partition, &queues)?;
    let qos = crate::queue_partitions::qos(&file.qos)?;
    Ok(QueueTree {
        partitions,
        qos,
        user_default,
        users: users(&file.user)?,
        queues,
        half_life_s,
        starvation_s,
        reclaim_protect_s,
        greedy_reserve_after_s,
        preemption,
        billing_milli,
    })
}

/// `[fair_share]`: half-life, starvation bound, reclaim protection and greedy reserve, in
/// seconds; each its default where not given.
fn fair_share_settings(fair: Option<FairShareEntry>) -> Result<[u64; 4], SpecError> {
    let fair = fair.unwrap_or(FairShareEntry {
        half_life: None,
        starvation: None,
        reclaim_protect: None,
        greedy_reserve_after: None,
    });
    let at = |field: &str, d: &Option<Duration>, min: u64| {
        d.as_ref().map(|d| seconds(&format!("fair_share.{field}"), d, min)).transpose()
    };
    Ok([
        at("half_life", &fair.half_life, 1)?.unwrap_or(HALF_LIFE_DEFAULT_S),
        at("starvation", &fair.starvation, 1)?.unwrap_or(STARVATION_DEFAULT_S),
        at("reclaim_protect", &fair.reclaim_protect, 0)?.unwrap_or(gantry_types::RECLAIM_PROTECT_DEFAULT_S),
        at("greedy_reserve_after", &fair.greedy_reserve_after, 0)?
            .unwrap_or(gantry_types::GREEDY_RESERVE_AFTER_DEFAULT_S),
    ])
}

/// `[billing]`: each GPU model's weight in reference GPU-hours, as milli.
fn billing_weights(billing: BTreeMap<String, f64>, catalog: &Catalog) -> Result<Vec<(String, u32)>, SpecError> {
    let mut billing_milli = Vec::new();
    for (model, weight) in billing {
        let field = format!("billing.{model:?}");
        let Flavor::Model(id) = flavor(&field, &model, catalog)? else {
            return Err(SpecError::new(field, "billing weights are per GPU model, not the milli pool"));
        };
        if !weight.is_finite() || weight <= 0.0 || weight > 1000.0 {
            return Err(SpecError::new(field, format!("{weight} is outside (0, 1000]"))
                .hint("one GPU-hour of this model, in reference GPU-hours (e.g. 2.0)"));
        }
        billing_milli.push((id, (weight * 1000.0).round().max(1.0) as u32));
    }
    Ok(billing_milli)
}

/// Each queue's parent (an index into `queues`), names checked first so parents may be
/// declared in any order.
fn parents(queues: &[QueueEntry], text: &str) -> Result<Vec<Option<usize>>, SpecError> {
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, q) in queues.iter().enumerate() {
        let name = q.name.trim();
        if name.is_empty() || name != q.name || name.chars().any(|c| c.is_control() || c == ',') {
            return Err(SpecError::new(
                format!("queue {:?} / name", q.name),
                "empty, padded or with a control character or comma",
            )
            .hint("queue names are plain words like \"research\" or \"team-a\""));
        }
        if index.insert(name, i).is_some() {
            return Err(SpecError::new(
                format!("queue {name:?}"),
                format!("queue name used twice{}", crate::error::name_lines(text, name)),
            ));
        }
    }
    let parent = |q: &QueueEntry| -> Result<Option<usize>, SpecError> {
        let Some(p) = &q.parent else { return Ok(None) };
        let found = index.get(p.as_str()).copied().ok_or_else(|| {
            SpecError::new(format!("queue {:?} / parent", q.name), format!("unknown queue {p:?}"))
                .hint("a parent must be another [[queue]] of this file")
        })?;
        Ok(Some(found))
    };
    queues.iter().map(parent).collect()
}

/// The queues' indices, parents before children (stable by depth); a walk longer than the
/// queue count is a cycle, one deeper than [`QUEUE_DEPTH_MAX`] too deep.
fn parents_first(queues: &[QueueEntry], parent_of: &[Option<usize>]) -> Result<Vec<usize>, SpecError> {
    let mut depth = vec![0usize; queues.len()];
    for (i, q) in queues.iter().enumerate() {
        let (mut at, mut path) = (i, vec![q.name.as_str()]);
        while let Some(p) = parent_of[at] {
            path.push(queues[p].name.as_str());
            if p == i || path.len() > queues.len() {
                return Err(SpecError::new(
                    format!("queue {:?} / parent", q.name),
                    format!("queue parents form a cycle: {}", path.join(" → ")),
                ));
            }
            at = p;
        }
        depth[i] = path.len();
        if depth[i] > QUEUE_DEPTH_MAX {
            return Err(SpecError::new(format!("queue {:?}", q.name), format!("deeper than {QUEUE_DEPTH_MAX} levels")));
        }
    }
    let mut order: Vec<usize> = (0..queues.len()).collect();
    order.sort_by_key(|&i| depth[i]);
    Ok(order)
}

/// One `[[queue]]` checked: its weight, quotas and priority range.
fn queue_spec(q: &QueueEntry, parent: Option<usize>, catalog: &Catalog) -> Result<QueueSpec, SpecError> {
    let at = format!("queue {:?}", q.name);
    let weight = crate::quantity::count(
        &format!("{at} / weight"),
        q.weight.unwrap_or(1),
        1,
        QUEUE_WEIGHT_MAX,
        "a fair-share weight is a whole number ≥ 1 (default 1)",
    )?;
    let mut quotas: Vec<Quota> = Vec::new();
    for entry in &q.quota {
        let quota = quota(&at, entry, catalog)?;
        if quotas.iter().any(|x| x.flavor == quota.flavor) {
            return Err(SpecError::new(format!("{at} / quota {:?}", entry.flavor), "flavor given twice"));
        }
        quotas.push(quota);
    }
    let priority = priority_range(&at, q.priority.as_ref())?;
    Ok(QueueSpec { name: q.name.clone(), parent, weight, quotas, priority })
}

/// One `quota` entry of queue `at`: guaranteed ≤ limit, borrow by default what the limit
/// leaves above the guarantee.
fn quota(at: &str, entry: &QuotaEntry, catalog: &Catalog) -> Result<Quota, SpecError> {
    let field = format!("{at} / quota {:?}", entry.flavor);
    let flavor = flavor(&format!("{field} / flavor"), &entry.flavor, catalog)?;
    let guaranteed = gpus_to_milli(&format!("{field} / guaranteed"), entry.guaranteed.unwrap_or(0.0))?;
    let limit = match entry.limit {
        Some(l) => gpus_to_milli(&format!("{field} / limit"), l)?,
        None => u64::MAX,
    };
    if limit < guaranteed {
        return Err(SpecError::new(
            format!("{field} / limit"),
            format!("limit {} is below guaranteed {}", limit as f64 / 1000.0, guaranteed as f64 / 1000.0),
        ));
    }
    let borrow = match entry.borrow {
        Some(b) => gpus_to_milli(&format!("{field} / borrow"), b)?,
        None => limit.saturating_sub(guaranteed),
    };
    let lend = entry.lend.unwrap_or(true);
    Ok(Quota { flavor, guaranteed_milli: guaranteed, limit_milli: limit, lend, borrow_milli: borrow })
}

/// Children's guarantees must fit in their parent's, flavor by flavor.
fn check_children_fit(queues: &[QueueSpec]) -> Result<(), SpecError> {
    for (p, parent) in queues.iter().enumerate() {
        for quota in &parent.quotas {
            let children: Vec<&QueueSpec> = queues.iter().filter(|q| q.parent == Some(p)).collect();
            let sum: u64 = children
                .iter()
                .flat_map(|c| c.quotas.iter().filter(|x| x.flavor == quota.flavor))
                .map(|x| x.guaranteed_milli)
                .sum();
            if sum > quota.guaranteed_milli {
                let names: BTreeSet<&str> = children.iter().map(|c| c.name.as_str()).collect();
                return Err(SpecError::new(
                    format!("queue {:?} / quota {} / guaranteed", parent.name, flavor_name(&quota.flavor)),
                    format!(
                        "its children ({}) are guaranteed {} GPUs, more than its {}",
                        names.into_iter().collect::<Vec<_>>().join(", "),
                        sum as f64 / 1000.0,
                        quota.guaranteed_milli as f64 / 1000.0
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `[[user]]` limits, each user once.
fn users(entries: &[UserEntry]) -> Result<Vec<(String, UserLimit)>, SpecError> {
    if entries.len() > USERS_MAX {
        return Err(SpecError::new("user", format!("{} users, the limit is {USERS_MAX}", entries.len())));
    }
    let mut users: Vec<(String, UserLimit)> = Vec::new();
    for u in entries {
        let at = format!("user {:?}", u.name);
        if u.name.trim().is_empty() || u.name.trim() != u.name || u.name.chars().any(char::is_control) {
            return Err(SpecError::new(format!("{at} / name"), "empty, padded or with a control character"));
        }
        if users.iter().any(|(n, _)| n == &u.name) {
            return Err(SpecError::new(at, "user listed twice"));
        }
        users.push((u.name.clone(), user_limit(&at, u.max_running_jobs, u.max_gpus)?));
    }
    Ok(users)
}

fn flavor_name(flavor: &Flavor) -> String {
    match flavor {
        Flavor::Model(m) => format!("{m:?}"),
        Flavor::MilliPool => "\"milli\"".into(),
    }
}
