//! Exact replay of the live command log: every command the controller applied, with its time,
//! re-applied in order to a fresh state machine over an empty in-memory store (re-opened at
//! each `open` entry from what the replay itself committed, as the live controller re-opened
//! from its store). Each command's decisions — events (starts with their placements, endings,
//! requeues), launches, stops, the reply, a tick's pending reasons — are fingerprinted the
//! same way live and replayed; the report counts the identical ones and names the first
//! difference. "The log and the version" reproduce a scheduling decision.

use crate::control::command::Logged;
use crate::control::open::Opened;
use crate::control::{Controller, Image};
use crate::error::ControlError;
use gantry_catalog::Catalog;
use gantry_store::{Batch, CommandRecord, SqliteStore, Store};
use gantry_types::Event;
use std::collections::BTreeMap;

/// Entries read from the log at a time.
const PAGE: usize = 1000;

/// What a replay found.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct ReplayReport {
    /// Log entries replayed, by command kind (`open` included).
    pub commands: BTreeMap<String, u64>,
    /// Entries whose decisions were identical.
    pub identical: u64,
    /// Entries compared (all of them, up to and including the first difference).
    pub compared: u64,
    /// Decisions replayed: jobs started (each with its exact placement), ended, requeued
    /// (preempted, or never launched before a restart), tasks launched, runs stopped.
    pub starts: u64,
    pub ends: u64,
    pub requeues: u64,
    pub launches: u64,
    pub stops: u64,
    /// Ticks whose pending reasons were part of the comparison.
    pub reasons_checked: u64,
    /// Where the kept log begins: its first entry's sequence number and time (retention
    /// deleted what came before; the replay opened there from the jobs as of that entry).
    pub from_seq: u64,
    pub from_s: u64,
    /// The jobs' events read from the store to open at that first entry (0: the log is
    /// whole).
    pub events_before: u64,
    /// Entries before the first `open` kept, skipped: what retention had begun to delete
    /// (it deletes a chunk per commit) and not finished.
    pub skipped: u64,
    pub first_difference: Option<Difference>,
}

/// The first entry whose replayed decisions differ from the recorded ones.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Difference {
    pub seq: u64,
    pub at_s: u64,
    pub command: String,
    pub detail: String,
}

impl ReplayReport {
    pub fn total(&self) -> u64 {
        self.commands.values().sum()
    }

    fn differ(&mut self, record: &CommandRecord, command: &str, detail: String) {
        if self.first_difference.is_none() {
            self.first_difference =
                Some(Difference { seq: record.seq, at_s: record.at_s, command: command.into(), detail });
        }
    }
}

/// Replay the command log of `log` (a store the live service wrote).
pub fn replay(log: &dyn Store, catalog: &'static Catalog) -> Result<ReplayReport, ControlError> {
    let skip_below = first_kept_open(log)?;
    let mut replay = Replay { mem: SqliteStore::open_in_memory()?, controller: None, catalog, skip_below };
    let mut report = ReplayReport::default();
    let mut seq = 0;
    loop {
        let page = log.commands_after(seq, PAGE)?;
        let Some(last) = page.last() else { break };
        seq = last.seq;
        for record in &page {
            replay.step(record, log, &mut report)?;
            if report.first_difference.is_some() {
                return Ok(report);
            }
        }
    }
    Ok(report)
}

struct Replay {
    mem: SqliteStore,
    controller: Option<Controller>,
    catalog: &'static Catalog,
    /// Entries before this one are what a retention under way has not deleted yet: skipped.
    skip_below: u64,
}

/// The first `open` entry the store recorded that the log still has, when older entries
/// precede it (a retention deleting a chunk per commit, not finished): the replay starts
/// there. 0 when the log begins with it, or has none recorded (then a log that does not begin
/// with an open is a difference, as it always was).
fn first_kept_open(log: &dyn Store) -> Result<u64, ControlError> {
    let Some(first) = log.commands_after(0, 1)?.into_iter().next() else { return Ok(0) };
    for open in log.opens()? {
        if open.seq < first.seq {
            continue;
        }
        let entry = log.commands_after(open.seq - 1, 1)?.into_iter().next();
        if entry.is_some_and(|e| e.seq == open.seq && kind_of(&e.body).is_ok_and(|k| k == "open")) {
            return Ok(open.seq);
        }
    }
    Ok(0)
}

/// The `command` tag of a log entry.
fn kind_of(body: &str) -> Result<String, ControlError> {
    let value: serde_json::Value = serde_json::from_str(body)
        .map_err(|e| ControlError::Log { seq: None, message: format!("a log entry does not read: {e}") })?;
    Ok(value.get("command").and_then(|c| c.as_str()).unwrap_or("?").to_string())
}

