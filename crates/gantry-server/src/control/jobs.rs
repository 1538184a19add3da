//! A job's way in and out by request: submit (all of a workload file or none), cancel, and
//! the bookkeeping both share (admission to the scheduler, dependencies).

use super::{Controller, Effects, Reply, StopRun};
use crate::auth::Principal;
use crate::error::ControlError;
use gantry_engine::CompiledJob;
use gantry_engine::sched::{Admission, JobId, SchedJob};
use gantry_types::{Event, Job, JobState};
use std::collections::BTreeMap;

impl Controller {
    /// The scheduler's job for `job` (compiled once), through the engine's one conversion.
    /// Its dependencies were resolved to ids at submission (stores written before ids were
    /// kept have `#<id>` as the name).
    pub(crate) fn sched_job(&self, job: &Job, compiled: CompiledJob) -> Result<SchedJob, ControlError> {
        let after = job
            .after
            .iter()
            .map(|d| {
                d.id.or_else(|| d.job.strip_prefix('#').and_then(|id| id.parse().ok()))
                    .map(|id| (d.kind, id))
                    .ok_or_else(|| ControlError::Internal(format!("stored dependency {:?} is not resolved", d.job)))
            })
            .collect::<Result<_, _>>()?;
        Ok(SchedJob::of(job, compiled, after))
    }

    pub(crate) fn compile(&self, job: &Job) -> Result<CompiledJob, ControlError> {
        self.empty.compile(job).map_err(|e| refused(job, "job", format!("job {:?}: {e}", job.name)))
    }

    /// Hand a stored job to the scheduler (it waits from `at_s`).
    pub(crate) fn admit(&mut self, id: u64, job: &Job, at_s: u64) -> Result<Admission, ControlError> {
        let compiled = self.compile(job)?;
        self.admit_compiled(id, job, compiled, at_s)
    }

    fn admit_compiled(
        &mut self,
        id: u64,
        job: &Job,
        compiled: CompiledJob,
        at_s: u64,
    ) -> Result<Admission, ControlError> {
        let sched = self.sched_job(job, compiled)?;
        Ok(self.scheduler.submit(id, sched, at_s)?)
    }

    /// A job whose dependency can never be met ends, cancelled, with the log saying why.
    pub(crate) fn settle(&mut self, admissions: Vec<(u64, Admission)>, now: u64) -> Result<(), ControlError> {
        for (id, admission) in admissions {
            if admission == Admission::Never {
                self.record(Event::cancelled(id, now, gantry_types::CANCELLED_BY_CONTROLLER))?;
                tracing::info!(job = id, "cancelled: a dependency can never be met");
            }
        }
        Ok(())
    }

    /// Dependencies name jobs of the same file (an array's name: all its elements), else the
    /// latest earlier job of that name, else the job with that id — among the jobs `who` may
    /// see: a job of another team's queue is as unknown as one never submitted, so a member
    /// learns nothing of it (neither that it exists nor how it stands). Stored with the name
    /// and the id it resolved to.
    fn resolve_dependencies(&self, who: &Principal, mut jobs: Vec<Job>, first: u64) -> Result<Vec<Job>, ControlError> {
        if jobs.iter().all(|j| j.after.is_empty()) {
            return Ok(jobs);
        }
        let local: BTreeMap<String, Vec<usize>> =
            gantry_spec::dependency_index(jobs.iter()).into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        for job in &mut jobs {
            let mut resolved = Vec::new();
            for d in &job.after {
                let ids: Vec<u64> = match local.get(d.job.as_str()) {
                    Some(indices) => indices.iter().map(|&i| first + i as u64).collect(),
                    None => {
                        match self.jobs.values().rev().find(|r| r.name == d.job && who.sees(&r.queue)).or_else(|| {
                            // A number is a job id (Slurm's `--dependency=afterok:123`).
                            d.job.parse::<u64>().ok().and_then(|id| self.jobs.get(&id)).filter(|r| who.sees(&r.queue))
                        }) {
                            Some(row) => vec![row.id],
                            None => {
                                let message = format!(
                                    "job {:?} / after: unknown job {:?} (not in this file, not submitted before)",
                                    job.name, d.job
                                );
                                return Err(refused(job, "after", message));
                            }
                        }
                    }
                };
                resolved.extend(ids.into_iter().map(|id| gantry_types::Dependency {
                    kind: d.kind,
                    job: d.job.clone(),
                    id: Some(id),
                }));
            }
            job.after = resolved;
        }
        Ok(jobs)
    }

