//! The agent's side of ACLs: who a connection is ([`Session`]), and the
//! decision for each operation, taken from a copy of the metastore's ACLs
//! kept in memory (so no request waits on the metastore to be authorized).
//!
//! The copy is refreshed every [`REFRESH_EVERY`] (under a read lease, only
//! when a renewal says the ACLs' version moved: see [`crate::refresher`])
//! and right after this agent creates or deletes ACLs; a change made
//! through another agent reaches this one within that interval (Kafka's brokers, too, apply ACLs as the
//! metadata log reaches them). Until the first copy arrives every request
//! but a super user's is denied: the authorizer fails closed.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use floe_metastore::Metastore;
use floe_metastore::acls::{self, AclBinding, Requester};

use crate::refresher::Refreshed;

/// How often the copy of the ACLs is brought up to date.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// The principal of a connection that did not authenticate (Kafka's).
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// Who sent a request, and from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// `User:alice`, or [`ANONYMOUS`].
    pub principal: String,
    /// The client's address, as ACLs name hosts.
    pub host: String,
    pub ip: std::net::IpAddr,
    pub port: u16,
    /// The client's software, as its last ApiVersions (v3+) named it.
    pub software: Option<Arc<ClientSoftware>>,
    /// The listener it came in on: it is told of agents on that listener.
    pub listener: Arc<crate::net::listeners::Listener>,
}

/// A client's software name and version (KIP-511), kept to
/// [`ClientSoftware::MAX_BYTES`] each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSoftware {
    pub name: String,
    pub version: String,
}

impl ClientSoftware {
    pub const MAX_BYTES: usize = 256;

    /// From an ApiVersions request (`None` before v3, where it names none).
    pub fn of(
        req: &floe_protocol::kafka_protocol::messages::ApiVersionsRequest,
    ) -> Option<Arc<ClientSoftware>> {
        let cut = |s: &str| {
            let mut end = s.len().min(Self::MAX_BYTES);
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s[..end].to_string()
        };
        (!req.client_software_name.is_empty()).then(|| {
            Arc::new(ClientSoftware {
                name: cut(&req.client_software_name),
                version: cut(&req.client_software_version),
            })
        })
    }
}

impl Session {
    pub fn new(
        principal: Option<&crate::security::sasl::Principal>,
        peer: std::net::SocketAddr,
        software: Option<Arc<ClientSoftware>>,
        listener: Arc<crate::net::listeners::Listener>,
    ) -> Session {
        let ip = peer.ip();
        Session {
            principal: principal.map_or_else(|| ANONYMOUS.to_string(), |p| p.to_string()),
            // An IPv4 client of a dual-stack listener is its IPv4 address.
            host: ip.to_canonical().to_string(),
            ip,
            port: peer.port(),
            software,
            listener,
        }
    }

    fn requester(&self) -> Requester<'_> {
        Requester {
            principal: &self.principal,
            host: &self.host,
        }
    }
}

/// The ACLs as last read, and their version.
#[derive(Default)]
struct Copy {
    version: Option<u64>,
    bindings: Arc<Vec<AclBinding>>,
}

/// Decides requests against the ACLs (Kafka's `StandardAuthorizer`), or
/// allows everything when ACLs are off.
pub struct Authorizer {
    enabled: bool,
    /// Principals allowed everything (Kafka's `super.users`).
    super_users: Vec<String>,
    /// Kafka's `allow.everyone.if.no.acl.found`.
    allow_if_no_acl: bool,
    copy: RwLock<Copy>,
}

impl Authorizer {
    pub fn new(enabled: bool, super_users: Vec<String>, allow_if_no_acl: bool) -> Authorizer {
        Authorizer {
            enabled,
            super_users,
            allow_if_no_acl,
            copy: RwLock::default(),
        }
    }

