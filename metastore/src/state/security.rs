//! SCRAM credentials and ACLs.

use super::*;

impl Apply for AlterScramCredentials {
    type Output = Vec<(String, Result<(), ScramRefusal>)>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.scram.alter(self.alterations))
    }
    /// A blind retry landing after another client's change would undo it.
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Query for ScramCredentialOf {
    type Output = Option<ScramCredential>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.scram.get(&self.user, self.mechanism).cloned())
    }
}

impl Query for DescribeScramCredentials {
    type Output = Vec<crate::scram::UserMechanisms>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.scram.describe(self.users.as_deref()))
    }
}

impl Apply for CreateAcls {
    type Output = Vec<Result<(), String>>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.acls.create(self.bindings))
    }
    /// A blind retry landing after another admin deleted the binding would
    /// bring it back.
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Apply for DeleteAcls {
    type Output = Vec<Vec<crate::acls::AclBinding>>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.acls.delete(&self.filters))
    }
    /// A retry deletes what matches then (a binding created meanwhile too).
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Query for DescribeAcls {
    type Output = Vec<crate::acls::AclBinding>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.acls.describe(&self.filter))
    }
}

impl Query for AclsIfChanged {
    type Output = (u64, Option<Vec<crate::acls::AclBinding>>);
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        let version = state.acls.version();
        Ok(match self.known_version == Some(version) {
            true => (version, None),
            false => (version, Some(state.acls.bindings().cloned().collect())),
        })
    }
}
