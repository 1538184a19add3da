//! Running jobs: the scheduling cycle's starts and stops, what each task is given (devices,
//! MPS, rank), and the end of a run when its last task has exited.

use super::{Agents, Controller, Effects, Held, StopRun};
use crate::error::ControlError;
use crate::wire::{Launch, TaskKey};
use gantry_engine::sched::Decision;
use gantry_store::JobRow;
use gantry_types::{Ending, Event, GpuGrant, TaskPlacement, TaskStart};

impl Controller {
    /// What each task of a start is given: the log's record and the agent's launch.
    pub(crate) fn launches(
        &self,
        job: u64,
        row: &JobRow,
        placement: &[TaskPlacement],
    ) -> (Vec<TaskStart>, Vec<Launch>) {
        let world = placement.len() as u32;
        let master_node = placement.first().map(|t| t.node.clone()).unwrap_or_default();
        let mut layouts = run_layouts(placement).into_iter();
        let mut starts = Vec::new();
        let mut launches = Vec::new();
        let step_key = self.setup.step_key(job, row.requeues);
        for (rank, task) in placement.iter().enumerate() {
            let (devices, mps) = self.devices(task);
            starts.push(TaskStart {
                group: task.group.clone(),
                replica: task.replica,
                node: task.node.clone(),
                devices: devices.clone(),
                placement: Some(task.clone()),
                confinement: self.links.get(&task.node).map(|l| l.confinement.to_string()),
            });
            launches.push(Launch {
                job,
                job_name: row.name.clone(),
                group: task.group.clone(),
                replica: task.replica,
                rank: rank as u32,
                world_size: world,
                node: task.node.clone(),
                master_node: master_node.clone(),
                devices,
                mps,
                command: row.job.run.command.clone(),
                env: row.job.run.env.clone(),
                workdir: row.job.run.workdir.clone(),
                time_limit_s: row.job.control.time_limit_s,
                grace_s: row.job.lifecycle.grace_s,
                attempt: row.requeues,
                account: self.accounts.account(row.job.control.user.as_deref().unwrap_or_default()),
                cpu_milli: Some(u64::from(task.cpu.0)),
                memory_bytes: Some(task.memory.0),
                layout: layouts.next(),
                array_index: row.job.control.array.as_ref().map(|a| a.index),
                step_key: step_key.clone(),
                array_job: row.job.control.array.as_ref().and_then(|a| a.job),
                array_span: row.job.control.array.as_ref().filter(|a| a.count > 0).map(|a| [a.min, a.max, a.count]),
                queue: row.partition().to_string(),
            });
        }
        (starts, launches)
    }

    /// The device UUIDs and MPS settings a task's grants give it.
    fn devices(&self, task: &TaskPlacement) -> (Vec<String>, Option<(u32, u64)>) {
        let mut devices = Vec::new();
        let mut mps = None;
        for grant in &task.gpus {
            let uuid = self.uuids.get(&(task.node.clone(), grant.gpu())).cloned().unwrap_or_default();
            match grant {
                GpuGrant::Whole { .. } | GpuGrant::TimeSlice { .. } => devices.push(uuid),
                GpuGrant::Mig { profile, start, .. } => {
                    devices.push(format!("MIG-{}-{profile}-{start}", uuid.trim_start_matches("GPU-")));
                }
                GpuGrant::Mps { active_thread_percentage, memory, .. } => {
                    devices.push(uuid);
                    mps = Some((*active_thread_percentage, memory.0));
                }
            }
        }
        (devices, mps)
    }

    /// What a placement holds on each GPU (computed once, when a job starts or is re-adopted).
    pub(crate) fn grants(&self, placement: &[TaskPlacement]) -> Vec<Held> {
        let mut held = Vec::new();
        for task in placement {
            for grant in &task.gpus {
                let Some(&model) = self.models.get(&(task.node.clone(), grant.gpu())) else { continue };
                let gpu_model = self.catalog.model(model);
                let milli = match grant {
                    GpuGrant::Whole { .. } => 1000,
                    GpuGrant::Mig { profile, .. } => gpu_model
                        .mig
                        .as_ref()
                        .and_then(|g| g.profiles.iter().find(|p| &p.name == profile))
                        .map_or(0, |p| u64::from(gpu_model.mig_milli(p).0)),
                    GpuGrant::Mps { milli, .. } | GpuGrant::TimeSlice { milli, .. } => u64::from(milli.0),
                };
                held.push(Held { node: task.node.clone(), gpu: grant.gpu(), model, milli });
            }
        }
        held
    }

