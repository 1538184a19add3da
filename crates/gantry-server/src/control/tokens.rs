//! Tokens made and revoked by commands: only an admin may, a member or read-only token's name
//! must be a user who may run here, an agent token's node must be in the fleet. Only the
//! secret's hash ever reaches the state machine (and its log).

use super::{Controller, Effects};
use crate::auth::Principal;
use crate::error::ControlError;
use gantry_store::{Role, TokenRecord};

impl Controller {
    /// A new token `record`, working for `lifetime_s` from its creation (`None`: until revoked).
    pub(super) fn create_token(
        &mut self,
        who: &Principal,
        mut record: TokenRecord,
        lifetime_s: Option<u64>,
    ) -> Result<Effects, ControlError> {
        who.admin_only("creating tokens")?;
        if matches!(record.role, Role::Member | Role::ReadOnly) {
            self.accounts.allows(&record.name)?;
        }
        if let Some(node) = record.node.as_deref().filter(|n| !self.knows_node(n)) {
            return Err(ControlError::UnknownNode(format!("node {node:?} is not in the controller's fleet")));
        }
        record.expires_at_s = crate::auth::expiry(record.created_at_s, lifetime_s)?;
        let record = self.tokens.add(record)?;
        self.pending.tokens_added.push(record);
        Ok(Effects::default())
    }

    pub(super) fn revoke_token(&mut self, who: &Principal, name: &str) -> Result<Effects, ControlError> {
        who.admin_only("revoking tokens")?;
        if who.name == name {
            // Else an admin can lock every admin out: the token revoking is always one that works.
            return Err(ControlError::Conflict(format!(
                "token {name:?} cannot revoke itself: revoke it with another admin token"
            )));
        }
        self.tokens.revoke(name)?;
        self.pending.tokens_revoked.push(name.to_string());
        Ok(Effects::default())
    }
}
