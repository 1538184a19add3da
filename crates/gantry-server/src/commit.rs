//! Group commit: one thread owns the store's writer and commits, in one transaction and one
//! sync, every batch that queued while the previous commit was in flight. A command's effects
//! (launches, stops, its reply) wait for its batch to be durable; batches are committed in the
//! order the state machine produced them, so a later command never becomes durable before an
//! earlier one it may depend on.
//!
//! A failed commit is sticky: the state machine's memory is then ahead of the store, so the
//! controller refuses further commands ([`ControlError::StoreFailed`]) until it is restarted,
//! when it recovers from what was committed — what was never acknowledged. But a commit that
//! failed because the disk is full (`StoreError::Full`: nothing was written) is tried again
//! every [`FULL_RETRY`] until there is space: meanwhile the controller is *stalled* — it
//! refuses commands with a 503 naming the disk, answers reads from memory, and goes on by
//! itself once the commit goes through.

use crate::error::ControlError;
use gantry_store::{Batch, Store};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// What the committer writes to: any [`Store`] (and, in tests, a store that can be held in
/// the middle of a commit).
pub trait Commit {
    fn commit(&mut self, batches: &[Batch]) -> Result<(), gantry_store::StoreError>;
}

impl<S: Store> Commit for S {
    fn commit(&mut self, batches: &[Batch]) -> Result<(), gantry_store::StoreError> {
        Store::commit(self, batches)
    }
}

/// Most batches in one transaction: bounds one commit's time (and memory) under a flood;
/// what is left waits for the next, at once.
pub const GROUP_MAX: usize = 4096;

/// How often a commit refused for a full disk is tried again.
pub const FULL_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

struct Pending {
    batch: Batch,
    done: oneshot::Sender<Result<(), String>>,
}

/// How the group commit has gone (for `/metrics` and the load benchmark).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Transactions written.
    pub commits: u64,
    /// Batches (commands' changes) they held.
    pub batches: u64,
}

/// The store's writer, on its own thread.
#[derive(Debug, Clone)]
pub struct Committer {
    /// Batches to commit; `None` closes the store (the thread drops it and stops).
    queue: mpsc::Sender<Option<Pending>>,
    failed: Arc<Mutex<Option<String>>>,
    /// Why commits wait (the disk is full), while they do.
    stalled: Arc<Mutex<Option<String>>>,
    stats: Arc<Mutex<CommitStats>>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending").field("batch", &self.batch).finish_non_exhaustive()
    }
}

