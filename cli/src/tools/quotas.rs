//! `floe quotas describe|alter`, as `kafka-configs.sh --entity-type
//! users|clients` does for quotas: a user's, a client id's or a user's
//! client id's `producer_byte_rate`, `consumer_byte_rate`,
//! `request_percentage` and `controller_mutation_rate`
//! (DescribeClientQuotas, AlterClientQuotas).

use anyhow::bail;
use floe_protocol::kafka_protocol::messages::*;
use floe_protocol::kafka_protocol::protocol::StrBytes;

use super::topics::parse_configs;
use super::{Broker, Output, Table, check, print, str_bytes};

/// Which entity: a user and/or a client id, each named or the default.
#[derive(clap::Args)]
pub struct Entity {
    #[arg(long, conflicts_with = "user_default")]
    user: Option<String>,
    /// The default user (Kafka's `--entity-default` for users).
    #[arg(long)]
    user_default: bool,
    #[arg(long, conflicts_with = "client_default")]
    client_id: Option<String>,
    /// The default client id.
    #[arg(long)]
    client_default: bool,
}

impl Entity {
    /// (type, name) pairs; a `None` name is the default.
    fn parts(&self) -> Vec<(&'static str, Option<String>)> {
        let mut parts = Vec::new();
        if self.user.is_some() || self.user_default {
            parts.push(("user", self.user.clone()));
        }
        if self.client_id.is_some() || self.client_default {
            parts.push(("client-id", self.client_id.clone()));
        }
        parts
    }
}

#[derive(clap::Subcommand)]
pub enum QuotasCommand {
    /// The quotas set on entities (all of them without an entity; those of
    /// the entity given, and of entities that include it, with one).
    Describe {
        #[command(flatten)]
        entity: Entity,
    },
    /// Set and delete an entity's quotas.
    Alter {
        #[command(flatten)]
        entity: Entity,
        /// KEY=VALUE to set (repeatable): producer_byte_rate,
        /// consumer_byte_rate (bytes per second, per agent),
        /// request_percentage, controller_mutation_rate (partitions per second).
        #[arg(long = "quota", value_name = "KEY=VALUE")]
        quotas: Vec<String>,
        /// KEY to delete (repeatable).
        #[arg(long = "delete-quota", value_name = "KEY")]
        delete_quotas: Vec<String>,
    },
}

fn shown(name: Option<&StrBytes>) -> String {
    name.map_or("<default>".to_string(), |n| n.to_string())
}

pub async fn run(
    bootstrap: &str,
    security: &floe_protocol::client::Security,
    output: Output,
    command: QuotasCommand,
) -> anyhow::Result<()> {
    let mut broker = Broker::connect(bootstrap, security).await?;
    match command {
        QuotasCommand::Describe { entity } => {
            use describe_client_quotas_request::ComponentData;
            // An exact name, or the default (match types 0 and 1).
            let components = entity
                .parts()
                .into_iter()
                .map(|(kind, name)| {
                    ComponentData::default()
                        .with_entity_type(str_bytes(kind))
                        .with_match_type(if name.is_some() { 0 } else { 1 })
                        .with_match(name.as_deref().map(str_bytes))
                })
                .collect();
            let request = DescribeClientQuotasRequest::default().with_components(components);
            let response: DescribeClientQuotasResponse = broker
                .call(ApiKey::DescribeClientQuotas, 1, &request)
                .await?;
            check(
                response.error_code,
                "describing quotas",
                response.error_message.as_ref(),
            )?;
            let mut table = Table::new(&["USER", "CLIENT-ID", "QUOTA", "VALUE"]);
            for e in response.entries.unwrap_or_default() {
                let name_of = |kind: &str| {
                    e.entity
                        .iter()
                        .find(|p| p.entity_type.as_str() == kind)
                        .map(|p| shown(p.entity_name.as_ref()))
                };
                for v in &e.values {
                    table.push(vec![
                        name_of("user").into(),
                        name_of("client-id").into(),
                        v.key.to_string().into(),
                        v.value.to_string().into(),
                    ]);
                }
            }
            print(output, &[("quotas", &table)]);
        }
        QuotasCommand::Alter {
            entity,
            quotas,
            delete_quotas,
        } => {
            use alter_client_quotas_request::{EntityData, EntryData, OpData};
            let parts = entity.parts();
            if parts.is_empty() {
                bail!("name an entity: --user, --user-default, --client-id or --client-default");
            }
            if quotas.is_empty() && delete_quotas.is_empty() {
                bail!("nothing to alter: give --quota or --delete-quota");
            }
            let mut ops = Vec::new();
            for (key, value) in parse_configs(&quotas)? {
                let Ok(value) = value.parse::<f64>() else {
                    bail!("{key}: `{value}` is not a number");
                };
                ops.push(
                    OpData::default()
                        .with_key(str_bytes(&key))
                        .with_value(value),
                );
            }
            for key in &delete_quotas {
                ops.push(OpData::default().with_key(str_bytes(key)).with_remove(true));
            }
            let entity = parts
                .iter()
                .map(|(kind, name)| {
                    EntityData::default()
                        .with_entity_type(str_bytes(kind))
                        .with_entity_name(name.as_deref().map(str_bytes))
                })
                .collect();
            let request = AlterClientQuotasRequest::default()
                .with_entries(vec![EntryData::default().with_entity(entity).with_ops(ops)]);
            let response: AlterClientQuotasResponse =
                broker.call(ApiKey::AlterClientQuotas, 1, &request).await?;
            for e in &response.entries {
                check(e.error_code, "altering quotas", e.error_message.as_ref())?;
            }
            eprintln!("quotas altered");
        }
    }
    Ok(())
}
