//! Access control lists, as Kafka's `StandardAuthorizer` keeps and applies
//! them: bindings of (resource pattern, principal, host, operation,
//! permission), created and deleted through the metastore so every agent
//! applies the same ones, and the pure rules that match them (filters for
//! DescribeAcls/DeleteAcls, and the authorization decision itself).
//!
//! Codes are Kafka's (`ResourceType`, `PatternType`, `AclOperation`,
//! `AclPermissionType`), so bindings travel as Kafka sends them.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

pub mod resource {
    pub const ANY: i8 = 1;
    pub const TOPIC: i8 = 2;
    pub const GROUP: i8 = 3;
    pub const CLUSTER: i8 = 4;
    pub const TRANSACTIONAL_ID: i8 = 5;
    pub const DELEGATION_TOKEN: i8 = 6;
    pub const USER: i8 = 7;
}

pub mod pattern {
    pub const ANY: i8 = 1;
    pub const MATCH: i8 = 2;
    pub const LITERAL: i8 = 3;
    pub const PREFIXED: i8 = 4;
}

pub mod operation {
    pub const ANY: i8 = 1;
    pub const ALL: i8 = 2;
    pub const READ: i8 = 3;
    pub const WRITE: i8 = 4;
    pub const CREATE: i8 = 5;
    pub const DELETE: i8 = 6;
    pub const ALTER: i8 = 7;
    pub const DESCRIBE: i8 = 8;
    pub const CLUSTER_ACTION: i8 = 9;
    pub const DESCRIBE_CONFIGS: i8 = 10;
    pub const ALTER_CONFIGS: i8 = 11;
    pub const IDEMPOTENT_WRITE: i8 = 12;
    pub const CREATE_TOKENS: i8 = 13;
    pub const DESCRIBE_TOKENS: i8 = 14;
}

pub mod permission {
    pub const ANY: i8 = 1;
    pub const DENY: i8 = 2;
    pub const ALLOW: i8 = 3;
}

/// The one name a CLUSTER resource has.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The literal name that matches every resource of its type.
pub const WILDCARD: &str = "*";
/// The principal that matches every principal.
pub const ANY_PRINCIPAL: &str = "User:*";
/// Most bindings kept: bounds what clients can make the state (and every
/// agent's copy) grow to.
pub const MAX_ACLS: usize = 10_000;

/// One ACL.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: i8,
    pub resource_name: String,
    pub pattern_type: i8,
    /// `User:alice`, or `User:*` for everyone.
    pub principal: String,
    /// An IP address, or `*`.
    pub host: String,
    pub operation: i8,
    pub permission: i8,
}

impl AclBinding {
    /// Why Kafka would refuse to create this binding (`INVALID_REQUEST`).
    pub fn invalid(&self) -> Option<String> {
        use {operation as op, pattern as pt, permission as pm, resource as rt};
        if !(rt::TOPIC..=rt::USER).contains(&self.resource_type) {
            return Some(format!("invalid resource type {}", self.resource_type));
        }
        if !matches!(self.pattern_type, pt::LITERAL | pt::PREFIXED) {
            return Some(format!("invalid pattern type {}", self.pattern_type));
        }
        if !(op::ALL..=op::DESCRIBE_TOKENS).contains(&self.operation) {
            return Some(format!("invalid operation {}", self.operation));
        }
        if !matches!(self.permission, pm::DENY | pm::ALLOW) {
            return Some(format!("invalid permission type {}", self.permission));
        }
        if self.resource_name.is_empty() {
            return Some("resource name must not be empty".into());
        }
        if self.resource_type == rt::CLUSTER && self.resource_name != CLUSTER_NAME {
            return Some(format!(
                "the cluster resource is named {CLUSTER_NAME}, not {}",
                self.resource_name
            ));
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => return Some(format!("principal {} is not Type:name", self.principal)),
        }
        if self.host.is_empty() {
            return Some("host must not be empty (use *)".into());
        }
        let longest = [&self.resource_name, &self.principal, &self.host];
        if longest.iter().any(|s| s.len() > 1024) {
            return Some("names are limited to 1024 bytes".into());
        }
        None
    }

    /// Whether this binding applies to `name` of its resource type.
    fn covers(&self, resource_type: i8, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern_type {
                pattern::LITERAL => self.resource_name == name || self.resource_name == WILDCARD,
                pattern::PREFIXED => name.starts_with(&self.resource_name),
                _ => false,
            }
    }
}