    /// Could this job ever run here (`gantry_engine::ever`)? A job asking for MIG instances
    /// no GPU is carved into now is accepted when the fleet could be laid out for it (it waits
    /// for that layout; `GET /v1/plan`).
    fn check_fits(
        &mut self,
        job: &Job,
        compiled: &CompiledJob,
        checks: &mut gantry_engine::ever::LayoutChecks,
    ) -> Result<(), ControlError> {
        match gantry_engine::ever::could_run(&mut self.empty, job, compiled, self.catalog, checks) {
            Ok(gantry_engine::ever::Fits::Now) => Ok(()),
            Ok(gantry_engine::ever::Fits::OnceLaidOut) => {
                tracing::info!(job = %job.name, "accepted: needs GPUs laid out otherwise than now (see GET /v1/plan)");
                Ok(())
            }
            Err(reasons) => {
                let why: Vec<String> = reasons.iter().take(3).map(|r| r.reason.to_string()).collect();
                Err(refused(job, "job", format!("job {:?} can never run on this fleet: {}", job.name, why.join("; "))))
            }
        }
    }

    /// Accept a workload file's jobs, all or none: each is checked against the fleet (a job no
    /// node could ever hold is refused with the engine's reasons) before anything changes.
    pub(crate) fn submit(
        &mut self,
        who: &Principal,
        jobs: Vec<Job>,
        key: Option<&str>,
        now: u64,
    ) -> Result<Effects, ControlError> {
        if jobs.is_empty() {
            return Err(ControlError::request("body", "the workload has no jobs"));
        }
        if let Some(key) = key {
            // A retry of a submission that was made: its jobs, not new ones.
            if let Some(ids) = self.submissions.get(&(who.name.clone(), key.to_string())) {
                tracing::info!(token = %who.name, key, jobs = ids.len(), "a repeated submission: answered with its jobs");
                return Ok(Effects { reply: Reply::Submitted { ids: ids.clone() }, ..Default::default() });
            }
        }
        let (jobs, compiled, first) = self.checked(who, jobs, key)?;
        let ids: Vec<u64> = (first..first + jobs.len() as u64).collect();
        let jobs = number_arrays(jobs, first);
        for (id, job) in ids.iter().zip(&jobs) {
            self.record(Event::Submitted { id: *id, at_s: now, job: Box::new(job.clone()) })?;
            self.note_arrival(*id, now);
        }
        tracing::info!(token = %who.name, jobs = ids.len(), first, "submitted");
        let mut admissions = Vec::new();
        for ((id, job), compiled) in ids.iter().zip(&jobs).zip(compiled) {
            admissions.push((*id, self.admit_compiled(*id, job, compiled, now)?));
        }
        self.settle(admissions, now)?;
        Ok(Effects { reply: Reply::Submitted { ids }, schedule: true, ..Default::default() })
    }

    /// What a submission passes before anything is recorded (`submit`, and `estimate`, which
    /// records nothing): each job stamped with its user and granted priority, allowed to its
    /// user and queue, within the admission limits, its dependencies resolved, compiled and
    /// able to run on this fleet some day. With the id the first would get.
    pub(crate) fn checked(
        &mut self,
        who: &Principal,
        jobs: Vec<Job>,
        key: Option<&str>,
    ) -> Result<(Vec<Job>, Vec<CompiledJob>, u64), ControlError> {
        let jobs = jobs
            .into_iter()
            .map(|job| {
                let mut job = who.stamp(job)?;
                job.control.submission_key = key.map(str::to_string);
                self.place(&mut job)?;
                self.grant_priority(who, &mut job);
                Ok(job)
            })
            .collect::<Result<Vec<_>, ControlError>>()?;
        for job in &jobs {
            self.accounts.allows(job.control.user.as_deref().unwrap_or_default())?;
            who.acts_on(&job.queue)?;
            if !self.scheduler.knows_queue(&job.queue) {
                let message =
                    format!("job {:?}: unknown queue {:?} (not in the controller's queue file)", job.name, job.queue);
                return Err(refused(job, "queue", message));
            }
        }
        self.admissible(&jobs)?;
        let first = self.jobs.keys().next_back().map_or(1, |last| last + 1);
        let jobs = self.resolve_dependencies(who, jobs, first)?;
        let mut checks = Default::default();
        let mut compiled = Vec::with_capacity(jobs.len());
        for job in &jobs {
            let c = self.compile(job)?;
            self.check_fits(job, &c, &mut checks)?;
            compiled.push(c);
        }
        Ok((jobs, compiled, first))
    }

