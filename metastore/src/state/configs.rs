//! Dynamic cluster, broker, group and client configs, and client quotas.

use super::*;

impl Apply for AlterConfigs {
    type Output = ();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        use crate::dynamic_config::{ConfigTarget, apply_ops};
        match self.target {
            ConfigTarget::Topic(name) => {
                let topic = state
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
    /// A blind retry landing after another admin's change would undo it.
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Query for DynamicConfigsOf {
    type Output = std::collections::BTreeMap<String, String>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.configs.of(&self.entity))
    }
}

impl Query for ConfiguredGroups {
    type Output = Vec<String>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.configs.groups())
    }
}

impl Query for ClientMetricsIfChanged {
    type Output = (u64, Option<BTreeMap<String, BTreeMap<String, String>>>);
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        let version = state.configs.version();
        Ok(match self.known_version == Some(version) {
            true => (version, None),
            false => (version, Some(state.configs.client_metrics())),
        })
    }
}

impl Query for ClientQuotasIfChanged {
    type Output = (
        u64,
        Option<BTreeMap<crate::quotas::QuotaEntity, BTreeMap<String, String>>>,
    );
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        let version = state.configs.version();
        Ok(match self.known_version == Some(version) {
            true => (version, None),
            false => (version, Some(state.configs.client_quotas())),
        })
    }
}