/// A host as ACLs compare it: an IP address in its canonical form (an
/// IPv4-mapped IPv6 address is its IPv4 address, IPv6 is compressed), or
/// the text as given (`*`, or a name).
pub fn canonical_host(host: &str) -> String {
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.to_canonical().to_string(),
        Err(_) => host.to_string(),
    }
}

/// What DescribeAcls and DeleteAcls select, as Kafka's `AclBindingFilter`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclFilter {
    pub resource_type: i8,
    pub resource_name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission: i8,
}

impl AclFilter {
    /// Why Kafka would refuse this filter (`INVALID_REQUEST`): a code it
    /// does not know.
    pub fn invalid(&self) -> Option<String> {
        if !(resource::ANY..=resource::USER).contains(&self.resource_type) {
            return Some(format!("Unknown resource type {}", self.resource_type));
        }
        if !(pattern::ANY..=pattern::PREFIXED).contains(&self.pattern_type) {
            return Some(format!("Unknown patternFilter {}", self.pattern_type));
        }
        if !(operation::ANY..=operation::DESCRIBE_TOKENS).contains(&self.operation) {
            return Some(format!("Unknown operation {}", self.operation));
        }
        if !(permission::ANY..=permission::ALLOW).contains(&self.permission) {
            return Some(format!("Unknown permission type {}", self.permission));
        }
        None
    }

    pub fn matches(&self, b: &AclBinding) -> bool {
        let resource_type =
            self.resource_type == resource::ANY || self.resource_type == b.resource_type;
        let name = match (&self.resource_name, self.pattern_type) {
            // MATCH: the bindings that would apply to the named resource.
            (Some(name), pattern::MATCH) => match b.pattern_type {
                pattern::LITERAL => b.resource_name == *name || b.resource_name == WILDCARD,
                pattern::PREFIXED => name.starts_with(&b.resource_name),
                _ => false,
            },
            (Some(name), _) => b.resource_name == *name,
            (None, _) => true,
        };
        let pattern_type = matches!(self.pattern_type, pattern::ANY | pattern::MATCH)
            || self.pattern_type == b.pattern_type;
        resource_type
            && name
            && pattern_type
            && self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && (self.operation == operation::ANY || self.operation == b.operation)
            && (self.permission == permission::ANY || self.permission == b.permission)
    }
}

/// Every binding, and a version that changes with them (agents re-read
/// them when it moves).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acls {
    bindings: BTreeSet<AclBinding>,
    version: u64,
}

impl Acls {
    pub fn version(&self) -> u64 {
        self.version
    }

    pub fn bindings(&self) -> impl Iterator<Item = &AclBinding> {
        self.bindings.iter()
    }

    /// Adds each binding (an existing one is left as it is, as Kafka does);
    /// each one's outcome.
    pub fn create(&mut self, bindings: Vec<AclBinding>) -> Vec<Result<(), String>> {
        let outcomes = bindings
            .into_iter()
            .map(|b| {
                if let Some(why) = b.invalid() {
                    return Err(why);
                }
                if !self.bindings.contains(&b) && self.bindings.len() >= MAX_ACLS {
                    return Err(format!("more than {MAX_ACLS} ACLs"));
                }
                self.bindings.insert(b);
                Ok(())
            })
            .collect();
        self.version += 1;
        outcomes
    }

    /// Removes what each filter matches; per filter, the bindings removed.
    /// Each filter's matches are taken from the bindings before any is
    /// removed, so a binding two filters match is reported by both (Kafka's
    /// answer).
    pub fn delete(&mut self, filters: &[AclFilter]) -> Vec<Vec<AclBinding>> {
        let removed: Vec<Vec<AclBinding>> = filters.iter().map(|f| self.describe(f)).collect();
        for b in removed.iter().flatten() {
            self.bindings.remove(b);
        }
        self.version += 1;
        removed
    }

    pub fn describe(&self, filter: &AclFilter) -> Vec<AclBinding> {
        self.bindings
            .iter()
            .filter(|b| filter.matches(b))
            .cloned()
            .collect()
    }
}

/// Who asks, from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requester<'a> {
    /// `User:alice` (`User:ANONYMOUS` without authentication).
    pub principal: &'a str,
    pub host: &'a str,
}

