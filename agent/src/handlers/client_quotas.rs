//! DescribeClientQuotas and AlterClientQuotas (KIP-546), answered as
//! Kafka's `ClientQuotasImage` and `ClientQuotaControlManager` answer them.
//! Quotas are kept in the metastore as dynamic config entities and
//! enforced by every agent (see [`crate::limits::quotas`]).

use std::collections::BTreeMap;

use floe_metastore::ConfigEntity;
use floe_metastore::dynamic_config::{ConfigOp, ConfigTarget};
use floe_metastore::quotas::{self, QuotaEntity, QuotaName};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse, alter_client_quotas_request, alter_client_quotas_response,
    describe_client_quotas_response,
};

use crate::broker::{Broker, kafka_error};
use floe_protocol::str_bytes;

const USER: &str = "user";
const CLIENT_ID: &str = "client-id";
const IP: &str = "ip";

/// DescribeClientQuotas' match types.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_SPECIFIED: i8 = 2;

type Refused = (ResponseError, String);

/// A filter: names each entity must have (`None`: the default), types it
/// must have, and whether it may have no others.
struct Filter {
    exact: BTreeMap<String, Option<String>>,
    typed: Vec<String>,
    strict: bool,
}

fn filter_of(req: &DescribeClientQuotasRequest) -> Result<Filter, Refused> {
    let invalid = |why: String| Err((ResponseError::InvalidRequest, why));
    let mut filter = Filter {
        exact: BTreeMap::new(),
        typed: Vec::new(),
        strict: req.strict,
    };
    for c in &req.components {
        let kind = c.entity_type.to_string();
        if kind.is_empty() {
            return invalid("Invalid empty entity type.".into());
        }
        if filter.exact.contains_key(&kind) || filter.typed.contains(&kind) {
            return invalid(format!(
                "Entity type {kind} cannot appear more than once in the filter."
            ));
        }
        if ![USER, CLIENT_ID, IP].contains(&kind.as_str()) {
            return Err((
                ResponseError::UnsupportedVersion,
                format!("Unsupported entity type {kind}"),
            ));
        }
        let name = c._match.as_ref().map(|m| m.to_string());
        match (c.match_type, name) {
            (MATCH_EXACT, Some(name)) => {
                filter.exact.insert(kind, Some(name));
            }
            (MATCH_EXACT, None) => {
                return invalid(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                );
            }
            (MATCH_DEFAULT, None) => {
                filter.exact.insert(kind, None);
            }
            (MATCH_SPECIFIED, None) => filter.typed.push(kind),
            (MATCH_DEFAULT | MATCH_SPECIFIED, Some(_)) => {
                return invalid(format!(
                    "Request specified {}, but also specified a match string.",
                    match c.match_type {
                        MATCH_DEFAULT => "MATCH_TYPE_DEFAULT",
                        _ => "MATCH_TYPE_SPECIFIED",
                    }
                ));
            }
            (other, _) => return invalid(format!("Unknown match type {other}")),
        }
    }
    let has = |k: &str| filter.exact.contains_key(k) || filter.typed.iter().any(|t| t == k);
    if has(IP) && (has(USER) || has(CLIENT_ID)) {
        return invalid(
            "Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component.".into(),
        );
    }
    Ok(filter)
}

/// An entity's (type, name) pairs.
fn parts(entity: &QuotaEntity) -> Vec<(&'static str, Option<&str>)> {
    let mut parts = Vec::with_capacity(2);
    if let Some(user) = &entity.user {
        parts.push((USER, user.as_wire()));
    }
    if let Some(client_id) = &entity.client_id {
        parts.push((CLIENT_ID, client_id.as_wire()));
    }
    parts
}

impl Filter {
    fn matches(&self, entity: &QuotaEntity) -> bool {
        let parts = parts(entity);
        if self.strict && parts.len() != self.exact.len() + self.typed.len() {
            return false;
        }
        let name_of = |kind: &str| parts.iter().find(|(k, _)| *k == kind).map(|(_, n)| *n);
        self.exact
            .iter()
            .all(|(kind, want)| name_of(kind).is_some_and(|name| name == want.as_deref()))
            && self.typed.iter().all(|kind| name_of(kind).is_some())
    }
}