    /// Hand launches to whoever runs the tasks: the caller (after the commit) or
    /// the nodes' agents (in their next heartbeat answer).
    pub(crate) fn send_launches(&mut self, launches: Vec<Launch>, effects: &mut Effects) {
        match self.agents {
            Agents::Local => effects.launch.extend(launches),
            Agents::Remote { .. } => {
                for launch in launches {
                    effects.wake.insert(launch.node.clone());
                    self.outbox.entry(launch.node.clone()).or_default().insert(launch.key(), launch);
                }
            }
        }
    }

    /// Order a run stopped: signalled now, killed after its grace period.
    pub(crate) fn send_stop(&mut self, job: u64, grace_s: u64, effects: &mut Effects) {
        let Some(runs) = self.running.get_mut(&job) else { return };
        runs.stopping = Some(grace_s);
        match self.agents {
            Agents::Local => effects.stop.push(StopRun { job, attempt: runs.attempt, grace_s }),
            Agents::Remote { .. } => effects.wake.extend(runs.tasks.values().cloned()),
        }
    }

    /// Run a scheduling cycle: each start is recorded, then its tasks handed out.
    pub(crate) fn cycle(&mut self, now: u64, effects: &mut Effects) -> Result<(), ControlError> {
        for decision in self.scheduler.cycle(now) {
            match decision {
                Decision::Start { job, alloc, eligible_since, .. } => {
                    self.stats.starts += 1;
                    let queue = self.jobs.get(&job).map_or("", |row| row.queue.as_str());
                    self.stats.observe_wait(queue, now.saturating_sub(eligible_since) as f64);
                    let placement = self
                        .scheduler
                        .placement(alloc)
                        .ok_or_else(|| ControlError::Internal("placed job vanished".into()))?;
                    let row = self.jobs.get(&job).ok_or_else(|| ControlError::Internal(format!("no job {job}")))?;
                    let (starts, launches) = self.launches(job, row, &placement);
                    let (name, attempt) = (row.name.clone(), row.requeues);
                    self.record(Event::Started { id: job, at_s: now, tasks: starts })?;
                    self.track(job, alloc, attempt, &placement, now);
                    let mut nodes: Vec<&str> = placement.iter().map(|t| t.node.as_str()).collect();
                    nodes.dedup();
                    tracing::info!(job, name = %name, tasks = placement.len(), on = %nodes.join(","), "started");
                    self.send_launches(launches, effects);
                }
                Decision::Stop { job, cause, .. } => {
                    self.stats.stops += 1;
                    let grace = self.scheduler.job(job).map_or(gantry_types::GRACE_DEFAULT_S, |j| j.lifecycle.grace_s);
                    if let Some(runs) = self.running.get_mut(&job) {
                        runs.preempted = Some(cause);
                    }
                    self.send_stop(job, grace, effects);
                }
            }
        }
        Ok(())
    }

