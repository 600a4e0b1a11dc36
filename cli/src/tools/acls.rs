//! `floe acls add|list|remove`: ACLs, in the manner of `kafka-acls.sh`.
//!
//! `add` creates one binding per operation given; `list` and `remove` take
//! the same flags as a filter, each left out matching anything.

use anyhow::bail;
use floe_metastore::acls::{CLUSTER_NAME, operation, pattern, permission, resource};
use floe_protocol::kafka_protocol::messages::create_acls_request::AclCreation;
use floe_protocol::kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use floe_protocol::kafka_protocol::messages::*;

use super::{Broker, Output, Table, check, print, str_bytes};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Operation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
}

impl Operation {
    fn code(self) -> i8 {
        use operation::*;
        match self {
            Operation::All => ALL,
            Operation::Read => READ,
            Operation::Write => WRITE,
            Operation::Create => CREATE,
            Operation::Delete => DELETE,
            Operation::Alter => ALTER,
            Operation::Describe => DESCRIBE,
            Operation::ClusterAction => CLUSTER_ACTION,
            Operation::DescribeConfigs => DESCRIBE_CONFIGS,
            Operation::AlterConfigs => ALTER_CONFIGS,
            Operation::IdempotentWrite => IDEMPOTENT_WRITE,
        }
    }

    fn name(code: i8) -> String {
        use clap::ValueEnum;
        Operation::value_variants()
            .iter()
            .find(|o| o.code() == code)
            .and_then(|o| o.to_possible_value())
            .map_or_else(|| format!("op-{code}"), |v| v.get_name().to_string())
    }
}

/// The resource a binding (or filter) is about.
#[derive(Debug, Clone, clap::Args)]
pub struct ResourceArgs {
    #[arg(long, group = "resource")]
    topic: Option<String>,
    #[arg(long, group = "resource")]
    group: Option<String>,
    #[arg(long, group = "resource")]
    transactional_id: Option<String>,
    /// The cluster (its configs, ACLs, users, idempotent writes).
    #[arg(long, group = "resource")]
    cluster: bool,
    /// The name is a prefix (Kafka's PREFIXED pattern).
    #[arg(long)]
    prefixed: bool,
}

impl ResourceArgs {
    /// (type, name); `None` when no resource is named (a filter's "any").
    fn resource(&self) -> Option<(i8, String)> {
        if self.cluster {
            return Some((resource::CLUSTER, CLUSTER_NAME.to_string()));
        }
        let named = [
            (resource::TOPIC, &self.topic),
            (resource::GROUP, &self.group),
            (resource::TRANSACTIONAL_ID, &self.transactional_id),
        ];
        named
            .into_iter()
            .find_map(|(kind, name)| name.clone().map(|n| (kind, n)))
    }

    fn pattern(&self) -> i8 {
        match self.prefixed {
            true => pattern::PREFIXED,
            false => pattern::LITERAL,
        }
    }
}

#[derive(clap::Subcommand)]
pub enum AclsCommand {
    /// Allow (or, with --deny, deny) a principal operations on a resource.
    Add {
        /// e.g. User:alice, or User:* for everyone.
        #[arg(long)]
        principal: String,
        #[arg(long = "operation", required = true, value_enum)]
        operations: Vec<Operation>,
        #[command(flatten)]
        resource: ResourceArgs,
        /// The client address the binding applies to.
        #[arg(long, default_value = "*")]
        host: String,
        #[arg(long)]
        deny: bool,
    },
    /// The ACLs matching the flags given (all of them without flags).
    List {
        #[arg(long)]
        principal: Option<String>,
        #[command(flatten)]
        resource: ResourceArgs,
    },
    /// Remove the ACLs matching the flags given.
    Remove {
        #[arg(long)]
        principal: Option<String>,
        #[arg(long = "operation", value_enum)]
        operation: Option<Operation>,
        #[command(flatten)]
        resource: ResourceArgs,
    },
}

