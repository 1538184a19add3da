//! A controller that keeps serving while its PostgreSQL store comes and goes: when the store
//! fails (PostgreSQL restarted, the network cut the connection, another controller took the
//! lock), the controller steps down and starts again on the same address as a standby,
//! which recovers from what was committed and leads again when the lock is free — no
//! supervisor needed, nothing acknowledged lost. On SQLite a failed store ends the process:
//! one controller, nothing to hand over to.

use crate::error::ServeError;
use crate::{Running, ServeConfig, StoreChoice};
use std::net::SocketAddr;

/// What happened, for the operator's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// `stop` came: the controller stops now (its tasks keep running).
    Stopping,
    /// A SQLite store failed: the controller stops now.
    StoreFailed { why: String },
    /// The store failed; this controller now waits as a standby on `addr`.
    SteppedDown { why: String, store: String, addr: SocketAddr },
    /// It leads again.
    Leading { addr: SocketAddr, store: String, term: u64 },
}

/// How serving ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// `stop` came (Ctrl-C, SIGTERM): a graceful stop.
    Stopped,
    /// A SQLite store failed: nothing done since was acknowledged; a restart recovers.
    StoreFailed(String),
}

/// Serve `running` (started from `config`) until `stop`, rejoining as a standby each time a
/// PostgreSQL store fails; `notice` hears each step down and each return to leading.
pub async fn serve_until<E>(
    mut running: Running,
    config: ServeConfig,
    stop: impl std::future::Future<Output = Result<(), E>>,
    mut notice: impl FnMut(Notice),
) -> Result<Result<Ended, E>, ServeError> {
    tokio::pin!(stop);
    loop {
        let why = tokio::select! {
            stopped = &mut stop => {
                notice(Notice::Stopping);
                running.shutdown().await;
                return Ok(stopped.map(|()| Ended::Stopped));
            }
            why = running.store_failed() => why,
        };
        let StoreChoice::Postgres { url, .. } = &config.store else {
            notice(Notice::StoreFailed { why: why.clone() });
            running.shutdown().await;
            return Ok(Ok(Ended::StoreFailed(why)));
        };
        let store = gantry_store::redact_url(url);
        notice(Notice::SteppedDown { why, store: store.clone(), addr: running.addr });
        let mut again = config.clone();
        again.listen = running.addr;
        again.store = StoreChoice::Postgres { url: url.clone(), standby: true };
        running.shutdown().await;
        running = tokio::select! {
            stopped = &mut stop => return Ok(stopped.map(|()| Ended::Stopped)),
            started = crate::start(again) => started?,
        };
        notice(Notice::Leading { addr: running.addr, store, term: running.term });
    }
}
