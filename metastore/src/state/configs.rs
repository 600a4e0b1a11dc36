//! Dynamic cluster, broker, group and client configs, and client quotas.

use super::*;

mod dynamic;
pub use dynamic::DynamicConfigs;

impl Apply for AlterConfigs {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        use crate::dynamic_config::{ConfigTarget, apply_ops};
        match self.target {
            ConfigTarget::Topic(name) => {
                let topic = state
                    .log
                    .topics
                    .get_mut(&name)
                    .ok_or(Refusal::UnknownTopicOrPartition)?;
                let configs = apply_ops(&topic.info.configs, &self.ops, self.replace)
                    .map_err(Refusal::InvalidConfig)?;
                crate::dynamic_config::check_topic_change(&configs, &self.ops)
                    .map_err(Refusal::InvalidConfig)?;
                topic.info.configs = configs;
                Ok(())
            }
            ConfigTarget::Dynamic(entity) => state
                .configs
                .alter(entity, &self.ops, self.replace)
                .map_err(Refusal::InvalidConfig),
        }
    }
}

impl Query for DynamicConfigsOf {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.configs.of(&self.entity))
    }
}

impl Query for ConfiguredGroups {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.configs.groups())
    }
}

impl Query for ClientMetricsIfChanged {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        let version = state.configs.version();
        Ok(match self.known_version == Some(version) {
            true => (version, None),
            false => (version, Some(state.configs.client_metrics())),
        })
    }
}

impl Query for ClientQuotasIfChanged {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        let version = state.configs.version();
        Ok(match self.known_version == Some(version) {
            true => (version, None),
            false => (version, Some(state.configs.client_quotas())),
        })
    }
}

impl State {
    /// The versions of what agents keep copies of (see
    /// [`crate::push::Versions`]).
    pub fn versions(&self) -> crate::push::Versions {
        crate::push::Versions {
            configs: self.configs.version(),
            acls: self.security.acls.version(),
        }
    }
}