    /// The job's QOS and partition resolved by the queue file (`gantry_types::partition`): its
    /// priority, queue, nodes and time limit as they mean. Without a queue file only the QOS
    /// names gantry knows by default mean anything.
    fn place(&self, job: &mut Job) -> Result<(), ControlError> {
        let placed = match self.scheduler.queue_tree() {
            Some(tree) => tree.place(job),
            None => gantry_types::QueueTree::flat([], 1, 1).place(job),
        };
        placed.map_err(|why| refused(job, why.field(), format!("job {:?}: {why}", job.name)))
    }

    /// The priority `who` may give `job` in its queue: the queue's default when the job names
    /// none; what a member names, capped at the queue's maximum; what an admin names. What
    /// was asked stays in `control.priority_asked`, so the job can say it was capped.
    fn grant_priority(&self, who: &Principal, job: &mut Job) {
        let range = self.scheduler.priority_range(&job.queue);
        let asked = job.control.priority_asked.or((job.priority != 0).then_some(job.priority));
        job.priority = match asked {
            None => range.default,
            Some(p) if who.role == gantry_store::Role::Admin => p,
            Some(p) => p.min(range.max),
        };
        job.control.priority_asked = asked;
    }

    /// The admission limits a submission must meet (`admission.rs`): jobs per request, name
    /// lengths, and how many jobs its users and queues would then have waiting.
    fn admissible(&self, jobs: &[Job]) -> Result<(), ControlError> {
        let limits = &self.admission;
        if jobs.len() > limits.jobs_per_request {
            return Err(ControlError::TooLarge {
                limit: "jobs_per_request",
                value: limits.jobs_per_request as u64,
                message: format!("{} jobs in one submission", jobs.len()),
            });
        }
        let (mut users, mut queues) = (BTreeMap::<&str, usize>::new(), BTreeMap::<&str, usize>::new());
        for job in jobs {
            limits.check_names(job)?;
            *users.entry(job.control.user.as_deref().unwrap_or_default()).or_default() += 1;
            *queues.entry(job.queue.as_str()).or_default() += 1;
        }
        let backlog = &self.backlog;
        within("pending_per_user", "user", limits.pending_per_user, users, |k| backlog.of_user(k))?;
        within("pending_per_queue", "queue", limits.pending_per_queue, queues, |k| backlog.of_queue(k))?;
        Ok(())
    }

    /// `Command::Cancel`: cancel `id`; `force` (`cancel --force`) counts tasks on unreachable
    /// nodes as ended now.
    pub(super) fn cancel_command(
        &mut self,
        who: &Principal,
        id: u64,
        force: bool,
        now: u64,
    ) -> Result<Effects, ControlError> {
        let mut effects = self.cancel(who, id, now)?;
        if force {
            self.force_end(id, now, &mut effects)?;
            if !self.running.contains_key(&id) {
                effects.reply = super::Reply::Cancelled { stopping: false };
            }
        }
        Ok(effects)
    }

    /// Cancel a job: a waiting one ends now; a running one is stopped (its tasks are
    /// signalled; it ends when they have exited).
    pub(crate) fn cancel(&mut self, who: &Principal, id: u64, now: u64) -> Result<Effects, ControlError> {
        let row = self.jobs.get(&id).ok_or(ControlError::UnknownJob(id))?;
        who.acts_on(&row.queue)?;
        let (state, attempt, grace_s) = (row.state, row.requeues, row.job.lifecycle.grace_s);
        match state {
            JobState::Pending => {
                let woken = self.scheduler.cancel_waiting(id as JobId, now)?;
                self.record(Event::cancelled(id, now, &who.name))?;
                self.settle(woken, now)?;
                Ok(Effects { reply: Reply::Cancelled { stopping: false }, schedule: true, ..Default::default() })
            }
            JobState::Running => {
                let mut effects = Effects { reply: Reply::Cancelled { stopping: true }, ..Default::default() };
                if let Some(runs) = self.running.get_mut(&id) {
                    runs.cancelled = true;
                    runs.cancelled_by = Some(who.name.clone());
                    runs.stopping = Some(grace_s);
                }
                match self.agents {
                    super::Agents::Local => effects.stop.push(StopRun { job: id, attempt, grace_s }),
                    super::Agents::Remote { .. } => {
                        effects.wake.extend(self.running.get(&id).into_iter().flat_map(|r| r.tasks.values().cloned()));
                    }
                }
                Ok(effects)
            }
            state => Err(ControlError::JobEnded { id, state: state.name() }),
        }
    }

