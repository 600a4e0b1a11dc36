//! `floe groups list|describe|reset-offsets|delete`.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, bail};
use bytes::Bytes;
use floe_protocol::kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};

use floe_protocol::kafka_protocol::messages::*;

use super::topics::list_offsets;
use super::{Broker, Output, Table, check, print, share_groups, str_bytes};

#[derive(clap::Subcommand)]
pub enum GroupsCommand {
    /// List groups with their state.
    List,
    /// A group's members and, per partition, its committed offset and lag.
    Describe { group: String },
    /// Move a group's committed offsets; prints the plan unless --execute.
    /// The group must have no members.
    ResetOffsets(ResetArgs),
    /// Delete groups (each must have no members) and their offsets.
    Delete {
        #[arg(required = true)]
        groups: Vec<String>,
    },
    /// Delete a group's offsets of some topics (it must have no members
    /// reading them): a share group then reads them as its
    /// share.auto.offset.reset says.
    DeleteOffsets {
        group: String,
        /// A topic (repeatable); for a consumer group TOPIC:P,Q names
        /// some of its partitions.
        #[arg(long = "topic", required = true)]
        topics: Vec<String>,
    },
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("to").required(true)
    .args(["to_earliest", "to_latest", "to_datetime", "shift_by"])))]
pub struct ResetArgs {
    group: String,
    /// A topic, or TOPIC:P,Q for some of its partitions (repeatable).
    #[arg(long = "topic", required = true)]
    topics: Vec<String>,
    #[arg(long)]
    to_earliest: bool,
    #[arg(long)]
    to_latest: bool,
    /// The first offset at or after a time, e.g. 2026-12-04T00:00:00Z.
    #[arg(long)]
    to_datetime: Option<String>,
    /// Move each committed offset by N (negative: back), within the log.
    #[arg(long, allow_hyphen_values = true)]
    shift_by: Option<i64>,
    /// Commit the new offsets (without it, only the plan is printed).
    #[arg(long)]
    execute: bool,
}

pub async fn run(
    bootstrap: &str,
    security: &floe_protocol::client::Security,
    output: Output,
    command: GroupsCommand,
) -> anyhow::Result<()> {
    let mut broker = Broker::connect(bootstrap, security).await?;
    match command {
        GroupsCommand::List => {
            // Each broker lists the groups it coordinates: ask them all, as
            // kafka-consumer-groups.sh does (one listed twice while brokers
            // disagree on who is live is shown once).
            let mut groups = BTreeMap::new();
            let mut failed = Vec::new();
            for address in broker.addresses().await? {
                let listed = async {
                    let mut each = Broker::connect(&address, security).await?;
                    let response: ListGroupsResponse = each
                        .call(ApiKey::ListGroups, 5, &ListGroupsRequest::default())
                        .await?;
                    check(
                        response.error_code,
                        &format!("listing groups at {address}"),
                        None,
                    )?;
                    anyhow::Ok(response.groups)
                }
                .await;
                match listed {
                    Ok(listed) => {
                        for g in listed {
                            groups.insert(g.group_id.0.to_string(), g);
                        }
                    }
                    Err(e) => failed.push(format!("{address}: {e:#}")),
                }
            }
            let mut table = Table::new(&["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"]);
            for g in groups.into_values() {
                table.push(vec![
                    g.group_id.0.to_string().into(),
                    g.group_type.to_string().into(),
                    g.group_state.to_string().into(),
                    g.protocol_type.to_string().into(),
                ]);
            }
            print(output, &[("groups", &table)]);
            // What the others listed is printed; the list is incomplete.
            if !failed.is_empty() {
                bail!(
                    "the groups of {} broker(s) are missing: {}",
                    failed.len(),
                    failed.join("; ")
                );
            }
        }
        GroupsCommand::Describe { group } => describe(&mut broker, output, &group).await?,
        GroupsCommand::ResetOffsets(args) => reset(&mut broker, output, args).await?,
        GroupsCommand::DeleteOffsets { group, topics } => {
            delete_offsets(&mut broker, &group, &topics).await?
        }
        GroupsCommand::Delete { groups } => {
            let request = DeleteGroupsRequest::default()
                .with_groups_names(groups.iter().map(|g| GroupId(str_bytes(g))).collect());
            let response: DeleteGroupsResponse =
                broker.call(ApiKey::DeleteGroups, 2, &request).await?;
            let mut failed = Vec::new();
            for r in response.results {
                match check(r.error_code, &format!("deleting {}", r.group_id.0), None) {
                    Ok(()) => eprintln!("deleted group {}", r.group_id.0),
                    Err(e) => failed.push(e.to_string()),
                }
            }
            if !failed.is_empty() {
                bail!("{}", failed.join("; "));
            }
        }
    }
    Ok(())
}

