//! SCRAM credentials and ACLs.

use super::*;

mod scram;
pub use scram::ScramCredentials;

/// The security part of the state: users' SCRAM credentials and the ACLs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Security {
    pub(super) scram: ScramCredentials,
    pub(super) acls: crate::acls::Acls,
}

impl Apply for AlterScramCredentials {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.security.scram.alter(self.alterations))
    }
}

impl Query for ScramCredentialOf {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state
            .security
            .scram
            .get(&self.user, self.mechanism)
            .cloned())
    }
}

impl Query for DescribeScramCredentials {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.security.scram.describe(self.users.as_deref()))
    }
}

impl Apply for CreateAcls {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.security.acls.create(self.bindings))
    }
}

impl Apply for DeleteAcls {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.security.acls.delete(&self.filters))
    }
}

impl Query for DescribeAcls {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.security.acls.describe(&self.filter))
    }
}

impl Query for AclsIfChanged {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        let version = state.security.acls.version();
        Ok(match self.known_version == Some(version) {
            true => (version, None),
            false => (
                version,
                Some(state.security.acls.bindings().cloned().collect()),
            ),
        })
    }
}
