//! What a controller is made from and what its `open` entry keeps so a replay opens the
//! same: the store's tables as read ([`Image`]), the side tables an open read
//! ([`OpenedImage`]), and what a checkpoint carries over that a restart forgets ([`Carried`]:
//! agents, lost nodes, the scheduler's memory, reconfigurations, idle stretches). Plain data
//! with its serde; `open.rs` opens a controller from it, `checkpoint.rs` takes one.

use super::AgentLink;
use crate::error::ControlError;
use crate::wire::TaskKey;
use gantry_engine::fairshare::RESOURCES;
use gantry_engine::sched::SchedulerMemory;
use gantry_store::{JobRow, TokenRecord};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the store holds at open, as the caller read it.
#[derive(Clone, Debug, Default)]
pub struct Image {
    pub jobs: Vec<JobRow>,
    pub tokens: Vec<TokenRecord>,
    pub drained: Vec<String>,
    /// (node, GPU index, mode JSON).
    pub gpu_modes: Vec<(String, u32, String)>,
    pub series: Vec<crate::series::Point>,
    /// The reconfiguration records (id, JSON): the unfinished, and the newest finished.
    pub reconfigurations: Vec<(u64, String)>,
}

impl Image {
    /// Read everything the controller keeps from `store`; series points from `series_from_s`.
    pub fn read(store: &dyn gantry_store::Store, series_from_s: u64) -> Result<Image, ControlError> {
        Ok(Image {
            jobs: store.jobs(&[])?,
            tokens: store.tokens()?,
            drained: store.drained()?,
            gpu_modes: store.gpu_modes()?,
            reconfigurations: store.reconfigurations(super::reconfig::bounds::FINISHED_READ_AT_OPEN)?,
            series: store
                .series_points(series_from_s)?
                .into_iter()
                .filter_map(|(_, json)| serde_json::from_str(&json).ok())
                .collect(),
        })
    }
}

/// The side tables an open read, as its `open` entry keeps them.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OpenedImage {
    pub tokens: Vec<TokenRecord>,
    pub drained: Vec<String>,
    pub gpu_modes: Vec<(String, u32, String)>,
    pub reconfigurations: Vec<(u64, String)>,
    /// A checkpoint's: the state a restart forgets (`None` at a restart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried: Option<Carried>,
}

impl OpenedImage {
    /// The image to open from: these tables, and the jobs (as of the entry) from `jobs`.
    pub fn with_jobs(&self, jobs: Vec<JobRow>) -> Image {
        Image {
            jobs,
            tokens: self.tokens.clone(),
            drained: self.drained.clone(),
            gpu_modes: self.gpu_modes.clone(),
            series: Vec::new(),
            reconfigurations: self.reconfigurations.clone(),
        }
    }
}

/// What a checkpoint carries over that a restart forgets and decisions read: which agents are
/// connected (and ready, and their GPUs' UUIDs), which nodes are lost, the scheduler's memory
/// (fair share's past use, preemption counts, promised starts), the reconfiguration guards
/// and plan, idle stretches under way.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Carried {
    pub(crate) links: BTreeMap<String, AgentLink>,
    pub(crate) ready: Vec<String>,
    #[serde(with = "pairs")]
    pub(crate) uuids: BTreeMap<(String, u32), String>,
    pub(crate) lost_nodes: Vec<String>,
    pub(crate) scheduler: SchedulerMemoryRecord,
    pub(crate) reconfigs: super::reconfig::Reconfigs,
    pub(crate) idle: crate::idle::IdleWatch,
    /// What each running job has used on each node so far (its ending reports it).
    pub(crate) used: Vec<(u64, Vec<gantry_types::NodeUse>)>,
    /// Tasks offered again lately, and when.
    #[serde(default)]
    pub(crate) reoffered: Vec<(TaskKey, u64)>,
    /// Launches the agents have not acknowledged yet, by node.
    #[serde(default)]
    pub(crate) outbox: Vec<(String, Vec<crate::wire::Launch>)>,
    /// Runs some of whose tasks have ended: which, and how.
    #[serde(default)]
    pub(crate) partly_ended: Vec<PartlyEnded>,
    /// When the controller opened from the store (silences of nodes never heard count from it).
    #[serde(default)]
    pub(crate) opened_s: Option<u64>,
}

/// A run some of whose tasks have ended, as a checkpoint carries it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PartlyEnded {
    pub job: u64,
    pub exited: Vec<(String, u32)>,
    pub failed: Option<i32>,
    pub oom: Option<gantry_types::OomKill>,
}

