//! What the read-only views (`views/`) may see of the controller: shared references only, so a
//! view can never change the state a command has not changed. The fields themselves are the
//! state machine's own; nothing outside `control/` reads or writes them directly.

use super::{AgentLink, Controller, Runs, agents::Refused, reconfig::Reconfigs};
use crate::auth::Tokens;
use gantry_catalog::Catalog;
use gantry_engine::sched::Scheduler;
use gantry_store::JobRow;
use std::collections::{BTreeMap, BTreeSet};

impl Controller {
    /// Every job, by id.
    pub(crate) fn jobs(&self) -> &BTreeMap<u64, JobRow> {
        &self.jobs
    }

    /// The engine's scheduler: queues, reasons, estimates.
    pub(crate) fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// Running jobs' runs, by job id.
    pub(crate) fn running(&self) -> &BTreeMap<u64, Runs> {
        &self.running
    }

    /// GPU reconfigurations: the policy, what is under way, what the guards remember.
    pub(crate) fn reconfigs(&self) -> &Reconfigs {
        &self.reconfigs
    }

    /// The counters the metrics export.
    pub(crate) fn stats(&self) -> &crate::metrics::ServiceStats {
        &self.stats
    }

    /// Allocation and use over time, for the dashboard's charts.
    pub(crate) fn series(&self) -> &crate::series::Series {
        &self.series
    }

    /// Idle detection: each running job's stretch and what was done about it.
    pub(crate) fn idle(&self) -> &crate::idle::IdleWatch {
        &self.idle
    }

    /// Each remote agent's link: when it last heartbeat, its version and confinement.
    pub(crate) fn links(&self) -> &BTreeMap<String, AgentLink> {
        &self.links
    }

    /// Reports each node's agent made about other nodes' tasks, refused.
    pub(crate) fn refused(&self) -> &BTreeMap<String, Refused> {
        &self.refused
    }

    /// Nodes lost (silent past `node_lost_after`, or declared).
    pub(crate) fn lost_nodes(&self) -> &BTreeSet<String> {
        &self.lost_nodes
    }

    pub(crate) fn catalog(&self) -> &'static Catalog {
        self.catalog
    }

    pub(crate) fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    /// The usage meter: what each running job has been charged up to now.
    pub(crate) fn usage_meter(&self) -> &crate::meter::Meter {
        &self.meter
    }

    pub(crate) fn billing(&self) -> &crate::meter::Billing {
        &self.billing
    }
}