/// The authorization decision of Kafka's `StandardAuthorizer` for one
/// operation on one resource, given every binding:
/// - a DENY that applies wins;
/// - else an ALLOW that applies allows (ALLOW of READ, WRITE, DELETE or
///   ALTER implies DESCRIBE; ALLOW of ALTER_CONFIGS implies DESCRIBE_CONFIGS);
/// - else, when no binding at all names the resource, `allow_if_no_acl`
///   (Kafka's `allow.everyone.if.no.acl.found`, false by default);
/// - else denied.
///
/// Super users are the caller's to check first.
pub fn authorize<'a>(
    bindings: impl IntoIterator<Item = &'a AclBinding>,
    who: &Requester<'_>,
    op: i8,
    resource_type: i8,
    name: &str,
    allow_if_no_acl: bool,
) -> bool {
    let mut any_for_resource = false;
    let mut allowed = false;
    for b in bindings {
        if !b.covers(resource_type, name) {
            continue;
        }
        any_for_resource = true;
        let principal = b.principal == who.principal || b.principal == ANY_PRINCIPAL;
        let host = b.host == who.host || b.host == WILDCARD;
        if !principal || !host {
            continue;
        }
        let same = b.operation == op || b.operation == operation::ALL;
        match b.permission {
            permission::DENY if same => return false,
            permission::ALLOW if same || implies(b.operation, op) => allowed = true,
            _ => {}
        }
    }
    allowed || (!any_for_resource && allow_if_no_acl)
}

/// The bindings of one resource type by the names they cover, so that
/// checking many names (a regular expression's matches) costs each name the
/// bindings that may cover it: its literal ones, the wildcard's, and the
/// prefixed ones (few, in practice).
pub struct CoveringIndex<'a> {
    literal: std::collections::HashMap<&'a str, Vec<&'a AclBinding>>,
    others: Vec<&'a AclBinding>,
}

impl<'a> CoveringIndex<'a> {
    pub fn new(bindings: impl IntoIterator<Item = &'a AclBinding>, resource_type: i8) -> Self {
        let mut index = CoveringIndex {
            literal: std::collections::HashMap::new(),
            others: Vec::new(),
        };
        for b in bindings
            .into_iter()
            .filter(|b| b.resource_type == resource_type)
        {
            if b.pattern_type == pattern::LITERAL && b.resource_name != WILDCARD {
                index.literal.entry(&b.resource_name).or_default().push(b);
            } else {
                index.others.push(b);
            }
        }
        index
    }

    /// Every binding that may cover `name` (a superset; [`authorize`]
    /// checks each).
    pub fn covering<'n>(&'n self, name: &str) -> impl Iterator<Item = &'a AclBinding> + 'n {
        let literal = self.literal.get(name).into_iter().flatten();
        literal.chain(self.others.iter()).copied()
    }
}

/// Whether allowing `granted` also allows `asked` (Kafka's implied operations).
fn implies(granted: i8, asked: i8) -> bool {
    use operation::*;
    match asked {
        DESCRIBE => matches!(granted, READ | WRITE | DELETE | ALTER),
        DESCRIBE_CONFIGS => granted == ALTER_CONFIGS,
        _ => false,
    }
}

/// Whether some resource of `resource_type` would let `who` do `op`, as
/// Kafka's `Authorizer.authorizeByResourceType` decides it (KIP-679: an
/// idempotent producer needs WRITE on some topic). The caller first asks
/// [`authorize`] for a literal resource no ACL names specially (Kafka's
/// "hardcode"), which settles super users and `allow_if_no_acl`; then an
/// ALLOW for the principal and host counts unless a DENY names the same
/// literal, or a DENY prefix covers its name, and a DENY on every name
/// (`*` or the empty prefix) denies all.
pub fn authorize_any<'a>(
    bindings: impl IntoIterator<Item = &'a AclBinding>,
    who: &Requester<'_>,
    op: i8,
    resource_type: i8,
) -> bool {
    let mut deny_literals = BTreeSet::new();
    let mut deny_prefixes = BTreeSet::new();
    let mut allow_literals = Vec::new();
    let mut allow_prefixes = Vec::new();
    for b in bindings {
        let applies = b.resource_type == resource_type
            && (b.principal == who.principal || b.principal == ANY_PRINCIPAL)
            && (b.host == who.host || b.host == WILDCARD)
            && (b.operation == op || b.operation == operation::ALL);
        if !applies {
            continue;
        }
        match (b.permission, b.pattern_type) {
            (permission::DENY, pattern::LITERAL) if b.resource_name == WILDCARD => return false,
            (permission::DENY, pattern::PREFIXED) if b.resource_name.is_empty() => return false,
            (permission::DENY, pattern::LITERAL) => {
                deny_literals.insert(b.resource_name.as_str());
            }
            (permission::DENY, pattern::PREFIXED) => {
                deny_prefixes.insert(b.resource_name.as_str());
            }
            (permission::ALLOW, pattern::LITERAL) => allow_literals.push(b.resource_name.as_str()),
            (permission::ALLOW, pattern::PREFIXED) => allow_prefixes.push(b.resource_name.as_str()),
            _ => {}
        }
    }
    // A DENY prefix of the allowed name (or the name itself) dominates it.
    let dominated = |name: &str| {
        name.char_indices()
            .map(|(i, c)| &name[..i + c.len_utf8()])
            .any(|prefix| deny_prefixes.contains(prefix))
    };
    allow_literals
        .iter()
        .any(|name| !deny_literals.contains(name) && !dominated(name))
        || allow_prefixes.iter().any(|name| !dominated(name))
}

