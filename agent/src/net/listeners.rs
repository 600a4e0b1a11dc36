//! Kafka's listeners: `listeners`, `advertised_listeners` and
//! `listener_security_protocol_map`, as Kafka's settings of those names.
//!
//! Each listener has a name, an address it binds, the address clients are
//! told, and a security protocol. A client is only ever told the addresses
//! of the listener it came in on (Metadata, FindCoordinator and
//! DescribeCluster answer by listener), so one that bootstrapped through
//! an internal address never learns the external ones.
//!
//! Without `listeners`, the agent has one listener at `listen` (told as
//! `advertise`), whose protocol follows from the TLS and SASL settings and
//! whose name is that protocol's, as Kafka names a listener by default.

use std::net::{SocketAddr, ToSocketAddrs};

use floe_metastore::agents::ListenerEndpoint;

use crate::config::Config;

/// How a listener's connections are secured (Kafka's `security.protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// As Kafka's `SecurityProtocol.forName`: in any case.
    pub fn parse(name: &str) -> Option<SecurityProtocol> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }

    /// Whether connections speak TLS.
    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether clients authenticate with SASL before anything else.
    pub fn sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// One listener, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// Upper case, as Kafka normalises listener names.
    pub name: String,
    pub bind: SocketAddr,
    pub advertised_host: String,
    pub advertised_port: i32,
    pub protocol: SecurityProtocol,
    /// Whether its TLS asks clients for certificates signed by
    /// `tls_client_ca` (mutual TLS). Named SSL listeners do when a client
    /// CA is set; named SASL_SSL listeners authenticate with SASL and do
    /// not (Kafka applies `ssl.client.auth` to a SASL_SSL listener only
    /// when set for that listener, KIP-684). The one listener of an agent
    /// without `listeners` does whatever its protocol, as it always has.
    pub client_auth: bool,
}

impl Listener {
    /// The listener as the metastore records it.
    pub fn endpoint(&self) -> ListenerEndpoint {
        ListenerEndpoint {
            name: self.name.clone(),
            host: self.advertised_host.clone(),
            port: self.advertised_port,
            protocol: self.protocol.name().to_string(),
        }
    }

    /// Whether its clients may be `User:ANONYMOUS`: neither SASL nor a
    /// client certificate names them.
    pub fn anonymous(&self) -> bool {
        !self.protocol.sasl() && !self.client_auth
    }
}

/// `NAME://host:port` (host may be empty, or an IPv6 address in brackets),
/// as Kafka's `listeners` entries: the name, host and port.
fn parse_entry(entry: &str) -> anyhow::Result<(String, String, u16)> {
    let bad = || anyhow::anyhow!("listener `{entry}` is not NAME://host:port");
    let (name, address) = entry.trim().split_once("://").ok_or_else(bad)?;
    let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let port: u16 = port.parse().map_err(|_| bad())?;
    anyhow::ensure!(
        !name.is_empty()
            && name.len() <= floe_metastore::agents::MAX_LISTENER_NAME_BYTES
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "listener `{entry}`: a name is 1 to {} letters, digits or _",
        floe_metastore::agents::MAX_LISTENER_NAME_BYTES
    );
    anyhow::ensure!(
        port != 0,
        "listener `{entry}`: port 0 cannot be told to clients"
    );
    Ok((name.to_ascii_uppercase(), host.to_string(), port))
}

/// The address a listener binds: every interface for an empty host, else
/// the host (a name is resolved once, at start).
fn bind_address(host: &str, port: u16) -> anyhow::Result<SocketAddr> {
    if host.is_empty() {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| anyhow::anyhow!("listener host `{host}`: {e}"))?
        .next()
        .ok_or_else(|| anyhow::anyhow!("listener host `{host}` has no address"))
}

/// The protocol of the single listener an agent has without `listeners`.
fn implied_protocol(config: &Config) -> SecurityProtocol {
    match (
        config.tls_cert.is_some(),
        !config.sasl_mechanisms().is_empty(),
    ) {
        (false, false) => SecurityProtocol::Plaintext,
        (true, false) => SecurityProtocol::Ssl,
        (false, true) => SecurityProtocol::SaslPlaintext,
        (true, true) => SecurityProtocol::SaslSsl,
    }
}