pub async fn run(
    bootstrap: &str,
    security: &floe_protocol::client::Security,
    output: Output,
    command: AclsCommand,
) -> anyhow::Result<()> {
    let mut broker = Broker::connect(bootstrap, security).await?;
    match command {
        AclsCommand::Add {
            principal,
            operations,
            resource,
            host,
            deny,
        } => {
            let Some((kind, name)) = resource.resource() else {
                bail!("name a resource: --topic, --group, --transactional-id or --cluster");
            };
            let creations = operations
                .iter()
                .map(|o| {
                    AclCreation::default()
                        .with_resource_type(kind)
                        .with_resource_name(str_bytes(&name))
                        .with_resource_pattern_type(resource.pattern())
                        .with_principal(str_bytes(&principal))
                        .with_host(str_bytes(&host))
                        .with_operation(o.code())
                        .with_permission_type(match deny {
                            true => permission::DENY,
                            false => permission::ALLOW,
                        })
                })
                .collect();
            let response: CreateAclsResponse = broker
                .call(
                    ApiKey::CreateAcls,
                    2,
                    &CreateAclsRequest::default().with_creations(creations),
                )
                .await?;
            for r in &response.results {
                check(r.error_code, "creating an ACL", r.error_message.as_ref())?;
            }
            eprintln!("added {} ACL(s)", response.results.len());
        }
        AclsCommand::List {
            principal,
            resource,
        } => {
            let (kind, name) = resource.resource().unzip();
            let request = DescribeAclsRequest::default()
                .with_resource_type_filter(kind.unwrap_or(resource::ANY))
                .with_resource_name_filter(name.map(|n| str_bytes(&n)))
                .with_pattern_type_filter(match (resource.prefixed, kind) {
                    (true, _) => pattern::PREFIXED,
                    (false, Some(_)) => pattern::MATCH,
                    (false, None) => pattern::ANY,
                })
                .with_principal_filter(principal.map(|p| str_bytes(&p)))
                .with_host_filter(None)
                .with_operation(operation::ANY)
                .with_permission_type(permission::ANY);
            let response: DescribeAclsResponse =
                broker.call(ApiKey::DescribeAcls, 2, &request).await?;
            check(
                response.error_code,
                "listing ACLs",
                response.error_message.as_ref(),
            )?;
            let mut table = Table::new(&[
                "RESOURCE",
                "NAME",
                "PATTERN",
                "PRINCIPAL",
                "HOST",
                "OPERATION",
                "PERMISSION",
            ]);
            for r in &response.resources {
                for acl in &r.acls {
                    table.push(vec![
                        resource_name(r.resource_type).into(),
                        r.resource_name.as_str().into(),
                        match r.pattern_type {
                            pattern::PREFIXED => "prefixed",
                            _ => "literal",
                        }
                        .into(),
                        acl.principal.as_str().into(),
                        acl.host.as_str().into(),
                        Operation::name(acl.operation).into(),
                        match acl.permission_type {
                            permission::DENY => "deny",
                            _ => "allow",
                        }
                        .into(),
                    ]);
                }
            }
            print(output, &[("acls", &table)]);
        }
        AclsCommand::Remove {
            principal,
            operation: op,
            resource,
        } => {
            let (kind, name) = resource.resource().unzip();
            if kind.is_none() && principal.is_none() {
                bail!("name a principal or a resource (removing every ACL takes both flags)");
            }
            let filter = DeleteAclsFilter::default()
                .with_resource_type_filter(kind.unwrap_or(resource::ANY))
                .with_resource_name_filter(name.map(|n| str_bytes(&n)))
                .with_pattern_type_filter(match (resource.prefixed, kind) {
                    (true, _) => pattern::PREFIXED,
                    (false, Some(_)) => pattern::LITERAL,
                    (false, None) => pattern::ANY,
                })
                .with_principal_filter(principal.map(|p| str_bytes(&p)))
                .with_host_filter(None)
                .with_operation(op.map_or(operation::ANY, Operation::code))
                .with_permission_type(permission::ANY);
            let response: DeleteAclsResponse = broker
                .call(
                    ApiKey::DeleteAcls,
                    2,
                    &DeleteAclsRequest::default().with_filters(vec![filter]),
                )
                .await?;
            let mut removed = 0;
            for r in &response.filter_results {
                check(r.error_code, "removing ACLs", r.error_message.as_ref())?;
                removed += r.matching_acls.len();
            }
            eprintln!("removed {removed} ACL(s)");
        }
    }
    Ok(())
}

fn resource_name(kind: i8) -> &'static str {
    match kind {
        resource::TOPIC => "topic",
        resource::GROUP => "group",
        resource::CLUSTER => "cluster",
        resource::TRANSACTIONAL_ID => "transactional-id",
        resource::DELEGATION_TOKEN => "delegation-token",
        resource::USER => "user",
        _ => "unknown",
    }
}