impl Committer {
    /// Start the writer thread over `store`. `grouped`: commit what queued together (else
    /// one transaction per batch: the baseline the load benchmark compares against).
    pub fn start<S: Commit + Send + 'static>(mut store: S, grouped: bool) -> Committer {
        let (queue, rx) = mpsc::channel::<Option<Pending>>();
        let failed = Arc::new(Mutex::new(None::<String>));
        let stalled = Arc::new(Mutex::new(None::<String>));
        let stats = Arc::new(Mutex::new(CommitStats::default()));
        let (failed_w, stats_w, stalled_w) = (failed.clone(), stats.clone(), stalled.clone());
        std::thread::Builder::new()
            .name("gantry-commit".into())
            .spawn(move || {
                let mut closing = false;
                while let Ok(Some(first)) = rx.recv() {
                    let mut group = vec![first];
                    while grouped && group.len() < GROUP_MAX {
                        match rx.try_recv() {
                            Ok(Some(next)) => group.push(next),
                            Ok(None) => {
                                closing = true;
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    let (batches, dones): (Vec<Batch>, Vec<_>) = group.into_iter().map(|p| (p.batch, p.done)).unzip();
                    let result = write(&mut store, batches, &failed_w, &stats_w, &stalled_w);
                    for done in dones {
                        let _ = done.send(result.clone());
                    }
                    if closing {
                        break;
                    }
                }
                // The store (and, with PostgreSQL, its connection and leader lock) ends here.
                drop(store);
            })
            .expect("the commit thread starts");
        Committer { queue, failed, stalled, stats }
    }

    /// Why commits are waiting (the store's disk is full), while they are.
    pub fn stalled(&self) -> Option<String> {
        self.stalled.lock().expect("not poisoned").clone()
    }

    /// Queue `batch` after every batch queued before it; the receiver answers once it is
    /// durable (or the commit failed). An empty batch is a barrier: it answers once everything
    /// before it is durable.
    pub(crate) fn submit(&self, batch: Batch) -> oneshot::Receiver<Result<(), String>> {
        let (done, rx) = oneshot::channel();
        if self.queue.send(Some(Pending { batch, done })).is_err() {
            // The thread is gone; the receiver then reads as a failure.
            *self.failed.lock().expect("not poisoned") = Some("the commit thread stopped".into());
        }
        rx
    }

    /// Close the store once what is queued is committed: a controller stepping down lets go of
    /// its connection (and with it any lock it holds) even while requests still hold clones.
    pub fn close(&self) {
        let _ = self.queue.send(None);
    }

    /// Why the store failed, once it has.
    pub fn failed(&self) -> Option<String> {
        self.failed.lock().expect("not poisoned").clone()
    }

    pub fn stats(&self) -> CommitStats {
        *self.stats.lock().expect("not poisoned")
    }

    /// Wait for a submitted batch.
    pub(crate) async fn durable(rx: oneshot::Receiver<Result<(), String>>) -> Result<(), ControlError> {
        match rx.await {
            Ok(result) => result.map_err(ControlError::StoreFailed),
            Err(_) => Err(ControlError::StoreFailed("the commit thread stopped".into())),
        }
    }
}

fn write<S: Commit>(
    store: &mut S,
    batches: Vec<Batch>,
    failed: &Mutex<Option<String>>,
    stats: &Mutex<CommitStats>,
    stalled: &Mutex<Option<String>>,
) -> Result<(), String> {
    if let Some(why) = failed.lock().expect("not poisoned").clone() {
        return Err(why);
    }
    let batches: Vec<Batch> = batches.into_iter().filter(|b| !b.is_empty()).collect();
    if batches.is_empty() {
        return Ok(());
    }
    let mut committed = store.commit(&batches);
    while let Err(gantry_store::StoreError::Full(why)) = &committed {
        let mut s = stalled.lock().expect("not poisoned");
        if s.is_none() {
            tracing::error!(error = %why, "the store's disk is full: commands are refused until there is space; reads go on");
        }
        *s = Some(why.clone());
        drop(s);
        std::thread::sleep(FULL_RETRY);
        committed = store.commit(&batches);
    }
    if stalled.lock().expect("not poisoned").take().is_some() {
        tracing::info!("the store has space again: commands are taken again");
    }
    match committed {
        Ok(()) => {
            let mut s = stats.lock().expect("not poisoned");
            s.commits += 1;
            s.batches += batches.len() as u64;
            Ok(())
        }
        Err(e) => {
            tracing::error!(error = %e, "committing to the store failed: the controller takes no more commands (with PostgreSQL it steps down and rejoins; with SQLite, restart it)");
            let why = e.to_string();
            *failed.lock().expect("not poisoned") = Some(why.clone());
            Err(why)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::{Receiver, Sender};

    /// A store whose commits wait for a go-ahead, recording each group's size.
    struct Held {
        entered: Sender<()>,
        go: Receiver<bool>,
        groups: Sender<usize>,
    }

    impl Commit for Held {
        fn commit(&mut self, batches: &[Batch]) -> Result<(), gantry_store::StoreError> {
            let _ = self.entered.send(());
            let ok = self.go.recv().unwrap_or(false);
            let _ = self.groups.send(batches.len());
            if ok { Ok(()) } else { Err(gantry_store::StoreError::Backend("broken".into())) }
        }
    }

    fn batch(n: u64) -> Batch {
        Batch { commands: vec![(n, "{}".into())], ..Default::default() }
    }

    #[test]
    fn batches_queued_during_a_commit_go_in_the_next_one_and_wait_for_it() {
        let (go_tx, go) = mpsc::channel();
        let (groups, group_rx) = mpsc::channel();
        let (entered, in_commit) = mpsc::channel();
        let committer = Committer::start(Held { entered, go, groups }, true);
        let mut first = committer.submit(batch(1));
        // While the first commit is held, three more queue up; none is answered yet.
        in_commit.recv().expect("the first commit started");
        let mut rest: Vec<_> = (2..=4).map(|n| committer.submit(batch(n))).collect();
        let barrier = committer.submit(Batch::default());
        assert!(first.try_recv().is_err(), "not acknowledged before it is durable");
        go_tx.send(true).expect("go");
        assert_eq!(group_rx.recv().expect("group"), 1);
        assert!(rest.iter_mut().all(|r| r.try_recv().is_err()), "the next group is still in flight");
        go_tx.send(true).expect("go");
        assert_eq!(group_rx.recv().expect("group"), 3, "three batches, one transaction; the barrier adds nothing");
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        rt.block_on(async {
            Committer::durable(first).await.expect("durable");
            for r in rest {
                Committer::durable(r).await.expect("durable");
            }
            Committer::durable(barrier).await.expect("the barrier answers after them");
        });
        assert_eq!(committer.stats(), CommitStats { commits: 2, batches: 4 });
    }

    #[test]
    fn a_failed_commit_is_sticky() {
        let (go_tx, go) = mpsc::channel();
        let (groups, _group_rx) = mpsc::channel();
        let (entered, _in_commit) = mpsc::channel();
        let committer = Committer::start(Held { entered, go, groups }, true);
        go_tx.send(false).expect("go");
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        let err = rt.block_on(Committer::durable(committer.submit(batch(1)))).expect_err("failed");
        assert!(matches!(err, ControlError::StoreFailed(_)), "{err}");
        assert!(committer.failed().is_some_and(|why| why.contains("broken")));
        // Later batches are refused without touching the store.
        let err = rt.block_on(Committer::durable(committer.submit(batch(2)))).expect_err("still failed");
        assert!(err.to_string().contains("restart the controller"), "{err}");
    }

    /// A store whose disk is full for its first `full` commits.
    struct FillsUp {
        full: usize,
        tries: Arc<Mutex<usize>>,
    }

    impl Commit for FillsUp {
        fn commit(&mut self, _: &[Batch]) -> Result<(), gantry_store::StoreError> {
            let mut tries = self.tries.lock().expect("not poisoned");
            *tries += 1;
            if *tries <= self.full { Err(gantry_store::StoreError::Full("no space".into())) } else { Ok(()) }
        }
    }

    #[test]
    fn a_commit_refused_for_a_full_disk_waits_for_space_and_goes_through() {
        let tries = Arc::new(Mutex::new(0));
        let committer = Committer::start(FillsUp { full: 2, tries: tries.clone() }, true);
        let mut pending = committer.submit(batch(1));
        let started = std::time::Instant::now();
        while committer.stalled().is_none() {
            assert!(started.elapsed() < std::time::Duration::from_secs(5), "never stalled");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(pending.try_recv().is_err(), "not acknowledged while the disk is full");
        assert!(committer.stalled().is_some_and(|why| why.contains("no space")));
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        rt.block_on(Committer::durable(pending)).expect("durable once there is space");
        assert_eq!(*tries.lock().expect("not poisoned"), 3, "the same batches tried again");
        assert_eq!((committer.stalled(), committer.failed()), (None, None), "not stalled, never failed");
        rt.block_on(Committer::durable(committer.submit(batch(2)))).expect("goes on");
    }
}