/// The agent's listeners, checked: names unique, each with a protocol
/// whose TLS files or SASL mechanisms are configured. The first is the
/// agent's own address (its identity in the metastore).
pub fn resolve(config: &Config) -> anyhow::Result<Vec<Listener>> {
    let listeners = match config.listeners.is_empty() {
        true => {
            anyhow::ensure!(
                config.advertised_listeners.is_empty()
                    && config.listener_security_protocol_map.is_empty(),
                "advertised_listeners and listener_security_protocol_map go with listeners"
            );
            let (advertised_host, advertised_port) = config.advertised()?;
            let protocol = implied_protocol(config);
            vec![Listener {
                name: protocol.name().to_string(),
                bind: config.listen,
                advertised_host,
                advertised_port,
                protocol,
                client_auth: protocol.tls() && config.tls_client_ca.is_some(),
            }]
        }
        false => {
            let listeners = named(config)?;
            anyhow::ensure!(
                config.tls_client_ca.is_none() || listeners.iter().any(|l| l.client_auth),
                "tls_client_ca asks clients of SSL listeners for certificates, and no listener \
                 is SSL (SASL_SSL listeners authenticate with SASL, as Kafka's without a \
                 listener's own ssl.client.auth)"
            );
            listeners
        }
    };
    let tls = listeners.iter().any(|l| l.protocol.tls());
    let sasl = listeners.iter().any(|l| l.protocol.sasl());
    anyhow::ensure!(
        !tls || config.tls_cert.is_some(),
        "SSL and SASL_SSL listeners need tls_cert and tls_key"
    );
    anyhow::ensure!(
        !sasl || !config.sasl_mechanisms().is_empty(),
        "SASL_PLAINTEXT and SASL_SSL listeners need sasl_mechanisms (or sasl_plain_users)"
    );
    Ok(listeners)
}

