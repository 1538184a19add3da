//! Slurm's partitions and QOS names, as the queue file defines them. A Slurm site keeps two
//! things apart that gantry's queue alone would merge: the *account* a job is charged to (its
//! queue: fair share, quotas, billing) and the *partition* it runs in (a set of nodes with its
//! own time and size limits). A QOS is a name for a priority. The controller resolves both at
//! submission ([`QueueTree::place`]), so the engine sees only what it already knows: a queue,
//! a node selector, a time limit and a priority.

use crate::job::Job;
use crate::queue::{Partition, Qos, QueueTree};

/// The QOS names a queue file that defines none gets.
pub const QOS_DEFAULT: [(&str, i32); 4] = [("low", -100), ("normal", 0), ("high", 100), ("urgent", 1000)];

/// The queue a job gets when its file names none; a partition's `queue` replaces it.
pub const DEFAULT_QUEUE: &str = "default";

/// Why a job's partition or QOS refuses it (the controller answers with the sentence).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlaceRefusal {
    UnknownPartition {
        name: String,
        known: Vec<String>,
    },
    UnknownQos {
        name: String,
        known: Vec<String>,
    },
    TimeLimit {
        partition: String,
        asked_s: u64,
        max_s: u64,
    },
    NodeLimit {
        partition: String,
        asked: u32,
        max: u32,
    },
    /// The job's own node selector asks for another value of a label the partition fixes.
    Selector {
        partition: String,
        key: String,
        job: String,
        partition_value: String,
    },
}

impl PlaceRefusal {
    /// The field of the job the refusal is about.
    pub fn field(&self) -> &'static str {
        match self {
            PlaceRefusal::UnknownPartition { .. } | PlaceRefusal::Selector { .. } => "partition",
            PlaceRefusal::UnknownQos { .. } => "qos",
            PlaceRefusal::TimeLimit { .. } => "time_limit",
            PlaceRefusal::NodeLimit { .. } => "nodes",
        }
    }
}

impl std::fmt::Display for PlaceRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let known = |k: &[String]| if k.is_empty() { "none".to_string() } else { k.join(", ") };
        match self {
            PlaceRefusal::UnknownPartition { name, known: k } => {
                write!(f, "invalid partition name {name:?} (partitions: {})", known(k))
            }
            PlaceRefusal::UnknownQos { name, known: k } => write!(f, "invalid QOS {name:?} (QOS names: {})", known(k)),
            PlaceRefusal::TimeLimit { partition, asked_s, max_s } => {
                write!(f, "time limit {asked_s} s is above partition {partition}'s MaxTime of {max_s} s")
            }
            PlaceRefusal::NodeLimit { partition, asked, max } => {
                write!(f, "{asked} nodes asked, partition {partition}'s MaxNodes is {max}")
            }
            PlaceRefusal::Selector { partition, key, job, partition_value } => write!(
                f,
                "the job selects nodes with {key}={job}, partition {partition} holds only nodes with {key}={partition_value}"
            ),
        }
    }
}

impl QueueTree {
    /// The partition named `name`.
    pub fn partition(&self, name: &str) -> Option<&Partition> {
        self.partitions.iter().find(|p| p.name == name)
    }

    /// The QOS names in force: the queue file's `[[qos]]`, or [`QOS_DEFAULT`] where it
    /// defines none.
    pub fn qos_table(&self) -> Vec<Qos> {
        if self.qos.is_empty() {
            return QOS_DEFAULT
                .iter()
                .map(|(name, priority)| Qos { name: name.to_string(), priority: *priority })
                .collect();
        }
        self.qos.clone()
    }

    /// What a QOS name stands for ([`QueueTree::qos_table`]).
    pub fn qos_priority(&self, name: &str) -> Option<i32> {
        self.qos_table().into_iter().find(|q| q.name == name).map(|q| q.priority)
    }

    fn qos_names(&self) -> Vec<String> {
        self.qos_table().into_iter().map(|q| q.name).collect()
    }

    /// Resolve a job's QOS and partition into what the engine knows: the QOS's priority
    /// added to what the job asked, the partition's queue (when the job names none), its
    /// nodes as a selector on every task group, its default time limit, and its limits
    /// checked. Without `[[partition]]` tables, a partition that names a queue is that queue
    /// (the job names no queue of its own) and any other is only a name the job carries.
    pub fn place(&self, job: &mut Job) -> Result<(), PlaceRefusal> {
        if let Some(name) = job.control.qos.clone() {
            let priority = self
                .qos_priority(&name)
                .ok_or_else(|| PlaceRefusal::UnknownQos { name: name.clone(), known: self.qos_names() })?;
            let asked = job.control.priority_asked.unwrap_or(job.priority);
            job.control.priority_asked = Some(asked.saturating_add(priority));
        }
        if self.partitions.is_empty() {
            if let Some(name) = &job.control.partition
                && job.queue == DEFAULT_QUEUE
                && self.find(name).is_some()
            {
                job.queue = name.clone();
            }
            return Ok(());
        }
        let named = job.control.partition.clone();
        let partition = match &named {
            Some(name) => self.partition(name).ok_or_else(|| PlaceRefusal::UnknownPartition {
                name: name.clone(),
                known: self.partitions.iter().map(|p| p.name.clone()).collect(),
            })?,
            None => match self.partitions.iter().find(|p| p.default) {
                Some(p) => p,
                None => return Ok(()),
            },
        };
        partition.admit(job)
    }
}

impl Partition {
    /// Put `job` in this partition (see [`QueueTree::place`]).
    fn admit(&self, job: &mut Job) -> Result<(), PlaceRefusal> {
        let nodes = nodes_asked(job);
        if let Some(max) = self.max_nodes
            && nodes > max
        {
            return Err(PlaceRefusal::NodeLimit { partition: self.name.clone(), asked: nodes, max });
        }
        let limit = job.control.time_limit_s.or(self.default_time_s).or(self.max_time_s);
        if let (Some(asked_s), Some(max_s)) = (limit, self.max_time_s)
            && asked_s > max_s
        {
            return Err(PlaceRefusal::TimeLimit { partition: self.name.clone(), asked_s, max_s });
        }
        for group in &mut job.groups {
            for (key, value) in &self.node_selector {
                match group.node_selector.get(key) {
                    Some(theirs) if theirs != value => {
                        return Err(PlaceRefusal::Selector {
                            partition: self.name.clone(),
                            key: key.clone(),
                            job: theirs.clone(),
                            partition_value: value.clone(),
                        });
                    }
                    _ => {
                        group.node_selector.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        job.control.time_limit_s = limit;
        job.control.partition = Some(self.name.clone());
        if let Some(queue) = &self.queue
            && job.queue == DEFAULT_QUEUE
        {
            job.queue = queue.clone();
        }
        Ok(())
    }
}

/// The fewest nodes a job can run on: a group whose tasks each take a node of their own
/// (Slurm's `--nodes`, `--exclusive`) needs as many nodes as tasks; other tasks may share one.
pub fn nodes_asked(job: &Job) -> u32 {
    job.groups.iter().map(|g| if g.distinct_nodes || g.exclusive_node { g.replicas } else { 1 }).max().unwrap_or(0)
}
