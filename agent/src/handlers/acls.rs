//! CreateAcls, DescribeAcls and DeleteAcls: ACLs kept in the metastore (see
//! `floe_metastore::acls`), applied by every agent's authorizer. Without
//! ACLs configured (`acls = false`) they answer `SECURITY_DISABLED`, as a
//! Kafka broker without an authorizer does.

use std::collections::BTreeMap;

use floe_metastore::acls::{AclBinding, AclFilter, canonical_host};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::create_acls_response::AclCreationResult;
use floe_protocol::kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use floe_protocol::kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use floe_protocol::kafka_protocol::messages::describe_acls_response::{
    AclDescription, DescribeAclsResource,
};
use floe_protocol::kafka_protocol::messages::*;

use crate::broker::{Broker, kafka_error};
use crate::refresher::Refreshed;
use floe_protocol::str_bytes;

const DISABLED: &str = "No Authorizer is configured on the broker";

/// ACLs (or filters) one request may carry at most: a bound on one log
/// entry (Kafka has none).
const MAX_PER_REQUEST: usize = 1000;

pub async fn create(broker: &Broker, req: CreateAclsRequest) -> CreateAclsResponse {
    let failed = |code: i16, message: &str| {
        AclCreationResult::default()
            .with_error_code(code)
            .with_error_message(Some(str_bytes(message)))
    };
    if !broker.authorizer.enabled() {
        let code = ResponseError::SecurityDisabled.code();
        return CreateAclsResponse::default().with_results(
            req.creations
                .iter()
                .map(|_| failed(code, DISABLED))
                .collect(),
        );
    }
    let bindings: Vec<AclBinding> = req
        .creations
        .into_iter()
        .map(|c| AclBinding {
            resource_type: c.resource_type,
            resource_name: c.resource_name.to_string(),
            pattern_type: c.resource_pattern_type,
            principal: c.principal.to_string(),
            host: canonical_host(&c.host),
            operation: c.operation,
            permission: c.permission_type,
        })
        .collect();
    if bindings.len() > MAX_PER_REQUEST {
        let why = format!("more than {MAX_PER_REQUEST} ACLs in one request");
        let code = ResponseError::InvalidRequest.code();
        return CreateAclsResponse::default()
            .with_results(bindings.iter().map(|_| failed(code, &why)).collect());
    }
    // Invalid bindings are answered here; only valid ones reach the log
    // (the metastore checks them again).
    let mut results: Vec<Option<AclCreationResult>> = bindings
        .iter()
        .map(|b| {
            b.invalid()
                .map(|why| failed(ResponseError::InvalidRequest.code(), &why))
        })
        .collect();
    let valid: Vec<AclBinding> = bindings
        .into_iter()
        .filter(|b| b.invalid().is_none())
        .collect();
    if !valid.is_empty() {
        let count = valid.len();
        let outcomes: Vec<AclCreationResult> = match broker.meta.create_acls(valid).await {
            Ok(outcomes) => outcomes
                .into_iter()
                .map(|outcome| match outcome {
                    Ok(()) => AclCreationResult::default(),
                    Err(why) => failed(ResponseError::InvalidRequest.code(), &why),
                })
                .collect(),
            Err(e) => vec![failed(kafka_error(&e).code(), &e.to_string()); count],
        };
        let mut outcomes = outcomes.into_iter();
        for slot in results.iter_mut().filter(|r| r.is_none()) {
            *slot = outcomes.next();
        }
        refresh(broker).await;
    }
    CreateAclsResponse::default().with_results(results.into_iter().flatten().collect())
}

fn filter(
    resource_type: i8,
    resource_name: Option<&str>,
    pattern_type: i8,
    principal: Option<&str>,
    host: Option<&str>,
    operation: i8,
    permission: i8,
) -> AclFilter {
    AclFilter {
        resource_type,
        resource_name: resource_name.map(str::to_string),
        pattern_type,
        principal: principal.map(str::to_string),
        host: host.map(canonical_host),
        operation,
        permission,
    }
}

