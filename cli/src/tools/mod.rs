//! `floe topics`, `floe groups`, `floe users` and `floe acls`: the
//! administration tools, in the manner of Kafka's `kafka-topics.sh`,
//! `kafka-consumer-groups.sh`, `kafka-configs.sh --entity-type users` and
//! `kafka-acls.sh`. They speak the Kafka protocol to a broker (`--bootstrap-server`), so they work
//! through a load balancer and against any agent; every agent serves every
//! topic and group, so the tools send everything to the one they reach.
//! `floe check-store` tries an object store instead (no broker needed).

pub mod acls;
pub mod check_store;
pub mod configs;
pub mod groups;
pub mod quotas;
pub mod share_groups;
pub mod status;
pub mod topics;
pub mod users;

use anyhow::{Context, bail};
use floe_protocol::ResponseError;
use floe_protocol::client::{Connection, Security};
use floe_protocol::kafka_protocol::messages::ApiKey;
use floe_protocol::kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Aligned columns.
    Table,
    /// One JSON document.
    Json,
}

/// One value of a table: numbers stay numbers in JSON, nothing is null.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    Text(String),
    Number(i64),
    Nothing,
}

impl Cell {
    fn json(&self) -> serde_json::Value {
        match self {
            Cell::Text(t) => serde_json::Value::from(t.as_str()),
            Cell::Number(n) => serde_json::Value::from(*n),
            Cell::Nothing => serde_json::Value::Null,
        }
    }

    fn shown(&self) -> String {
        match self {
            Cell::Text(t) if t.is_empty() => "-".into(),
            Cell::Text(t) => t.clone(),
            Cell::Number(n) => n.to_string(),
            Cell::Nothing => "-".into(),
        }
    }
}

impl From<String> for Cell {
    fn from(t: String) -> Cell {
        Cell::Text(t)
    }
}

impl From<&str> for Cell {
    fn from(t: &str) -> Cell {
        Cell::Text(t.to_string())
    }
}

impl From<i64> for Cell {
    fn from(n: i64) -> Cell {
        Cell::Number(n)
    }
}

impl From<i32> for Cell {
    fn from(n: i32) -> Cell {
        Cell::Number(n.into())
    }
}

impl From<usize> for Cell {
    fn from(n: usize) -> Cell {
        Cell::Number(n as i64)
    }
}

impl<T: Into<Cell>> From<Option<T>> for Cell {
    fn from(v: Option<T>) -> Cell {
        v.map_or(Cell::Nothing, Into::into)
    }
}

/// Rows under named columns: printed aligned, or as a JSON array of objects.
pub struct Table {
    columns: Vec<&'static str>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    pub fn new(columns: &[&'static str]) -> Table {
        Table {
            columns: columns.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<Cell>) {
        debug_assert_eq!(row.len(), self.columns.len());
        self.rows.push(row);
    }

    pub fn to_json(&self) -> serde_json::Value {
        self.rows
            .iter()
            .map(|row| {
                let fields = self
                    .columns
                    .iter()
                    .zip(row)
                    .map(|(c, v)| (c.to_lowercase().replace('-', "_"), v.json()))
                    .collect::<serde_json::Map<_, _>>();
                serde_json::Value::Object(fields)
            })
            .collect()
    }

    pub fn render(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| r.iter().map(Cell::shown).collect())
            .collect();
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|i| {
                rows.iter()
                    .map(|r| r[i].len())
                    .chain([self.columns[i].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: Vec<&str>| {
            cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        };
        let mut out = vec![line(self.columns.clone())];
        out.extend(
            rows.iter()
                .map(|r| line(r.iter().map(String::as_str).collect())),
        );
        out.join("\n")
    }
}

/// Prints named tables in the chosen form.
pub fn print(output: Output, tables: &[(&str, &Table)]) {
    match output {
        Output::Json => {
            let doc: serde_json::Map<String, serde_json::Value> = tables
                .iter()
                .map(|(name, t)| (name.to_string(), t.to_json()))
                .collect();
            println!("{}", serde_json::Value::Object(doc));
        }
        Output::Table => {
            for (i, (_, t)) in tables.iter().enumerate() {
                if i > 0 {
                    println!();
                }
                println!("{}", t.render());
            }
        }
    }
}

/// A connection to the broker, with the one call the tools need.
pub struct Broker {
    connection: Connection,
}

impl Broker {
    pub async fn connect(bootstrap: &str, security: &Security) -> anyhow::Result<Broker> {
        let address = bootstrap.split(',').next().unwrap_or(bootstrap).trim();
        Ok(Broker {
            connection: Connection::connect_with(address, "floe-tools", security).await?,
        })
    }

    /// Every broker's `host:port`, as Metadata lists them.
    pub async fn addresses(&mut self) -> anyhow::Result<Vec<String>> {
        Ok(self.brokers().await?.into_iter().map(|(_, a)| a).collect())
    }

    /// Every broker's id and `host:port`, as Metadata lists them.
    pub async fn brokers(&mut self) -> anyhow::Result<Vec<(i32, String)>> {
        use floe_protocol::kafka_protocol::messages::{MetadataRequest, MetadataResponse};
        let response: MetadataResponse = self
            .call(
                ApiKey::Metadata,
                12,
                &MetadataRequest::default().with_topics(Some(Vec::new())),
            )
            .await?;
        Ok(response
            .brokers
            .iter()
            .map(|b| {
                let host = b.host.as_str();
                match host.contains(':') {
                    true => (b.node_id.0, format!("[{host}]:{}", b.port)),
                    false => (b.node_id.0, format!("{host}:{}", b.port)),
                }
            })
            .collect())
    }

    /// One request at a version floe and recent Kafka brokers both serve.
    pub async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &Req,
    ) -> anyhow::Result<Resp> {
        self.connection
            .call(api, version, request)
            .await
            .with_context(|| format!("{api:?} failed"))
    }
}

/// An error code as an error naming it (and the broker's message, if any).
pub fn check(code: i16, what: &str, message: Option<&StrBytes>) -> anyhow::Result<()> {
    if code == 0 {
        return Ok(());
    }
    let error = ResponseError::try_from_code(code);
    let name = error
        .map(|e| format!("{e:?}"))
        .unwrap_or_else(|| format!("error {code}"));
    // Kafka's words alone do not say how floe turns ACLs on.
    let hint = match error {
        Some(ResponseError::SecurityDisabled) => {
            " (floe agents keep and check ACLs when started with --acls, `acls = true` in floe.toml)"
        }
        _ => "",
    };
    match message.filter(|m| !m.is_empty()) {
        Some(m) => bail!("{what}: {name}: {m}{hint}"),
        None => bail!("{what}: {name}{hint}"),
    }
}

pub fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}