    /// Allows everything (no ACLs configured).
    pub fn off() -> Authorizer {
        Authorizer::new(false, Vec::new(), true)
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The bindings now, and whether any copy was read yet.
    fn bindings(&self) -> Option<Arc<Vec<AclBinding>>> {
        let copy = self.copy.read().expect("ACL copy lock poisoned");
        copy.version.map(|_| copy.bindings.clone())
    }

    fn is_super(&self, session: &Session) -> bool {
        self.super_users.contains(&session.principal)
    }

    /// Whether `session` may do `op` on the resource.
    pub fn allows(&self, session: &Session, op: i8, resource_type: i8, name: &str) -> bool {
        if !self.enabled || self.is_super(session) {
            return true;
        }
        let Some(bindings) = self.bindings() else {
            return false;
        };
        acls::authorize(
            bindings.iter(),
            &session.requester(),
            op,
            resource_type,
            name,
            self.allow_if_no_acl,
        )
    }

    /// Whose DESCRIBE filters `session`'s consumer-group regular
    /// expressions in the metastore (KIP-848): none with ACLs off or for a
    /// super user, who may describe everything.
    pub fn describer(&self, session: &Session) -> Option<floe_metastore::Describer> {
        (self.enabled && !self.is_super(session)).then(|| floe_metastore::Describer {
            principal: session.principal.clone(),
            host: session.host.clone(),
            allow_if_no_acl: self.allow_if_no_acl,
        })
    }

    /// Whether `session` may create topic `name` (auto-creation by Produce
    /// or Metadata too): CREATE on the cluster or on the topic, as Kafka.
    pub fn may_create_topic(&self, session: &Session, name: &str) -> bool {
        self.allows_cluster(session, acls::operation::CREATE)
            || self.allows(
                session,
                acls::operation::CREATE,
                acls::resource::TOPIC,
                name,
            )
    }

    /// Whether `session` may do `op` on the cluster.
    pub fn allows_cluster(&self, session: &Session, op: i8) -> bool {
        self.allows(session, op, acls::resource::CLUSTER, acls::CLUSTER_NAME)
    }

    /// Whether `session` may do `op` on some resource of the type (KIP-679).
    pub fn allows_any(&self, session: &Session, op: i8, resource_type: i8) -> bool {
        if !self.enabled || self.is_super(session) {
            return true;
        }
        if self.allows(session, op, resource_type, acls::ANY_NAME_PROBE) {
            return true;
        }
        let Some(bindings) = self.bindings() else {
            return false;
        };
        acls::authorize_any(bindings.iter(), &session.requester(), op, resource_type)
    }

    /// Kafka's authorized-operations bit set for a resource: bit `op` for
    /// each of `ops` allowed (what Metadata and DescribeGroups report when
    /// asked).
    pub fn operations(&self, session: &Session, resource_type: i8, name: &str, ops: &[i8]) -> i32 {
        ops.iter()
            .filter(|op| self.allows(session, **op, resource_type, name))
            .fold(0, |bits, op| bits | (1 << op))
    }
}

impl Refreshed for Authorizer {
    const WHAT: &str = "ACLs";
    const EVERY: Duration = REFRESH_EVERY;

    fn wanted(&self) -> bool {
        self.enabled
    }

    fn held_version(&self) -> Option<u64> {
        self.copy.read().expect("ACL copy lock poisoned").version
    }

    fn pushed_version(versions: &floe_metastore::push::Versions) -> u64 {
        versions.acls
    }

    /// Reads the metastore's ACLs if they changed since the copy.
    async fn refresh(&self, meta: &dyn Metastore) -> Result<(), floe_metastore::MetaError> {
        if !self.enabled {
            return Ok(());
        }
        let known = self.copy.read().expect("ACL copy lock poisoned").version;
        let (version, bindings) = meta.acls_if_changed(known).await?;
        let mut copy = self.copy.write().expect("ACL copy lock poisoned");
        // Two refreshes may cross: never go back to an older copy.
        if copy.version.is_some_and(|held| held > version) {
            return Ok(());
        }
        if let Some(bindings) = bindings {
            copy.bindings = Arc::new(bindings);
        }
        copy.version = Some(version);
        Ok(())
    }
}