    /// Requeue a running job (`scontrol requeue`): its tasks are stopped as for a cancel and,
    /// once they have exited, it waits again in its queue with its original place, what the
    /// run used kept (as a preempted job does). An ended job is final: it is submitted again.
    pub(crate) fn requeue(&mut self, who: &Principal, id: u64) -> Result<Effects, ControlError> {
        let row = self.jobs.get(&id).ok_or(ControlError::UnknownJob(id))?;
        who.acts_on(&row.queue)?;
        if row.state != JobState::Running {
            let hint = if row.state.is_final() { " (an ended job is final: submit it again)" } else { "" };
            return Err(ControlError::Conflict(format!(
                "job {id} is {}: only a running job can be requeued{hint}",
                row.state.name()
            )));
        }
        let grace_s = row.job.lifecycle.grace_s;
        let runs = self.running.get_mut(&id).ok_or_else(|| ControlError::Internal(format!("job {id} runs nowhere")))?;
        if runs.stopping.is_some() {
            return Err(ControlError::Conflict(format!("job {id} is being stopped already")));
        }
        runs.moved = Some(format!("requeued by {}", who.name));
        let mut effects = Effects { reply: Reply::Requeued, ..Default::default() };
        self.send_stop(id, grace_s, &mut effects);
        Ok(effects)
    }

    /// Hold a waiting job (it leaves its queue and never starts until released) or release
    /// it (it waits again from now). Holding a held job, or releasing one that is not, changes
    /// nothing.
    pub(crate) fn set_held(&mut self, who: &Principal, id: u64, held: bool, now: u64) -> Result<Effects, ControlError> {
        let row = self.jobs.get(&id).ok_or(ControlError::UnknownJob(id))?;
        who.acts_on(&row.queue)?;
        if row.state != JobState::Pending {
            return Err(ControlError::Conflict(format!(
                "job {id} is {}: only a waiting job can be held or released",
                row.state.name()
            )));
        }
        if row.job.control.hold == held {
            return Ok(Effects { reply: Reply::Held { changed: false }, ..Default::default() });
        }
        if held {
            self.scheduler.hold(id)?;
            self.record(Event::Held { id, at_s: now, held })?;
        } else {
            let admission = self.scheduler.release(id, now)?;
            self.record(Event::Held { id, at_s: now, held })?;
            self.settle(vec![(id, admission)], now)?;
        }
        Ok(Effects { reply: Reply::Held { changed: true }, schedule: !held, ..Default::default() })
    }
}

/// Would `adding` jobs per key keep every key's waiting jobs within `max`?
fn within(
    limit: &'static str,
    what: &str,
    max: usize,
    adding: BTreeMap<&str, usize>,
    waiting_of: impl Fn(&str) -> usize,
) -> Result<(), ControlError> {
    for (key, n) in adding {
        let waiting = waiting_of(key);
        if waiting + n > max {
            return Err(ControlError::TooMany {
                limit,
                value: max as u64,
                message: format!("{what} {key:?} has {waiting} jobs waiting and {n} more are submitted"),
            });
        }
    }
    Ok(())
}

/// `job` refused as given, by its field.
fn refused(job: &gantry_types::Job, field: &'static str, message: String) -> ControlError {
    ControlError::Job { job: job.name.clone(), field, message }
}

/// Each array element learns its array's job id, as Slurm numbers an array: the id of its
/// first element in this submission (jobs get ids in order from `first`).
fn number_arrays(mut jobs: Vec<Job>, first: u64) -> Vec<Job> {
    let mut firsts: std::collections::BTreeMap<String, u64> = Default::default();
    for (k, job) in jobs.iter_mut().enumerate() {
        if let Some(a) = job.control.array.as_mut() {
            a.job = Some(*firsts.entry(a.array.clone()).or_insert(first + k as u64));
        }
    }
    jobs
}