pub async fn describe(broker: &Broker, req: DescribeAclsRequest) -> DescribeAclsResponse {
    if !broker.authorizer.enabled() {
        return DescribeAclsResponse::default()
            .with_error_code(ResponseError::SecurityDisabled.code())
            .with_error_message(Some(str_bytes(DISABLED)));
    }
    let wanted = filter(
        req.resource_type_filter,
        req.resource_name_filter.as_deref(),
        req.pattern_type_filter,
        req.principal_filter.as_deref(),
        req.host_filter.as_deref(),
        req.operation,
        req.permission_type,
    );
    if let Some(why) = wanted.invalid() {
        return DescribeAclsResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(str_bytes(&why)));
    }
    match broker.meta.describe_acls(wanted).await {
        Ok(bindings) => {
            // One entry per resource pattern, with its ACLs.
            let mut by_resource: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
            for b in bindings {
                by_resource
                    .entry((b.resource_type, b.resource_name, b.pattern_type))
                    .or_default()
                    .push(
                        AclDescription::default()
                            .with_principal(str_bytes(&b.principal))
                            .with_host(str_bytes(&b.host))
                            .with_operation(b.operation)
                            .with_permission_type(b.permission),
                    );
            }
            DescribeAclsResponse::default().with_resources(
                by_resource
                    .into_iter()
                    .map(|((kind, name, pattern), acls)| {
                        DescribeAclsResource::default()
                            .with_resource_type(kind)
                            .with_resource_name(str_bytes(&name))
                            .with_pattern_type(pattern)
                            .with_acls(acls)
                    })
                    .collect(),
            )
        }
        Err(e) => DescribeAclsResponse::default()
            .with_error_code(kafka_error(&e).code())
            .with_error_message(Some(str_bytes(&e.to_string()))),
    }
}

pub async fn delete(broker: &Broker, req: DeleteAclsRequest) -> DeleteAclsResponse {
    let failed = |code: i16, message: &str| {
        DeleteAclsFilterResult::default()
            .with_error_code(code)
            .with_error_message(Some(str_bytes(message)))
    };
    if !broker.authorizer.enabled() {
        let code = ResponseError::SecurityDisabled.code();
        return DeleteAclsResponse::default()
            .with_filter_results(req.filters.iter().map(|_| failed(code, DISABLED)).collect());
    }
    if req.filters.len() > MAX_PER_REQUEST {
        let why = format!("more than {MAX_PER_REQUEST} filters in one request");
        let code = ResponseError::InvalidRequest.code();
        return DeleteAclsResponse::default()
            .with_filter_results(req.filters.iter().map(|_| failed(code, &why)).collect());
    }
    let filters: Vec<AclFilter> = req.filters.iter().map(to_filter).collect();
    // Kafka refuses the whole request when a filter has an unknown code.
    if let Some(why) = filters.iter().find_map(AclFilter::invalid) {
        let code = ResponseError::InvalidRequest.code();
        return DeleteAclsResponse::default()
            .with_filter_results(filters.iter().map(|_| failed(code, &why)).collect());
    }
    let count = filters.len();
    let results = match broker.meta.delete_acls(filters).await {
        Ok(removed) => removed
            .into_iter()
            .map(|gone| {
                DeleteAclsFilterResult::default().with_matching_acls(
                    gone.into_iter()
                        .map(|b| {
                            DeleteAclsMatchingAcl::default()
                                .with_resource_type(b.resource_type)
                                .with_resource_name(str_bytes(&b.resource_name))
                                .with_pattern_type(b.pattern_type)
                                .with_principal(str_bytes(&b.principal))
                                .with_host(str_bytes(&b.host))
                                .with_operation(b.operation)
                                .with_permission_type(b.permission)
                        })
                        .collect(),
                )
            })
            .collect(),
        Err(e) => (0..count)
            .map(|_| failed(kafka_error(&e).code(), &e.to_string()))
            .collect(),
    };
    refresh(broker).await;
    DeleteAclsResponse::default().with_filter_results(results)
}

fn to_filter(f: &DeleteAclsFilter) -> AclFilter {
    filter(
        f.resource_type_filter,
        f.resource_name_filter.as_deref(),
        f.pattern_type_filter,
        f.principal_filter.as_deref(),
        f.host_filter.as_deref(),
        f.operation,
        f.permission_type,
    )
}

/// This agent applies its own changes at once (others within a second).
async fn refresh(broker: &Broker) {
    if let Err(e) = broker.authorizer.refresh(&*broker.meta).await {
        tracing::warn!(error = %e, "ACLs not refreshed after a change");
    }
}
