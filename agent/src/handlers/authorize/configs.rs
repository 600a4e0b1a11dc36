//! Configs: of a topic, the operation on the topic; of a group, on the
//! group (KIP-848); of a broker (or its loggers), on the cluster.

use super::*;

/// The ConfigResource types of a topic and of a group.
const TOPIC_CONFIG: i8 = 2;
const GROUP_CONFIG: i8 = 32;

fn allowed(who: &Who, o: i8, kind: i8, name: &str) -> bool {
    match kind {
        TOPIC_CONFIG => who.topic(o, name),
        GROUP_CONFIG => who.group(o, name),
        _ => who.cluster(o),
    }
}

fn denied_code(kind: i8) -> i16 {
    match kind {
        TOPIC_CONFIG => TOPIC_DENIED,
        GROUP_CONFIG => GROUP_DENIED,
        _ => CLUSTER_DENIED,
    }
}

pub(super) fn describe_configs(who: &Who, mut req: DescribeConfigsRequest) -> Gate {
    let denied = take_denied(&mut req.resources, |c| {
        allowed(who, op::DESCRIBE_CONFIGS, c.resource_type, &c.resource_name)
    });
    let patch = patch!(DescribeConfigs, |r| {
        for c in denied {
            r.results.push(
                describe_configs_response::DescribeConfigsResult::default()
                    .with_resource_type(c.resource_type)
                    .with_resource_name(c.resource_name)
                    .with_error_code(denied_code(c.resource_type)),
            );
        }
    });
    Gate::Handle(RequestKind::DescribeConfigs(req), patch)
}

pub(super) fn alter_configs(who: &Who, mut req: AlterConfigsRequest) -> Gate {
    let denied = take_denied(&mut req.resources, |c| {
        allowed(who, op::ALTER_CONFIGS, c.resource_type, &c.resource_name)
    });
    let patch = patch!(AlterConfigs, |r| {
        for c in denied {
            r.responses.push(
                alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_resource_type(c.resource_type)
                    .with_resource_name(c.resource_name)
                    .with_error_code(denied_code(c.resource_type)),
            );
        }
    });
    Gate::Handle(RequestKind::AlterConfigs(req), patch)
}

pub(super) fn incremental_alter_configs(
    who: &Who,
    mut req: IncrementalAlterConfigsRequest,
) -> Gate {
    let denied = take_denied(&mut req.resources, |c| {
        allowed(who, op::ALTER_CONFIGS, c.resource_type, &c.resource_name)
    });
    let patch = patch!(IncrementalAlterConfigs, |r| {
        for c in denied {
            r.responses.push(
                incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_resource_type(c.resource_type)
                    .with_resource_name(c.resource_name)
                    .with_error_code(denied_code(c.resource_type)),
            );
        }
    });
    Gate::Handle(RequestKind::IncrementalAlterConfigs(req), patch)
}