/// A group's state and members.
struct Described {
    state: String,
    members: Vec<Member>,
}

struct Member {
    id: String,
    client_id: String,
    host: String,
    partitions: Vec<(String, i32)>,
}

async fn describe_group(broker: &mut Broker, group: &str) -> anyhow::Result<Described> {
    let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(str_bytes(group))]);
    let response: DescribeGroupsResponse = broker.call(ApiKey::DescribeGroups, 5, &request).await?;
    let g = response
        .groups
        .into_iter()
        .next()
        .context("no answer for the group")?;
    check(g.error_code, &format!("group {group}"), None)?;
    let consumer = g.protocol_type.as_str() == "consumer";
    let members = g
        .members
        .into_iter()
        .map(|m| {
            let partitions = if consumer {
                assigned(&m.member_assignment)
            } else {
                Vec::new()
            };
            Member {
                id: m.member_id.to_string(),
                client_id: m.client_id.to_string(),
                host: m.client_host.to_string(),
                partitions,
            }
        })
        .collect();
    Ok(Described {
        state: g.group_state.to_string(),
        members,
    })
}

/// The partitions of a `consumer` member's assignment (none if unreadable).
fn assigned(assignment: &Bytes) -> Vec<(String, i32)> {
    floe_protocol::decode_consumer_protocol::<ConsumerProtocolAssignment>(assignment)
        .map(|a| {
            a.assigned_partitions
                .into_iter()
                .flat_map(|t| {
                    let topic = t.topic.0.to_string();
                    t.partitions.into_iter().map(move |p| (topic.clone(), p))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Committed offsets of a group, by (topic, partition).
async fn committed(
    broker: &mut Broker,
    group: &str,
) -> anyhow::Result<BTreeMap<(String, i32), i64>> {
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(str_bytes(group)))
        .with_topics(None);
    let response: OffsetFetchResponse = broker.call(ApiKey::OffsetFetch, 7, &request).await?;
    check(response.error_code, &format!("offsets of {group}"), None)?;
    let mut offsets = BTreeMap::new();
    for t in response.topics {
        for p in t.partitions {
            check(
                p.error_code,
                &format!("offset of {}-{}", t.name.0, p.partition_index),
                None,
            )?;
            if p.committed_offset >= 0 {
                offsets.insert(
                    (t.name.0.to_string(), p.partition_index),
                    p.committed_offset,
                );
            }
        }
    }
    Ok(offsets)
}

/// The log-end offsets of these partitions.
pub(super) async fn log_ends(
    broker: &mut Broker,
    partitions: &BTreeSet<(String, i32)>,
    timestamp: i64,
) -> anyhow::Result<BTreeMap<(String, i32), i64>> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in partitions {
        by_topic.entry(t).or_default().push(*p);
    }
    let mut ends = BTreeMap::new();
    for (topic, ps) in by_topic {
        for (p, offset) in list_offsets(broker, topic, &ps, timestamp).await? {
            ends.insert((topic.to_string(), p), offset);
        }
    }
    Ok(ends)
}

async fn describe(broker: &mut Broker, output: Output, group: &str) -> anyhow::Result<()> {
    let described = describe_group(broker, group).await?;
    if described.state == "Dead" {
        return match share_groups::described(broker, group).await? {
            Some(share) => share_groups::describe(broker, output, group, share).await,
            None => bail!("group {group} does not exist"),
        };
    }
    let offsets = committed(broker, group).await?;
    let mut owners: BTreeMap<(String, i32), usize> = BTreeMap::new();
    for (i, member) in described.members.iter().enumerate() {
        for tp in &member.partitions {
            owners.insert(tp.clone(), i);
        }
    }
    let partitions: BTreeSet<(String, i32)> =
        offsets.keys().chain(owners.keys()).cloned().collect();
    let ends = log_ends(broker, &partitions, -1).await?;
    let mut table = Table::new(&[
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]);
    for tp in &partitions {
        let current = offsets.get(tp);
        let end = ends.get(tp);
        let lag = match (current, end) {
            (Some(c), Some(e)) => Some((e - c).max(0)),
            _ => None,
        };
        let owner = owners.get(tp).map(|&i| &described.members[i]);
        table.push(vec![
            group.into(),
            tp.0.as_str().into(),
            tp.1.into(),
            current.copied().into(),
            end.copied().into(),
            lag.into(),
            owner.map(|m| m.id.as_str()).into(),
            owner.map(|m| m.host.as_str()).into(),
            owner.map(|m| m.client_id.as_str()).into(),
        ]);
    }
    let mut members = Table::new(&[
        "GROUP",
        "STATE",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
        "PARTITIONS",
    ]);
    for m in &described.members {
        members.push(vec![
            group.into(),
            described.state.as_str().into(),
            m.id.as_str().into(),
            m.host.as_str().into(),
            m.client_id.as_str().into(),
            m.partitions.len().into(),
        ]);
    }
    if output == Output::Table && described.members.is_empty() {
        eprintln!("group {group} has no active members ({})", described.state);
    }
    print(output, &[("offsets", &table), ("members", &members)]);
    Ok(())
}

/// `TOPIC` or `TOPIC:P,Q`: the partitions meant (all of the topic's when
/// none are named, found from the log).
async fn partitions_of(broker: &mut Broker, spec: &str) -> anyhow::Result<Vec<(String, i32)>> {
    if let Some((topic, list)) = spec.split_once(':') {
        return list
            .split(',')
            .map(|p| {
                p.trim()
                    .parse::<i32>()
                    .map(|p| (topic.to_string(), p))
                    .with_context(|| format!("`{p}` in `{spec}` is not a partition number"))
            })
            .collect();
    }
    let request = MetadataRequest::default().with_topics(Some(vec![
        metadata_request::MetadataRequestTopic::default()
            .with_name(Some(TopicName(str_bytes(spec)))),
    ]));
    let response: MetadataResponse = broker.call(ApiKey::Metadata, 12, &request).await?;
    let topic = response
        .topics
        .into_iter()
        .next()
        .context("no answer for the topic")?;
    check(topic.error_code, &format!("topic {spec}"), None)?;
    Ok(topic
        .partitions
        .iter()
        .map(|p| (spec.to_string(), p.partition_index))
        .collect())
}

async fn reset(broker: &mut Broker, output: Output, args: ResetArgs) -> anyhow::Result<()> {
    let group = &args.group;
    let mut described = describe_group(broker, group).await?;
    let share = match described.state.as_str() {
        "Dead" => share_groups::described(broker, group).await?,
        _ => None,
    };
    if let Some(share) = &share {
        described.state = share.group_state.to_string();
    }
    if !matches!(described.state.as_str(), "Empty" | "Dead") {
        bail!(
            "group {group} is {}: offsets can be reset only while it has no members; stop its consumers first",
            described.state
        );
    }
    let mut wanted = BTreeSet::new();
    for spec in &args.topics {
        wanted.extend(partitions_of(broker, spec).await?);
    }
    let current = match share {
        Some(_) => share_groups::start_offsets(broker, group).await?,
        None => committed(broker, group).await?,
    };
    let earliest = log_ends(broker, &wanted, -2).await?;
    let latest = log_ends(broker, &wanted, -1).await?;
    let at_time = match &args.to_datetime {
        Some(when) => {
            let time = humantime::parse_rfc3339_weak(when).with_context(|| {
                format!("`{when}` is not a date and time like 2026-12-04T00:00:00Z")
            })?;
            let ms = time
                .duration_since(std::time::UNIX_EPOCH)
                .context("a time before 1970")?
                .as_millis() as i64;
            Some(log_ends(broker, &wanted, ms).await?)
        }
        None => None,
    };
    let mut plan = Table::new(&[
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "NEW-OFFSET",
    ]);
    let mut moves = Vec::new();
    for tp in &wanted {
        let (Some(&low), Some(&high)) = (earliest.get(tp), latest.get(tp)) else {
            bail!("{}-{} has no offsets", tp.0, tp.1);
        };
        let now = current.get(tp).copied();
        let target = if args.to_earliest {
            low
        } else if args.to_latest {
            high
        } else if let Some(found) = &at_time {
            // No record at or after the time: the end of the log.
            found.get(tp).copied().unwrap_or(high)
        } else {
            let shift = args.shift_by.expect("one of the four is required");
            now.unwrap_or(high).saturating_add(shift).clamp(low, high)
        };
        plan.push(vec![
            group.as_str().into(),
            tp.0.as_str().into(),
            tp.1.into(),
            now.into(),
            target.into(),
        ]);
        moves.push((tp.clone(), target));
    }
    print(output, &[("plan", &plan)]);
    if !args.execute {
        eprintln!("dry run: nothing committed (add --execute to commit these offsets)");
        return Ok(());
    }
    if share.is_some() {
        share_groups::alter(broker, group, moves).await?;
        eprintln!("set the start offsets of share group {group}");
        return Ok(());
    }
    let mut by_topic: BTreeMap<String, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for ((topic, partition), offset) in moves {
        by_topic.entry(topic).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(partition)
                .with_committed_offset(offset),
        );
    }
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(str_bytes(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(str_bytes(&t)))
                        .with_partitions(ps)
                })
                .collect(),
        );
    let response: OffsetCommitResponse = broker.call(ApiKey::OffsetCommit, 8, &request).await?;
    for t in response.topics {
        for p in t.partitions {
            check(
                p.error_code,
                &format!("committing {}-{}", t.name.0, p.partition_index),
                None,
            )?;
        }
    }
    eprintln!("committed the new offsets of group {group}");
    Ok(())
}