impl Replay {
    fn step(&mut self, record: &CommandRecord, log: &dyn Store, report: &mut ReplayReport) -> Result<(), ControlError> {
        let mut kind = kind_of(&record.body)?;
        if record.seq < self.skip_below {
            report.skipped += 1;
            return Ok(());
        }
        let seq = record.seq;
        let bad = |e: serde_json::Error| ControlError::Log { seq: Some(seq), message: format!("log entry {seq}: {e}") };
        if self.controller.is_none() && report.total() == 0 {
            (report.from_seq, report.from_s) = (record.seq, record.at_s);
            if kind == "open" {
                report.events_before = self.seed(record.seq, log)?;
            }
        }
        let (recorded, batch) = if kind == "open" {
            *report.commands.entry(kind.clone()).or_default() += 1;
            let opened: Opened = serde_json::from_str(&record.body).map_err(bad)?;
            let image = match &opened.image {
                // What the live controller opened from, with the jobs as the replay has them.
                Some(kept) => kept.with_jobs(self.mem.jobs(&[])?),
                None => Image::read(&self.mem, 0)?,
            };
            let carried = opened.image.and_then(|i| i.carried);
            let launched = opened.launched.iter().copied().collect();
            let (controller, batch) =
                Controller::open_carrying(opened.setup, image, carried, self.catalog, &launched, record.at_s)?;
            self.controller = Some(controller);
            (opened.decisions, batch)
        } else {
            let logged: Logged = serde_json::from_str(&record.body).map_err(bad)?;
            kind = logged.command.kind().to_string();
            *report.commands.entry(kind.clone()).or_default() += 1;
            let Some(controller) = self.controller.as_mut() else {
                report.differ(record, &kind, "the log does not begin with an open entry".into());
                return Ok(());
            };
            let is_tick = kind == "tick";
            match controller.apply(record.at_s, logged.command) {
                Ok(effects) => {
                    report.stops += effects.stop.len() as u64;
                    report.launches += effects.launch.len() as u64;
                    if is_tick {
                        report.reasons_checked += 1;
                    }
                    (logged.decisions, effects.commit)
                }
                Err(e) => {
                    report.compared += 1;
                    report.differ(record, &kind, format!("the command failed in the replay: {e}"));
                    return Ok(());
                }
            }
        };
        let replayed = own_fingerprint(&batch, &kind)?;
        report.compared += 1;
        count(&batch.events, report);
        if replayed == recorded {
            report.identical += 1;
        } else {
            let live = live_events_at(log, record.at_s)?;
            let detail = format!(
                "recorded decisions {recorded}, replayed {replayed}; replayed events: {}; events the live store has at that time: {}",
                brief(&batch.events),
                brief(&live)
            );
            report.differ(record, &kind, detail);
        }
        self.mem.commit(&[batch])?;
        Ok(())
    }
}

impl Replay {
    /// The log begins at the `open` entry `seq` (retention deleted what came before): put the
    /// events written before it in the replay's store, so it opens from the same jobs table.
    /// Returns how many.
    fn seed(&mut self, seq: u64, log: &dyn Store) -> Result<u64, ControlError> {
        let Some(open) = log.opens()?.into_iter().find(|o| o.seq == seq) else { return Ok(0) };
        let mut after = 0;
        let mut seeded = 0;
        while after < open.events_through {
            let page: Vec<(u64, Event)> =
                log.events_after(after, PAGE)?.into_iter().take_while(|(s, _)| *s <= open.events_through).collect();
            let Some((last, _)) = page.last() else { break };
            after = *last;
            seeded += page.len() as u64;
            let events = page.into_iter().map(|(_, e)| e).collect();
            self.mem.commit(&[Batch { events, ..Batch::default() }])?;
        }
        Ok(seeded)
    }
}

/// The fingerprint the replay's own log entry for this command carries.
fn own_fingerprint(batch: &Batch, kind: &str) -> Result<String, ControlError> {
    let entry = if kind == "open" { batch.commands.first() } else { batch.commands.last() };
    let (_, body) = entry.ok_or_else(|| ControlError::Internal("a replayed command logged nothing".into()))?;
    let value: serde_json::Value = serde_json::from_str(body).map_err(|e| ControlError::Internal(e.to_string()))?;
    Ok(value.get("decisions").and_then(|d| d.as_str()).unwrap_or_default().to_string())
}

fn count(events: &[Event], report: &mut ReplayReport) {
    for event in events {
        match event {
            Event::Started { .. } => report.starts += 1,
            Event::Ended { .. } => report.ends += 1,
            Event::Requeued { .. } => report.requeues += 1,
            Event::Submitted { .. } | Event::Held { .. } => {}
        }
    }
}

/// The live log's events at `at_s` (for the report of a difference).
fn live_events_at(log: &dyn Store, at_s: u64) -> Result<Vec<Event>, ControlError> {
    let mut found = Vec::new();
    let mut seq = 0;
    loop {
        let page = log.events_after(seq, PAGE)?;
        let Some((last, _)) = page.last() else { break };
        seq = *last;
        found.extend(page.into_iter().map(|(_, e)| e).filter(|e| e.at_s() == at_s));
    }
    Ok(found)
}

/// Events in a line each a reader can compare: kind, job, and where a start went.
fn brief(events: &[Event]) -> String {
    if events.is_empty() {
        return "none".into();
    }
    let lines: Vec<String> = events
        .iter()
        .take(20)
        .map(|e| match e {
            Event::Started { id, tasks, .. } => {
                let on: Vec<String> = tasks.iter().map(|t| format!("{}/{}@{}", t.group, t.replica, t.node)).collect();
                format!("started {id} on {}", on.join(","))
            }
            Event::Ended { id, ending, .. } => format!("ended {id} ({})", ending.name()),
            other => format!("{} {}", other.kind(), other.job_id()),
        })
        .collect();
    lines.join("; ")
}
