//! The chargeback report from the ledger in the store, as the API and the dashboard both
//! serve it.

use crate::auth::Principal;
use crate::error::ControlError;
use crate::{Shared, views};

/// The chargeback report for `[from_s, to_s)` (whole hours) from the ledger in the store.
pub fn usage_lines(
    shared: &Shared,
    who: &Principal,
    from_s: u64,
    to_s: u64,
    by: crate::meter::UsageBy,
) -> Result<Vec<crate::meter::UsageLine>, ControlError> {
    who.not_agent()?;
    let rows = {
        use gantry_store::Store;
        shared.reader.lock().expect("not poisoned").usage(from_s, to_s)?
    };
    shared.read(|c| views::usage(c, who, rows, by, (from_s, to_s)))
}