/// Deletes a group's offsets of `topics`: DeleteShareGroupOffsets for a
/// share group, OffsetDelete for a consumer group.
async fn delete_offsets(broker: &mut Broker, group: &str, topics: &[String]) -> anyhow::Result<()> {
    let described = describe_group(broker, group).await?;
    if described.state == "Dead" {
        if share_groups::described(broker, group).await?.is_none() {
            bail!("group {group} does not exist");
        }
        return share_groups::delete_offsets(broker, group, topics).await;
    }
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for spec in topics {
        for (t, p) in partitions_of(broker, spec).await? {
            by_topic.entry(t).or_default().push(p);
        }
    }
    use offset_delete_request::*;
    let request = OffsetDeleteRequest::default()
        .with_group_id(GroupId(str_bytes(group)))
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    OffsetDeleteRequestTopic::default()
                        .with_name(TopicName(str_bytes(&t)))
                        .with_partitions(
                            ps.into_iter()
                                .map(|p| {
                                    OffsetDeleteRequestPartition::default().with_partition_index(p)
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
    let response: OffsetDeleteResponse = broker.call(ApiKey::OffsetDelete, 0, &request).await?;
    check(
        response.error_code,
        &format!("deleting offsets of {group}"),
        None,
    )?;
    for t in response.topics {
        for p in t.partitions {
            check(
                p.error_code,
                &format!("deleting {}-{}", t.name.0, p.partition_index),
                None,
            )?;
        }
    }
    eprintln!("deleted the offsets of group {group}");
    Ok(())
}