/// The literal name Kafka's `authorizeByResourceType` first checks (one no
/// ACL is expected to name): what applies to every name applies to it.
pub const ANY_NAME_PROBE: &str = "hardcode";

#[cfg(test)]
mod tests {
    use super::*;
    use operation::*;

    fn acl(rt: i8, name: &str, pt: i8, who: &str, op: i8, perm: i8) -> AclBinding {
        AclBinding {
            resource_type: rt,
            resource_name: name.into(),
            pattern_type: pt,
            principal: who.into(),
            host: "*".into(),
            operation: op,
            permission: perm,
        }
    }

    const ALICE: Requester<'static> = Requester {
        principal: "User:alice",
        host: "10.0.0.1",
    };

    /// The index answers every name as the whole list does.
    #[test]
    fn the_covering_index_decides_as_every_binding_would() {
        use resource::{GROUP, TOPIC};
        let bindings = vec![
            acl(
                TOPIC,
                "orders",
                pattern::LITERAL,
                "User:bob",
                READ,
                permission::ALLOW,
            ),
            acl(
                TOPIC,
                "orders-secret",
                pattern::LITERAL,
                "User:bob",
                ALL,
                permission::DENY,
            ),
            acl(
                TOPIC,
                "pay",
                pattern::PREFIXED,
                "User:bob",
                DESCRIBE,
                permission::ALLOW,
            ),
            acl(
                TOPIC,
                "pay-x",
                pattern::PREFIXED,
                "User:*",
                ALL,
                permission::DENY,
            ),
            acl(
                TOPIC,
                "*",
                pattern::LITERAL,
                "User:eve",
                DESCRIBE,
                permission::ALLOW,
            ),
            acl(
                GROUP,
                "orders",
                pattern::LITERAL,
                "User:bob",
                ALL,
                permission::DENY,
            ),
        ];
        let index = CoveringIndex::new(&bindings, TOPIC);
        let names = [
            "orders",
            "orders-secret",
            "pay",
            "pay-x1",
            "payments",
            "other",
            "",
        ];
        for principal in ["User:bob", "User:eve", "User:carol"] {
            let who = Requester {
                principal,
                host: "10.0.0.1",
            };
            for name in names {
                for allow_if_no_acl in [false, true] {
                    let all = authorize(&bindings, &who, DESCRIBE, TOPIC, name, allow_if_no_acl);
                    let indexed = authorize(
                        index.covering(name),
                        &who,
                        DESCRIBE,
                        TOPIC,
                        name,
                        allow_if_no_acl,
                    );
                    assert_eq!(all, indexed, "{principal} {name} {allow_if_no_acl}");
                }
            }
        }
    }

    #[test]
    fn deny_wins_prefixes_match_and_describe_is_implied() {
        use pattern::*;
        use permission::*;
        use resource::*;
        let acls = [
            acl(TOPIC, "orders-", PREFIXED, "User:alice", WRITE, ALLOW),
            acl(TOPIC, "orders-secret", LITERAL, "User:alice", ALL, DENY),
            acl(TOPIC, "*", LITERAL, "User:*", READ, ALLOW),
            acl(GROUP, "g", LITERAL, "User:bob", READ, ALLOW),
        ];
        let can = |op, rt, name| authorize(&acls, &ALICE, op, rt, name, false);
        assert!(can(WRITE, TOPIC, "orders-eu"));
        assert!(can(DESCRIBE, TOPIC, "orders-eu"), "WRITE implies DESCRIBE");
        assert!(!can(WRITE, TOPIC, "orders-secret"), "deny wins");
        assert!(!can(READ, TOPIC, "orders-secret"), "ALL denies READ too");
        assert!(can(READ, TOPIC, "anything"), "the wildcard, for everyone");
        assert!(!can(WRITE, TOPIC, "payments"));
        assert!(!can(READ, GROUP, "g"), "bob's, not alice's");
        assert!(!can(READ, GROUP, "h"), "no ACL: denied by default");
        assert!(
            authorize(&acls, &ALICE, READ, GROUP, "h", true),
            "unless allowed if none"
        );
        assert!(
            !authorize(&acls, &ALICE, READ, GROUP, "g", true),
            "the group has ACLs"
        );
        let from_elsewhere = [AclBinding {
            host: "10.9.9.9".into(),
            ..acl(TOPIC, "t", LITERAL, "User:alice", READ, ALLOW)
        }];
        assert!(!authorize(&from_elsewhere, &ALICE, READ, TOPIC, "t", false));
        assert!(authorize_any(&acls, &ALICE, WRITE, TOPIC));
        assert!(!authorize_any(&acls, &ALICE, WRITE, GROUP));
        // Kafka's prefix rule: a DENY prefix dominates the ALLOWs under it.
        let dominated = [
            acl(TOPIC, "ab", LITERAL, "User:alice", WRITE, ALLOW),
            acl(TOPIC, "abc", PREFIXED, "User:alice", WRITE, ALLOW),
            acl(TOPIC, "a", PREFIXED, "User:alice", WRITE, DENY),
        ];
        assert!(!authorize_any(&dominated, &ALICE, WRITE, TOPIC));
        let beside = [
            acl(TOPIC, "ab", LITERAL, "User:alice", WRITE, ALLOW),
            acl(TOPIC, "b", PREFIXED, "User:alice", WRITE, DENY),
        ];
        assert!(authorize_any(&beside, &ALICE, WRITE, TOPIC));
        let everything_denied = [
            acl(TOPIC, "ab", LITERAL, "User:alice", WRITE, ALLOW),
            acl(TOPIC, "*", LITERAL, "User:*", ALL, DENY),
        ];
        assert!(!authorize_any(&everything_denied, &ALICE, WRITE, TOPIC));
    }

    #[test]
    fn filters_select_as_kafkas_do() {
        use pattern::*;
        use permission::*;
        use resource::*;
        let mut acls = Acls::default();
        let made = acls.create(vec![
            acl(TOPIC, "orders-", PREFIXED, "User:alice", WRITE, ALLOW),
            acl(TOPIC, "orders-eu", LITERAL, "User:bob", READ, ALLOW),
            acl(TOPIC, "*", LITERAL, "User:*", DESCRIBE, ALLOW),
            acl(CLUSTER, "other", LITERAL, "User:bob", ALTER, ALLOW),
            acl(TOPIC, "t", pattern::ANY, "User:bob", READ, ALLOW),
        ]);
        assert_eq!(made.iter().filter(|r| r.is_ok()).count(), 3);
        let all = AclFilter {
            resource_type: resource::ANY,
            resource_name: None,
            pattern_type: pattern::ANY,
            principal: None,
            host: None,
            operation: operation::ANY,
            permission: permission::ANY,
        };
        assert_eq!(acls.describe(&all).len(), 3);
        let matching = AclFilter {
            resource_type: TOPIC,
            resource_name: Some("orders-eu".into()),
            pattern_type: MATCH,
            ..all.clone()
        };
        assert_eq!(
            acls.describe(&matching).len(),
            3,
            "literal, prefix and wildcard"
        );
        let literal = AclFilter {
            pattern_type: LITERAL,
            ..matching.clone()
        };
        assert_eq!(acls.describe(&literal).len(), 1);
        let bobs = AclFilter {
            principal: Some("User:bob".into()),
            ..all.clone()
        };
        let version = acls.version();
        assert_eq!(
            acls.delete(&[bobs.clone(), bobs])
                .iter()
                .map(Vec::len)
                .collect::<Vec<_>>(),
            [1, 1],
            "each filter reports what it matched before any was removed"
        );
        assert!(acls.version() > version);
        assert_eq!(acls.describe(&all).len(), 2);
    }
}