    /// A task exited (`code`: its exit code, `None` if killed by a signal; `lost`: it vanished
    /// without an exit recorded). Each task of a run counts once, however often it is
    /// reported; a report of another run, or of a job not running, changes nothing.
    pub(crate) fn task_exited(
        &mut self,
        task: &TaskKey,
        code: Option<i32>,
        timed_out: bool,
        lost: bool,
        now: u64,
        effects: &mut Effects,
    ) -> Result<(), ControlError> {
        let job = task.job;
        let Some(runs) = self.running.get_mut(&job) else { return Ok(()) };
        let which = (task.group.clone(), task.replica);
        if runs.attempt != task.attempt || !runs.tasks.contains_key(&which) || !runs.exited.insert(which) {
            return Ok(());
        }
        runs.tasks_left -= 1;
        runs.timed_out |= timed_out;
        runs.lost |= lost;
        if !lost && code != Some(0) && runs.failed.is_none() {
            runs.failed = Some(code.unwrap_or(-1));
        }
        if runs.tasks_left > 0 {
            return Ok(());
        }
        // Its last seconds count, and its numbers are in the ledger before it is gone.
        self.unmeter(job, now);
        effects.schedule = true;
        let runs = self.running.remove(&job).expect("present");
        if let (Some(node), false) = (&runs.node_lost, runs.cancelled) {
            let requeue = self.jobs.get(&job).is_some_and(|row| row.job.lifecycle.requeue);
            if requeue {
                // Its node is gone: it waits again, in its queue, with its original place.
                let used = runs.used.values().cloned().collect();
                self.record(Event::Requeued { id: job, at_s: now, why: format!("node-lost ({node})"), used })?;
                self.scheduler.killed(runs.alloc, now);
                return Ok(());
            }
        }
        if let (Some(why), false) = (runs.moved.clone(), runs.cancelled) {
            // Moved off a GPU being reconfigured: it waits again, in its place.
            return self.moved_exit(job, why, runs.alloc, runs.used.values().cloned().collect(), now);
        }
        if let (Some(cause), false) = (runs.preempted, runs.cancelled) {
            // Stopped for another: it waits again, in its queue, with its original place.
            let used = runs.used.values().cloned().collect();
            self.record(Event::Requeued { id: job, at_s: now, why: format!("preempted ({cause})"), used })?;
            self.scheduler.killed(runs.alloc, now);
            return Ok(());
        }
        let ending = if runs.cancelled {
            Ending::Cancelled
        } else if runs.lost && runs.failed.is_none() {
            Ending::Lost
        } else if runs.oom.is_some() {
            Ending::OutOfMemory
        } else if runs.timed_out {
            Ending::TimedOut
        } else if runs.failed.is_some() {
            Ending::Failed
        } else {
            Ending::Completed
        };
        // Every task of a completed job exited 0: say so, rather than nothing.
        let exit_code = if ending == Ending::Completed { Some(0) } else { runs.failed };
        let used = runs.used.values().cloned().collect();
        let by = runs.cancelled_by.clone().filter(|_| ending == Ending::Cancelled);
        let (oom, steps) = (runs.oom.clone(), runs.steps.clone());
        self.record(Event::Ended { id: job, at_s: now, ending, exit_code, used, oom, by, steps })?;
        tracing::info!(job, ending = ?ending, exit_code = ?exit_code, "ended");
        let woken = self.scheduler.ended(runs.alloc, ending == Ending::Completed, now).unwrap_or_default();
        self.settle(woken, now)
    }
}

/// Where each task (in rank order) sits in the run `placement` makes: the nodes in rank
/// order, its node's place, its place among that node's tasks, and the GPUs the run holds
/// there. One pass over the placement, however many tasks a gang has.
fn run_layouts(placement: &[TaskPlacement]) -> Vec<crate::wire::RunLayout> {
    let mut nodes: Vec<String> = Vec::new();
    // Per node, in `nodes` order: its tasks and GPUs so far.
    let mut counts: Vec<(u32, u32)> = Vec::new();
    let mut places = Vec::with_capacity(placement.len());
    for task in placement {
        let index = nodes.iter().position(|n| *n == task.node).unwrap_or_else(|| {
            nodes.push(task.node.clone());
            counts.push((0, 0));
            nodes.len() - 1
        });
        places.push((index, counts[index].0));
        counts[index].0 += 1;
        counts[index].1 += task.gpus.len() as u32;
    }
    places
        .into_iter()
        .map(|(index, local_rank)| crate::wire::RunLayout {
            nodes: nodes.clone(),
            node_index: index as u32,
            local_rank,
            local_tasks: counts[index].0,
            gpus_on_node: counts[index].1,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::run_layouts;
    use gantry_types::{Bytes, GpuGrant, MilliCpu, TaskPlacement};

    fn task(replica: u32, node: &str, gpus: u32) -> TaskPlacement {
        TaskPlacement {
            group: "worker".into(),
            replica,
            node: node.into(),
            cpu: MilliCpu(0),
            memory: Bytes(0),
            gpus: (0..gpus).map(|gpu| GpuGrant::Whole { gpu }).collect(),
        }
    }

    #[test]
    fn each_task_learns_the_run_s_nodes_and_its_place_on_its_own() {
        let placement = [task(0, "b", 2), task(1, "a", 4), task(2, "b", 2)];
        let layouts = run_layouts(&placement);
        let third = &layouts[2];
        assert_eq!(third.nodes, ["b", "a"], "in rank order, each once");
        assert_eq!((third.node_index, third.local_rank, third.local_tasks, third.gpus_on_node), (0, 1, 2, 4));
        let second = &layouts[1];
        assert_eq!((second.node_index, second.local_rank, second.local_tasks, second.gpus_on_node), (1, 0, 1, 4));
    }
}