/// The side tables of `image` as the `open` entry keeps them.
pub(crate) fn opened_image(image: &Image, carried: Option<Carried>) -> OpenedImage {
    OpenedImage {
        tokens: image.tokens.clone(),
        drained: image.drained.clone(),
        gpu_modes: image.gpu_modes.clone(),
        reconfigurations: image.reconfigurations.clone(),
        carried,
    }
}

/// [`SchedulerMemory`] as the `open` entry keeps it (the engine has no serde).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct SchedulerMemoryRecord {
    /// Per queue: decayed usage (CPU, memory, GPU milli-seconds, as decimal strings: they
    /// outgrow JSON's safe integers) and the tick it was brought to.
    fair_share: Option<Vec<([String; RESOURCES], u64)>>,
    preempted_times: Vec<(u64, u32)>,
    #[serde(default)]
    preempted_lost: Vec<(u64, u64)>,
    reclaimed: Vec<u64>,
    promises: Vec<u64>,
    promise_at: Vec<(u64, u64)>,
    last_reservation: Option<(u64, u64)>,
    running: Vec<(u64, bool, Option<u64>)>,
    #[serde(default)]
    eligible_at: Vec<(u64, u64)>,
    #[serde(default)]
    entitled_since: Vec<(u64, u64)>,
    /// Queues' recent usage (what lending is judged by), as (queue, flavor, levels).
    #[serde(default)]
    usage_since: Option<u64>,
    #[serde(default)]
    usage: Vec<(String, gantry_types::Flavor, gantry_engine::sched::UsageLevels)>,
}

impl From<SchedulerMemory> for SchedulerMemoryRecord {
    fn from(m: SchedulerMemory) -> Self {
        SchedulerMemoryRecord {
            fair_share: m.fair_share.map(|q| q.into_iter().map(|(d, t)| (d.map(|x| x.to_string()), t)).collect()),
            preempted_times: m.preempted_times,
            preempted_lost: m.preempted_lost,
            reclaimed: m.reclaimed,
            promises: m.promises,
            promise_at: m.promise_at,
            last_reservation: m.last_reservation,
            running: m.running,
            eligible_at: m.eligible_at,
            entitled_since: m.entitled_since,
            usage_since: m.usage_since,
            usage: m.usage,
        }
    }
}

impl From<SchedulerMemoryRecord> for SchedulerMemory {
    fn from(r: SchedulerMemoryRecord) -> Self {
        SchedulerMemory {
            // A figure that does not read counts as none: a hand-edited log replays, differing.
            fair_share: r
                .fair_share
                .map(|q| q.into_iter().map(|(d, t)| (d.map(|x| x.parse().unwrap_or(0)), t)).collect()),
            preempted_times: r.preempted_times,
            preempted_lost: r.preempted_lost,
            reclaimed: r.reclaimed,
            promises: r.promises,
            promise_at: r.promise_at,
            last_reservation: r.last_reservation,
            running: r.running,
            eligible_at: r.eligible_at,
            entitled_since: r.entitled_since,
            usage_since: r.usage_since,
            usage: r.usage,
        }
    }
}

/// Serde for maps keyed by tuples (JSON keys are strings): a list of pairs.
pub(crate) mod pairs {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;

    pub fn serialize<S: Serializer, K: Serialize, V: Serialize>(map: &BTreeMap<K, V>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(map.iter())
    }

    pub fn deserialize<'de, D, K, V>(d: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        D: Deserializer<'de>,
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
    {
        Vec::<(K, V)>::deserialize(d).map(|pairs| pairs.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::SchedulerMemoryRecord;
    use gantry_engine::sched::SchedulerMemory;
    use gantry_types::Flavor;

    /// The usage record and guarantee clocks survive the checkpoint's JSON, and a checkpoint
    /// written before they existed reads as "no record" (the new controller starts its own).
    #[test]
    fn the_usage_record_and_guarantee_clocks_ride_a_checkpoint() {
        let memory = SchedulerMemory {
            entitled_since: vec![(7, 120)],
            usage_since: Some(30),
            usage: vec![("alpha".into(), Flavor::Model("H100-SXM5-80GB".into()), vec![(600, 8000), (900, 2000)])],
            ..Default::default()
        };
        let json = serde_json::to_string(&SchedulerMemoryRecord::from(memory.clone())).expect("serializes");
        let back: SchedulerMemoryRecord = serde_json::from_str(&json).expect("reads");
        assert_eq!(SchedulerMemory::from(back), memory);
        let old = r#"{"fair_share":null,"preempted_times":[],"reclaimed":[],"promises":[],"promise_at":[],"last_reservation":null,"running":[]}"#;
        let old: SchedulerMemoryRecord = serde_json::from_str(old).expect("an older checkpoint reads");
        let old = SchedulerMemory::from(old);
        assert_eq!((old.usage_since, old.usage.len(), old.entitled_since.len()), (None, 0, 0));
    }
}