pub async fn describe(
    broker: &Broker,
    req: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    use describe_client_quotas_response::{EntityData, EntryData, ValueData};
    let refused = |(e, why): Refused| {
        DescribeClientQuotasResponse::default()
            .with_error_code(e.code())
            .with_error_message(Some(str_bytes(&why)))
            .with_entries(None)
    };
    let filter = match filter_of(&req) {
        Ok(f) => f,
        Err(r) => return refused(r),
    };
    let all = match broker.meta.client_quotas_if_changed(None).await {
        Ok((_, all)) => all.unwrap_or_default(),
        Err(e) => return refused((kafka_error(&e), e.to_string())),
    };
    let entries = all
        .iter()
        .filter(|(entity, _)| filter.matches(entity))
        .map(|(entity, set)| {
            EntryData::default()
                .with_entity(
                    parts(entity)
                        .into_iter()
                        .map(|(kind, name)| {
                            EntityData::default()
                                .with_entity_type(str_bytes(kind))
                                .with_entity_name(name.map(str_bytes))
                        })
                        .collect(),
                )
                .with_values(
                    set.iter()
                        .filter_map(|(k, v)| {
                            Some(
                                ValueData::default()
                                    .with_key(str_bytes(k))
                                    .with_value(v.parse().ok()?),
                            )
                        })
                        .collect(),
                )
        })
        .collect();
    DescribeClientQuotasResponse::default()
        .with_error_message(None)
        .with_entries(Some(entries))
}

/// The entity an AlterClientQuotas entry names, as Kafka's
/// `validateEntity` checks it.
fn entity_of(parts: &[alter_client_quotas_request::EntityData]) -> Result<QuotaEntity, Refused> {
    let invalid = |why: String| Err((ResponseError::InvalidRequest, why));
    let mut entity = QuotaEntity {
        user: None,
        client_id: None,
    };
    let mut seen = Vec::new();
    for part in parts {
        let kind = part.entity_type.to_string();
        if seen.contains(&kind) {
            return invalid(format!(
                "Invalid client quota entity, duplicate entity entry {kind}"
            ));
        }
        let name = QuotaName::of(part.entity_name.as_ref().map(|n| n.as_str()));
        match kind.as_str() {
            USER => entity.user = Some(name),
            CLIENT_ID => entity.client_id = Some(name),
            IP => {
                return invalid(
                    "ip quotas (connection_creation_rate) are not enforced by floe, so they are not taken".into(),
                );
            }
            _ => return invalid(format!("Unhandled client quota entity type: {kind}")),
        }
        seen.push(kind);
    }
    entity
        .check()
        .map_err(|why| (ResponseError::InvalidRequest, why))?;
    Ok(entity)
}

/// An entry's operations, each checked (Kafka's `validateQuotaKeyValue`).
fn ops_of(ops: &[alter_client_quotas_request::OpData]) -> Result<Vec<ConfigOp>, Refused> {
    let invalid = |why: String| Err((ResponseError::InvalidRequest, why));
    let mut keys = std::collections::BTreeSet::new();
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        let key = op.key.to_string();
        if !keys.insert(key.clone()) {
            return invalid(format!("Duplicate quota key {key}"));
        }
        if op.remove {
            out.push(ConfigOp::Delete(key));
            continue;
        }
        let value = op.value.to_string();
        if let Err(why) = quotas::check(&key, &value) {
            return invalid(why);
        }
        out.push(ConfigOp::Set(key, value));
    }
    Ok(out)
}