/// Listeners given by name (`listeners`, `advertised_listeners`,
/// `listener_security_protocol_map`).
fn named(config: &Config) -> anyhow::Result<Vec<Listener>> {
    anyhow::ensure!(
        config.advertise.is_none(),
        "advertise is the address of the one listener at `listen`; with listeners, \
         use advertised_listeners"
    );
    anyhow::ensure!(
        config.listeners.len() <= floe_metastore::agents::MAX_LISTENERS,
        "at most {} listeners",
        floe_metastore::agents::MAX_LISTENERS
    );
    let mut protocols = Vec::new();
    for entry in &config.listener_security_protocol_map {
        let (name, protocol) = entry.split_once(':').ok_or_else(|| {
            anyhow::anyhow!("listener_security_protocol_map entry `{entry}` is not NAME:PROTOCOL")
        })?;
        let protocol = SecurityProtocol::parse(protocol.trim()).ok_or_else(|| {
            anyhow::anyhow!(
                "listener_security_protocol_map entry `{entry}`: the protocol is one of \
                 PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"
            )
        })?;
        protocols.push((name.trim().to_ascii_uppercase(), protocol));
    }
    // Kafka's default map names each protocol as itself; a map given
    // replaces it, as in Kafka.
    if protocols.is_empty() {
        protocols = SecurityProtocol::ALL
            .into_iter()
            .map(|p| (p.name().to_string(), p))
            .collect();
    }
    let protocol_of = |name: &str| {
        protocols
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, p)| *p)
    };
    let mut advertised = Vec::new();
    for entry in &config.advertised_listeners {
        let (name, host, port) = parse_entry(entry)?;
        anyhow::ensure!(
            !advertised.iter().any(|(n, _, _)| *n == name),
            "advertised_listeners names {name} twice"
        );
        advertised.push((name, host, port));
    }
    let mut listeners: Vec<Listener> = Vec::new();
    for entry in &config.listeners {
        let (name, host, port) = parse_entry(entry)?;
        anyhow::ensure!(
            !listeners.iter().any(|l| l.name == name),
            "listeners names {name} twice"
        );
        let protocol = protocol_of(&name).ok_or_else(|| {
            anyhow::anyhow!(
                "listener {name} has no security protocol: name it in \
                 listener_security_protocol_map (e.g. {name}:SASL_SSL)"
            )
        })?;
        let bind = bind_address(&host, port)?;
        anyhow::ensure!(
            !listeners.iter().any(|l| l.bind == bind),
            "two listeners on {bind}"
        );
        let (advertised_host, advertised_port) =
            match advertised.iter().find(|(n, _, _)| *n == name) {
                Some((_, host, port)) => (host.clone(), *port),
                None => (host, port),
            };
        let unroutable = advertised_host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified());
        anyhow::ensure!(
            !advertised_host.is_empty() && !unroutable,
            "listener {name} binds every interface: tell clients where to connect with \
             advertised_listeners (e.g. {name}://kafka-1.example.com:{port})"
        );
        listeners.push(Listener {
            name,
            bind,
            advertised_host,
            advertised_port: i32::from(advertised_port),
            protocol,
            client_auth: protocol == SecurityProtocol::Ssl && config.tls_client_ca.is_some(),
        });
    }
    // `listen` has a default, so it cannot be told apart from unset: one
    // set to anything else must be one of the listeners, or it would be
    // silently ignored.
    anyhow::ensure!(
        config.listen == Config::default().listen
            || listeners.iter().any(|l| l.bind == config.listen),
        "listen ({}) is replaced by listeners, and none binds it",
        config.listen
    );
    if let Some((name, _, _)) = advertised
        .iter()
        .find(|(n, _, _)| !listeners.iter().any(|l| l.name == *n))
    {
        anyhow::bail!("advertised_listeners names {name}, which is not among listeners");
    }
    Ok(listeners)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(listeners: &[&str], advertised: &[&str], map: &[&str]) -> Config {
        Config {
            listeners: listeners.iter().map(|s| s.to_string()).collect(),
            advertised_listeners: advertised.iter().map(|s| s.to_string()).collect(),
            listener_security_protocol_map: map.iter().map(|s| s.to_string()).collect(),
            ..Config::default()
        }
    }

    #[test]
    fn named_listeners_with_their_advertised_addresses() {
        let mut c = config(
            &[
                "internal://127.0.0.1:9092",
                "EXTERNAL://[::1]:9094",
                "SSL://:9095",
            ],
            &[
                "EXTERNAL://kafka-1.example.com:19094",
                "SSL://10.0.0.1:9095",
            ],
            &["INTERNAL:PLAINTEXT", "EXTERNAL:sasl_ssl", "SSL:SSL"],
        );
        c.tls_cert = Some("c.pem".into());
        c.tls_key = Some("k.pem".into());
        c.sasl_mechanisms = vec!["SCRAM-SHA-512".into()];
        c.tls_client_ca = Some("ca.pem".into());
        let got = resolve(&c).unwrap();
        assert_eq!(
            got.iter().map(|l| l.client_auth).collect::<Vec<_>>(),
            vec![false, false, true],
            "client certificates on the SSL listener only"
        );
        let summary: Vec<_> = got
            .iter()
            .map(|l| {
                (
                    l.name.as_str(),
                    l.bind.to_string(),
                    l.advertised_host.as_str(),
                    l.advertised_port,
                    l.protocol,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (
                    "INTERNAL",
                    "127.0.0.1:9092".into(),
                    "127.0.0.1",
                    9092,
                    SecurityProtocol::Plaintext
                ),
                (
                    "EXTERNAL",
                    "[::1]:9094".into(),
                    "kafka-1.example.com",
                    19094,
                    SecurityProtocol::SaslSsl
                ),
                (
                    "SSL",
                    "0.0.0.0:9095".into(),
                    "10.0.0.1",
                    9095,
                    SecurityProtocol::Ssl
                ),
            ]
        );
    }

    #[test]
    fn without_listeners_one_named_by_its_protocol() {
        let mut c = Config::default();
        assert_eq!(resolve(&c).unwrap()[0].name, "PLAINTEXT");
        c.sasl_mechanisms = vec!["SCRAM-SHA-256".into()];
        assert_eq!(
            resolve(&c).unwrap()[0].protocol,
            SecurityProtocol::SaslPlaintext
        );
        c.tls_cert = Some("c.pem".into());
        c.tls_key = Some("k.pem".into());
        c.advertise = Some("lb:9092".into());
        let only = &resolve(&c).unwrap()[0];
        assert_eq!(
            (
                only.name.as_str(),
                only.advertised_host.as_str(),
                only.advertised_port
            ),
            ("SASL_SSL", "lb", 9092)
        );
    }

    #[test]
    fn mistakes_are_refused_with_a_reason() {
        let refused = |c: Config, why: &str| {
            let e = resolve(&c).unwrap_err().to_string();
            assert!(e.contains(why), "{e:?} lacks {why:?}");
        };
        refused(
            config(&["A://127.0.0.1:1"], &[], &[]),
            "no security protocol",
        );
        refused(
            config(
                &["PLAINTEXT://127.0.0.1:1", "plaintext://127.0.0.1:2"],
                &[],
                &[],
            ),
            "twice",
        );
        refused(
            config(&["PLAINTEXT://127.0.0.1:1", "SSL://127.0.0.1:1"], &[], &[]),
            "two listeners on 127.0.0.1:1",
        );
        // A map given replaces Kafka's default one.
        refused(
            config(&["SSL://127.0.0.1:1"], &[], &["A:PLAINTEXT"]),
            "no security protocol",
        );
        let mut elsewhere = config(&["PLAINTEXT://127.0.0.1:1"], &[], &[]);
        elsewhere.listen = "127.0.0.1:2".parse().unwrap();
        refused(elsewhere, "replaced by listeners");
        refused(
            config(&["PLAINTEXT://:9092"], &[], &[]),
            "advertised_listeners",
        );
        refused(
            config(&["PLAINTEXT://0.0.0.0:9092"], &[], &[]),
            "advertised_listeners",
        );
        refused(
            config(&["PLAINTEXT://127.0.0.1:1"], &["SSL://h:2"], &[]),
            "not among listeners",
        );
        refused(config(&["SSL://127.0.0.1:1"], &[], &[]), "tls_cert");
        refused(config(&["SASL_SSL://127.0.0.1:1"], &[], &[]), "tls_cert");
        refused(
            config(&["SASL_PLAINTEXT://127.0.0.1:1"], &[], &[]),
            "sasl_mechanisms",
        );
        refused(config(&["PLAINTEXT://127.0.0.1:0"], &[], &[]), "port 0");
        refused(
            config(&["PLAINTEXT//127.0.0.1:1"], &[], &[]),
            "NAME://host:port",
        );
        refused(
            config(&["A-B://127.0.0.1:1"], &[], &["A-B:PLAINTEXT"]),
            "letters",
        );
        refused(config(&["A://127.0.0.1:1"], &[], &["A:TLS"]), "one of");
        let mut advertise = config(&["PLAINTEXT://127.0.0.1:1"], &[], &[]);
        advertise.advertise = Some("h:1".into());
        refused(advertise, "advertised_listeners");
        let mut mutual = config(&["SASL_SSL://127.0.0.1:1"], &[], &[]);
        mutual.tls_cert = Some("c.pem".into());
        mutual.tls_key = Some("k.pem".into());
        mutual.tls_client_ca = Some("ca.pem".into());
        mutual.sasl_mechanisms = vec!["PLAIN".into()];
        mutual.sasl_plain_users = Some("users".into());
        refused(mutual.clone(), "no listener is SSL");
        // Without listeners, the one SASL_SSL listener asks for client
        // certificates with tls_client_ca, as it always has.
        mutual.listeners.clear();
        assert!(resolve(&mutual).unwrap()[0].client_auth);
        refused(config(&[], &["PLAINTEXT://h:1"], &[]), "go with listeners");
    }
}
