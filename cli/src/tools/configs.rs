//! `floe configs describe|alter`, in the manner of `kafka-configs.sh`: the
//! configs of a topic, a group (KIP-848), a broker, the cluster (Kafka's
//! default broker entity, `--entity-default`, which Kafka's Python and
//! JavaScript admin clients cannot name), or a client metrics subscription
//! (KIP-714, as `kafka-client-metrics.sh`); `floe configs
//! list-client-metrics` names the subscriptions.

use anyhow::bail;
use floe_protocol::kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use floe_protocol::kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use floe_protocol::kafka_protocol::messages::*;

use super::topics::parse_configs;
use super::{Broker, Output, Table, check, print, str_bytes};

/// Which configs: exactly one of these.
#[derive(clap::Args)]
#[group(required = true, multiple = false)]
pub struct Entity {
    #[arg(long)]
    topic: Option<String>,
    /// A consumer group (it need not exist).
    #[arg(long)]
    group: Option<String>,
    /// A broker by id: what that agent was started with (describe only).
    #[arg(long)]
    broker: Option<i32>,
    /// The cluster's dynamic configs, shared by every agent (Kafka's
    /// `--entity-type brokers --entity-default`).
    #[arg(long)]
    cluster: bool,
    /// A client metrics subscription (KIP-714): `metrics` (name prefixes,
    /// `*` for all), `interval.ms`, `match` (`client_id=REGEX`, ...).
    #[arg(long, value_name = "NAME")]
    client_metrics: Option<String>,
}

impl Entity {
    /// The ConfigResource type and name.
    fn resource(&self) -> (i8, String) {
        if let Some(name) = &self.client_metrics {
            return (16, name.clone());
        }
        match (&self.topic, &self.group, self.broker) {
            (Some(topic), ..) => (2, topic.clone()),
            (_, Some(group), _) => (32, group.clone()),
            (_, _, Some(id)) => (4, id.to_string()),
            // The default entity: a broker resource without a name.
            _ => (4, String::new()),
        }
    }

    fn shown(&self) -> String {
        match self.resource() {
            (4, name) if name.is_empty() => "the cluster".into(),
            (4, name) => format!("broker {name}"),
            (2, name) => format!("topic {name}"),
            (16, name) => format!("client metrics subscription {name}"),
            (_, name) => format!("group {name}"),
        }
    }
}

#[derive(clap::Subcommand)]
pub enum ConfigsCommand {
    /// The configs set (with --all, every config with its default).
    Describe {
        #[command(flatten)]
        entity: Entity,
        #[arg(long)]
        all: bool,
    },
    /// Set and delete configs.
    Alter {
        #[command(flatten)]
        entity: Entity,
        /// KEY=VALUE to set (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
        /// KEY to delete, bringing back its default (repeatable).
        #[arg(long = "delete-config", value_name = "KEY")]
        delete_configs: Vec<String>,
    },
    /// The names of the client metrics subscriptions.
    ListClientMetrics,
}

/// Kafka's names of config sources.
fn source_name(source: i8) -> &'static str {
    match source {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        7 => "CLIENT_METRICS_CONFIG",
        8 => "GROUP_CONFIG",
        _ => "UNKNOWN",
    }
}

pub async fn run(
    bootstrap: &str,
    security: &floe_protocol::client::Security,
    output: Output,
    command: ConfigsCommand,
) -> anyhow::Result<()> {
    let mut broker = Broker::connect(bootstrap, security).await?;
    match command {
        ConfigsCommand::Describe { entity, all } => {
            let (kind, name) = entity.resource();
            // A broker describes only its own configs: ask that one.
            if let Some(id) = entity.broker {
                let Some((_, address)) =
                    broker.brokers().await?.into_iter().find(|(b, _)| *b == id)
                else {
                    bail!("no broker {id} in the cluster's metadata");
                };
                broker = Broker::connect(&address, security).await?;
            }
            let request = DescribeConfigsRequest::default().with_resources(vec![
                DescribeConfigsResource::default()
                    .with_resource_type(kind)
                    .with_resource_name(str_bytes(&name))
                    .with_configuration_keys(None),
            ]);
            let response: DescribeConfigsResponse =
                broker.call(ApiKey::DescribeConfigs, 4, &request).await?;
            let mut table = Table::new(&["CONFIG", "VALUE", "SOURCE", "READ-ONLY"]);
            for r in response.results {
                check(
                    r.error_code,
                    &format!("configs of {}", entity.shown()),
                    r.error_message.as_ref(),
                )?;
                for c in r
                    .configs
                    .into_iter()
                    .filter(|c| all || c.config_source != 5)
                {
                    table.push(vec![
                        c.name.to_string().into(),
                        c.value.map(|v| v.to_string()).into(),
                        source_name(c.config_source).into(),
                        c.read_only.to_string().into(),
                    ]);
                }
            }
            print(output, &[("configs", &table)]);
        }
        ConfigsCommand::Alter {
            entity,
            configs,
            delete_configs,
        } => {
            if configs.is_empty() && delete_configs.is_empty() {
                bail!("nothing to alter: give --config or --delete-config");
            }
            let (kind, name) = entity.resource();
            let what = entity.shown();
            alter(&mut broker, kind, &name, &configs, &delete_configs, &what).await?;
            eprintln!("the configs of {} altered", entity.shown());
        }
        ConfigsCommand::ListClientMetrics => {
            let response: ListConfigResourcesResponse = broker
                .call(
                    ApiKey::ListConfigResources,
                    0,
                    &ListConfigResourcesRequest::default(),
                )
                .await?;
            check(
                response.error_code,
                "listing client metrics subscriptions",
                None,
            )?;
            let mut table = Table::new(&["SUBSCRIPTION"]);
            for r in response.config_resources {
                table.push(vec![r.resource_name.to_string().into()]);
            }
            print(output, &[("subscriptions", &table)]);
        }
    }
    Ok(())
}

/// Sets (`KEY=VALUE`) and deletes configs of one resource with
/// IncrementalAlterConfigs; `what` names it in errors.
pub(super) async fn alter(
    broker: &mut Broker,
    kind: i8,
    name: &str,
    configs: &[String],
    delete_configs: &[String],
    what: &str,
) -> anyhow::Result<()> {
    // Kafka's operations: 0 SET, 1 DELETE.
    let set = parse_configs(configs)?.into_iter().map(|(k, v)| {
        AlterableConfig::default()
            .with_name(str_bytes(&k))
            .with_config_operation(0)
            .with_value(Some(str_bytes(&v)))
    });
    let delete = delete_configs.iter().map(|k| {
        AlterableConfig::default()
            .with_name(str_bytes(k))
            .with_config_operation(1)
    });
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(kind)
            .with_resource_name(str_bytes(name))
            .with_configs(set.chain(delete).collect()),
    ]);
    let response: IncrementalAlterConfigsResponse = broker
        .call(ApiKey::IncrementalAlterConfigs, 1, &request)
        .await?;
    for r in &response.responses {
        check(
            r.error_code,
            &format!("altering the configs of {what}"),
            r.error_message.as_ref(),
        )?;
    }
    Ok(())
}