pub async fn alter(broker: &Broker, req: AlterClientQuotasRequest) -> AlterClientQuotasResponse {
    use alter_client_quotas_response::{EntityData, EntryData};
    let mut entries = Vec::with_capacity(req.entries.len());
    let mut seen = std::collections::BTreeSet::new();
    for entry in req.entries {
        let result = async {
            let entity = entity_of(&entry.entity)?;
            // Kafka's answer to one entity given twice in a request.
            if !seen.insert(entity.clone()) {
                return Err((
                    ResponseError::InvalidRequest,
                    "Ignoring duplicate entity".to_string(),
                ));
            }
            let ops = ops_of(&entry.ops)?;
            if req.validate_only || ops.is_empty() {
                return Ok(());
            }
            broker
                .meta
                .alter_configs(
                    ConfigTarget::Dynamic(ConfigEntity::ClientQuota(entity)),
                    ops,
                    false,
                )
                .await
                .map_err(|e| match e {
                    // The metastore's refusals of a change are Kafka's
                    // invalid requests here.
                    floe_metastore::MetaError::Refused(floe_metastore::Refusal::InvalidConfig(
                        why,
                    )) => (ResponseError::InvalidRequest, why),
                    e => (kafka_error(&e), e.to_string()),
                })
        }
        .await;
        let echoed = entry
            .entity
            .iter()
            .map(|p| {
                EntityData::default()
                    .with_entity_type(p.entity_type.clone())
                    .with_entity_name(p.entity_name.clone())
            })
            .collect();
        let answered = EntryData::default()
            .with_entity(echoed)
            .with_error_message(None);
        entries.push(match result {
            Ok(()) => answered,
            Err((e, why)) => answered
                .with_error_code(e.code())
                .with_error_message(Some(str_bytes(&why))),
        });
    }
    // This agent enforces what it was just told at once (others within
    // their next refresh), as Kafka's broker does once the change is
    // committed: a client whose quota was set a moment ago is held to it.
    if entries.iter().any(|e| e.error_code == 0) && !req.validate_only {
        use crate::refresher::Refreshed;
        if let Err(e) = broker.quotas.refresh(broker.meta.as_ref()).await {
            tracing::debug!(error = %e, "refreshing client quotas after a change");
        }
    }
    AlterClientQuotasResponse::default().with_entries(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_protocol::kafka_protocol::messages::describe_client_quotas_request::ComponentData;

    fn component(kind: &str, match_type: i8, name: Option<&str>) -> ComponentData {
        ComponentData::default()
            .with_entity_type(str_bytes(kind))
            .with_match_type(match_type)
            .with_match(name.map(str_bytes))
    }

    fn entity(user: Option<Option<&str>>, client_id: Option<Option<&str>>) -> QuotaEntity {
        QuotaEntity {
            user: user.map(QuotaName::of),
            client_id: client_id.map(QuotaName::of),
        }
    }

    /// Kafka's matching: exact names (a null one is the default), types
    /// that must be there, and strict filters that allow no other.
    #[test]
    fn filters_match_as_kafkas() {
        let alice_app = entity(Some(Some("alice")), Some(Some("app")));
        let alice = entity(Some(Some("alice")), None);
        let default_user = entity(Some(None), None);
        let app = entity(None, Some(Some("app")));
        let all = [&alice_app, &alice, &default_user, &app];
        let matching = |components: Vec<ComponentData>, strict: bool| {
            let req = DescribeClientQuotasRequest::default()
                .with_components(components)
                .with_strict(strict);
            let f = filter_of(&req).unwrap();
            all.iter().filter(|e| f.matches(e)).count()
        };
        assert_eq!(matching(vec![], false), 4);
        assert_eq!(
            matching(vec![component(USER, MATCH_EXACT, Some("alice"))], false),
            2
        );
        assert_eq!(
            matching(vec![component(USER, MATCH_EXACT, Some("alice"))], true),
            1
        );
        assert_eq!(
            matching(vec![component(USER, MATCH_DEFAULT, None)], false),
            1
        );
        assert_eq!(
            matching(vec![component(USER, MATCH_SPECIFIED, None)], false),
            3
        );
        assert_eq!(
            matching(vec![component(CLIENT_ID, MATCH_SPECIFIED, None)], true),
            1
        );

        let refused = |components: Vec<ComponentData>| {
            filter_of(&DescribeClientQuotasRequest::default().with_components(components))
                .err()
                .map(|(e, _)| e)
        };
        assert_eq!(
            refused(vec![component(USER, MATCH_EXACT, None)]),
            Some(ResponseError::InvalidRequest)
        );
        assert_eq!(
            refused(vec![
                component(USER, MATCH_DEFAULT, None),
                component(USER, MATCH_DEFAULT, None)
            ]),
            Some(ResponseError::InvalidRequest)
        );
        assert_eq!(
            refused(vec![component("group", MATCH_DEFAULT, None)]),
            Some(ResponseError::UnsupportedVersion)
        );
        assert_eq!(
            refused(vec![
                component(IP, MATCH_DEFAULT, None),
                component(USER, MATCH_DEFAULT, None)
            ]),
            Some(ResponseError::InvalidRequest)
        );
    }

    #[test]
    fn entries_are_checked_as_kafka_checks_them() {
        use alter_client_quotas_request::{EntityData, OpData};
        let part = |kind: &str, name: Option<&str>| {
            EntityData::default()
                .with_entity_type(str_bytes(kind))
                .with_entity_name(name.map(str_bytes))
        };
        assert!(entity_of(&[part(USER, Some("alice")), part(CLIENT_ID, None)]).is_ok());
        for bad in [
            vec![],
            vec![part(USER, Some("a")), part(USER, Some("b"))],
            vec![part(USER, Some(""))],
            vec![part(IP, Some("10.0.0.1"))],
            vec![part("group", Some("g"))],
        ] {
            assert!(entity_of(&bad).is_err(), "{bad:?}");
        }
        let op = |key: &str, value: f64, remove: bool| {
            OpData::default()
                .with_key(str_bytes(key))
                .with_value(value)
                .with_remove(remove)
        };
        assert_eq!(
            ops_of(&[
                op("producer_byte_rate", 1024.0, false),
                op("request_percentage", 0.0, true)
            ])
            .unwrap(),
            vec![
                ConfigOp::Set("producer_byte_rate".into(), "1024".into()),
                ConfigOp::Delete("request_percentage".into())
            ]
        );
        for bad in [
            vec![op("producer_byte_rate", 0.0, false)],
            vec![op("producer_byte_rate", 1.5, false)],
            vec![op("nope", 1.0, false)],
            vec![
                op("producer_byte_rate", 1.0, false),
                op("producer_byte_rate", 2.0, true),
            ],
        ] {
            assert!(ops_of(&bad).is_err());
        }
    }
}
