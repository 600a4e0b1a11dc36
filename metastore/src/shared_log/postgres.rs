//! [`PostgresLog`]: the shared log in a PostgreSQL database (any server
//! that speaks its protocol and keeps its row locks: RDS, Aurora, Cloud
//! SQL, AlloyDB, Azure Database).
//!
//! Three tables (see `migrations/`): `floe_lease`, one row naming the node
//! that may append and until when on the server's clock; `floe_log`, the
//! entries by index; `floe_snapshots`, the latest snapshot. Each call is one
//! statement (a snapshot, one transaction). The fence: an append reads the
//! lease row `FOR SHARE` in the statement that inserts, so it waits for a
//! claim in progress and then sees its new term; an insert at a taken index
//! does nothing (`ON CONFLICT`). A claim is an `UPDATE` of the lease row.
//!
//! Durability is the server's: an entry is durable when its `INSERT`
//! commits as `synchronous_commit` makes commits durable (`on`, the
//! default: flushed to the server's disk, and to a synchronous standby if
//! one is configured; `off` can lose the last commits in a server crash,
//! which breaks floe's promise that an acknowledged record is never lost).
//!
//! Every call is bounded: a pool that hands out a connection within
//! [`CALL_TIMEOUT`] or fails, a `statement_timeout` on the server, and the
//! same deadline around each call here.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection, Row};

use super::*;

/// The schema's migrations, applied at start by whichever node gets the
/// migrator's advisory lock first (the others wait, then find them applied).
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The longest any one call may take, connecting included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections per node: the writer, a catch-up, a snapshot, a status (the
/// lease keeper has its own two).
const CONNECTIONS: u32 = 4;
/// The server's bound on one statement: below [`CALL_TIMEOUT`].
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(8);
/// The server's bound on a claim or a release.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(1);

/// Told of every call to the database: its name and, if it was answered,
/// how long it took (an agent counts them in its metrics).
pub type CallHook = Arc<dyn Fn(&'static str, Option<Duration>) + Send + Sync>;

/// A shared log in PostgreSQL.
pub struct PostgresLog {
    pool: PgPool,
    /// The lease keeper's own connections, so that appends, snapshots and
    /// status calls never keep a renewal waiting for a connection.
    lease_pool: PgPool,
    described: String,
    hook: Option<CallHook>,
}

/// Milliseconds since the epoch of a `timestamptz` expression, in SQL.
macro_rules! ms {
    ($e:literal) => {
        concat!("(floor(extract(epoch from ", $e, ") * 1000))::bigint")
    };
}

/// Takes or renews the lease; no row when another holds it. (A fallback
/// in the same statement would read the row as the statement's snapshot
/// saw it, before a concurrent claim that won: see [`TENURE`].)
const CLAIM: &str = concat!(
    "UPDATE floe_lease
        SET term = CASE WHEN holder = $1 THEN term ELSE term + 1 END,
            holder = $1, node = $2, address = $3,
            expires_at = clock_timestamp() + make_interval(secs => $4::float8 / 1000)
      WHERE id = 1 AND (holder = $1 OR holder IS NULL OR expires_at <= clock_timestamp())
     RETURNING term, holder, node, address, ",
    ms!("expires_at"),
    " AS expires_ms, ",
    ms!("clock_timestamp()"),
    " AS now_ms"
);

/// Who holds the lease, read in a statement of its own after a claim
/// that did not take it (so it sees the claim that won).
const TENURE: &str = concat!(
    "SELECT term, holder, node, address, ",
    ms!("expires_at"),
    " AS expires_ms, ",
    ms!("clock_timestamp()"),
    " AS now_ms FROM floe_lease WHERE id = 1"
);

const RELEASE: &str = "UPDATE floe_lease SET expires_at = least(expires_at, clock_timestamp())
     WHERE id = 1 AND holder = $1";

/// Inserts only while the term holds the lease (its row locked against a
/// claim until this commits), at an index neither taken nor covered by a
/// snapshot; says which of those held.
const APPEND: &str =
    "WITH lease AS (SELECT 1 FROM floe_lease WHERE id = 1 AND term = $1 FOR SHARE),
          added AS (
            INSERT INTO floe_log (log_index, term, format, entry)
            SELECT $2, $1, $3, $4 FROM lease
             WHERE NOT EXISTS (SELECT 1 FROM floe_snapshots WHERE log_index >= $2)
            ON CONFLICT (log_index) DO NOTHING
            RETURNING 1)
     SELECT (SELECT count(*) FROM lease) AS held, (SELECT count(*) FROM added) AS added";

const READ: &str = "SELECT log_index, format, entry FROM floe_log
     WHERE log_index > $1 ORDER BY log_index LIMIT $2";

const SNAPSHOT: &str = "SELECT log_index, format, state FROM floe_snapshots
     ORDER BY log_index DESC LIMIT 1";

const SIZES: &str = "SELECT count(*) AS entries, max(log_index) AS last_index,
       (SELECT max(log_index) FROM floe_snapshots) AS snapshot_index,
       (SELECT octet_length(state) FROM floe_snapshots ORDER BY log_index DESC LIMIT 1)
         AS snapshot_bytes
     FROM floe_log";

impl PostgresLog {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db`,
    /// with any of libpq's parameters sqlx reads, such as `sslmode`) and
    /// brings its schema up to date. Every failure is one line naming the
    /// server: a bad URL, refused credentials, a missing database, no answer.
    pub async fn connect(url: &str) -> Result<PostgresLog, LogError> {
        let options: PgConnectOptions = url
            .parse()
            .map_err(|e| LogError(format!("{}: not a PostgreSQL URL: {e}", redacted(url))))?;
        let described = format!(
            "postgres://{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or(options.get_username())
        );
        let fail = |e: String| LogError(format!("PostgreSQL at {described}: {e}"));
        // The server ends a statement before the caller's deadline passes,
        // so that none commits long after its caller gave up; a claim's
        // sooner (the lease keeper waits half a lease at most).
        let timeout = |ms: u128| {
            options
                .clone()
                .options([("statement_timeout", ms.to_string())])
        };
        let pool = PgPoolOptions::new()
            .max_connections(CONNECTIONS)
            .acquire_timeout(CALL_TIMEOUT)
            .connect_lazy_with(timeout(STATEMENT_TIMEOUT.as_millis()));
        let lease_pool = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(CALL_TIMEOUT)
            .connect_lazy_with(timeout(CLAIM_TIMEOUT.as_millis()));
        // One connection first, to say plainly why it fails (the pool
        // would only say that it timed out).
        let mut first = bounded(sqlx::PgConnection::connect_with(&options))
            .await
            .map_err(fail)?;
        bounded(first.ping()).await.map_err(fail)?;
        drop(first);
        tokio::time::timeout(CALL_TIMEOUT * 6, MIGRATOR.run(&pool))
            .await
            .map_err(|_| fail("the schema's migrations did not finish within a minute".into()))?
            .map_err(|e| fail(format!("migrating the schema: {e}")))?;
        Ok(PostgresLog {
            pool,
            lease_pool,
            described,
            hook: None,
        })
    }

    /// Calls `hook` for every call made to the database from now on.
    pub fn with_call_hook(mut self, hook: CallHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// The tables this floe's migrations made (tests: a schema up to date).
    pub async fn applied_migrations(&self) -> Result<Vec<i64>, LogError> {
        let rows = self
            .call("migrations", &self.pool, |c| {
                Box::pin(
                    sqlx::query("SELECT version FROM _sqlx_migrations ORDER BY version")
                        .fetch_all(c),
                )
            })
            .await?;
        rows.iter().map(|r| self.get(r, "version")).collect()
    }

    /// Runs `query` on a connection of `pool` within [`CALL_TIMEOUT`],
    /// connecting included. A connection whose statement did not answer in
    /// time is closed, never handed back to the pool: one cut off without
    /// a word (a failed-over server's) would hang whoever took it next.
    async fn call<T, Q>(&self, name: &'static str, pool: &PgPool, query: Q) -> Result<T, LogError>
    where
        Q: for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, Result<T, sqlx::Error>>,
    {
        let sent = tokio::time::Instant::now();
        let deadline = sent + CALL_TIMEOUT;
        let answer = async {
            let mut connection = tokio::time::timeout_at(deadline, pool.acquire())
                .await
                .map_err(|_| format!("no connection within {CALL_TIMEOUT:?}"))?
                .map_err(|e| e.to_string())?;
            match tokio::time::timeout_at(deadline, query(&mut connection)).await {
                Ok(answer) => answer.map_err(|e| e.to_string()),
                Err(_) => {
                    drop(connection.detach());
                    Err(format!("no answer within {CALL_TIMEOUT:?}"))
                }
            }
        }
        .await;
        if let Some(hook) = &self.hook {
            hook(name, answer.is_ok().then(|| sent.elapsed()));
        }
        answer.map_err(|e| LogError(format!("PostgreSQL at {}: {e}", self.described)))
    }

    fn get<'r, T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>>(
        &self,
        row: &'r PgRow,
        column: &str,
    ) -> Result<T, LogError> {
        row.try_get(column).map_err(|e| {
            LogError(format!(
                "PostgreSQL at {}: column {column}: {e}",
                self.described
            ))
        })
    }

    fn entry(&self, row: &PgRow) -> Result<StoredEntry, LogError> {
        Ok(StoredEntry {
            index: self.get::<i64>(row, "log_index")? as u64,
            format: self.format(row)?,
            entry: self.get(row, "entry")?,
        })
    }

    fn format(&self, row: &PgRow) -> Result<u8, LogError> {
        let format: i16 = self.get(row, "format")?;
        u8::try_from(format).map_err(|_| LogError(format!("a row of format {format}")))
    }
}

/// `f`, failing after [`CALL_TIMEOUT`].
async fn bounded<T>(f: impl Future<Output = Result<T, sqlx::Error>>) -> Result<T, String> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(answer) => answer.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {CALL_TIMEOUT:?}")),
    }
}

/// `url` without its password, for messages.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[async_trait]
impl SharedLog for PostgresLog {
    async fn claim(&self, me: &Candidate, lease_ms: i64) -> Result<Tenure, LogError> {
        let (holder, node, address) = (me.holder, me.node as i64, me.address.clone());
        let claimed = self
            .call("claim", &self.lease_pool, move |c| {
                Box::pin(
                    sqlx::query(CLAIM)
                        .bind(holder)
                        .bind(node)
                        .bind(address)
                        .bind(lease_ms)
                        .fetch_optional(c),
                )
            })
            .await?;
        let row = match claimed {
            Some(row) => row,
            None => {
                self.call("tenure", &self.lease_pool, |c| {
                    Box::pin(sqlx::query(TENURE).fetch_one(c))
                })
                .await?
            }
        };
        Ok(Tenure {
            term: self.get::<i64>(&row, "term")? as u64,
            holder: self
                .get::<Option<Uuid>>(&row, "holder")?
                .unwrap_or_default(),
            node: self.get::<Option<i64>>(&row, "node")?.unwrap_or_default() as u64,
            address: self
                .get::<Option<String>>(&row, "address")?
                .unwrap_or_default(),
            expires_ms: self.get(&row, "expires_ms")?,
            store_now_ms: self.get(&row, "now_ms")?,
        })
    }

    async fn release(&self, me: &Candidate) -> Result<(), LogError> {
        let holder = me.holder;
        self.call("release", &self.lease_pool, move |c| {
            Box::pin(sqlx::query(RELEASE).bind(holder).execute(c))
        })
        .await
        .map(|_| ())
    }

    async fn append(&self, term: u64, entry: StoredEntry) -> Result<Appended, LogError> {
        let row = self
            .call("append", &self.pool, move |c| {
                Box::pin(
                    sqlx::query(APPEND)
                        .bind(term as i64)
                        .bind(entry.index as i64)
                        .bind(entry.format as i16)
                        .bind(entry.entry)
                        .fetch_one(c),
                )
            })
            .await?;
        let (held, added): (i64, i64) = (self.get(&row, "held")?, self.get(&row, "added")?);
        Ok(match (held, added) {
            (0, _) => Appended::Fenced,
            (_, 0) => Appended::Taken,
            _ => Appended::Done,
        })
    }

    async fn read(&self, after: u64, max: usize) -> Result<Vec<StoredEntry>, LogError> {
        let rows = self
            .call("read", &self.pool, move |c| {
                Box::pin(
                    sqlx::query(READ)
                        .bind(after as i64)
                        .bind(max as i64)
                        .fetch_all(c),
                )
            })
            .await?;
        rows.iter().map(|row| self.entry(row)).collect()
    }

    async fn snapshot(&self) -> Result<Option<StoredSnapshot>, LogError> {
        let row = self
            .call("snapshot", &self.pool, |c| {
                Box::pin(sqlx::query(SNAPSHOT).fetch_optional(c))
            })
            .await?;
        row.map(|row| {
            Ok(StoredSnapshot {
                index: self.get::<i64>(&row, "log_index")? as u64,
                format: self.format(&row)?,
                state: self.get(&row, "state")?,
            })
        })
        .transpose()
    }

    async fn save_snapshot(&self, snapshot: StoredSnapshot, keep: u64) -> Result<(), LogError> {
        self.call("save_snapshot", &self.pool, move |c| {
            Box::pin(async move {
                let mut txn = c.begin().await?;
                sqlx::query(
                    "INSERT INTO floe_snapshots (log_index, format, state) VALUES ($1, $2, $3)
                     ON CONFLICT (log_index) DO NOTHING",
                )
                .bind(snapshot.index as i64)
                .bind(snapshot.format as i16)
                .bind(snapshot.state)
                .execute(&mut *txn)
                .await?;
                sqlx::query(
                    "DELETE FROM floe_snapshots
                      WHERE log_index < (SELECT max(log_index) FROM floe_snapshots)",
                )
                .execute(&mut *txn)
                .await?;
                sqlx::query(
                    "DELETE FROM floe_log
                      WHERE log_index <= (SELECT max(log_index) FROM floe_snapshots) - $1",
                )
                .bind(keep as i64)
                .execute(&mut *txn)
                .await?;
                txn.commit().await
            })
        })
        .await
    }

    async fn sizes(&self) -> Result<LogSizes, LogError> {
        let row = self
            .call("sizes", &self.pool, |c| {
                Box::pin(sqlx::query(SIZES).fetch_one(c))
            })
            .await?;
        let index = |c| {
            self.get::<Option<i64>>(&row, c)
                .map(|v| v.map(|v| v as u64))
        };
        Ok(LogSizes {
            entries: self.get::<i64>(&row, "entries")? as u64,
            last_index: index("last_index")?,
            snapshot_index: index("snapshot_index")?,
            snapshot_bytes: self
                .get::<Option<i32>>(&row, "snapshot_bytes")?
                .unwrap_or(0) as u64,
        })
    }

    fn describe(&self) -> String {
        self.described.clone()
    }
}

/// The test PostgreSQL server: `FLOE_TEST_POSTGRES` names it (the test
/// script starts one, see `scripts/postgres.sh`). Without it, tests that
/// need it say so and pass, unless `FLOE_REQUIRE_POSTGRES` is set, as the
/// test script sets it, so that CI can never skip them.
#[cfg(test)]
pub(crate) mod testing {
    use sqlx::Connection;

    /// The URL of a new, empty schema in the test server.
    pub async fn fresh_schema() -> Option<String> {
        let Ok(url) = std::env::var("FLOE_TEST_POSTGRES") else {
            assert!(
                std::env::var_os("FLOE_REQUIRE_POSTGRES").is_none(),
                "FLOE_REQUIRE_POSTGRES is set but FLOE_TEST_POSTGRES is not"
            );
            eprintln!("no FLOE_TEST_POSTGRES: skipping a test that needs PostgreSQL");
            return None;
        };
        let schema = format!("test_{}", crate::random_id().simple());
        let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(&mut admin)
            .await
            .unwrap();
        let join = if url.contains('?') { '&' } else { '?' };
        Some(format!("{url}{join}options[search_path]={schema}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each way a connection fails is one line naming the server and the
    /// server's reason.
    #[tokio::test]
    async fn a_failed_connection_says_why_in_one_line() {
        let refused = |url: &'static str| async move {
            match PostgresLog::connect(url).await {
                Ok(_) => panic!("{url} connected"),
                Err(e) => e.to_string(),
            }
        };
        let not_url = refused("postgres://floe@[nonsense/db").await;
        assert!(not_url.contains("not a PostgreSQL URL"), "{not_url}");
        // A port nothing listens on.
        let closed = refused("postgres://floe:pw@127.0.0.1:1/floe").await;
        assert!(
            closed.starts_with("PostgreSQL at postgres://127.0.0.1:1/floe: "),
            "{closed}"
        );
        assert!(!closed.contains("pw") && !closed.contains('\n'), "{closed}");
        let Ok(url) = std::env::var("FLOE_TEST_POSTGRES") else {
            return;
        };
        let server = url.rsplit_once('/').unwrap().0.to_string();
        let missing = PostgresLog::connect(&format!("{server}/no_such_database"))
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(
            missing.contains("database \"no_such_database\" does not exist"),
            "{missing}"
        );
        let (scheme, host) = server.split_once('@').unwrap();
        let scheme = scheme.split("//").next().unwrap();
        let nobody = PostgresLog::connect(&format!("{scheme}//nobody@{host}/postgres"))
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(
            nobody.contains("role \"nobody\" does not exist"),
            "{nobody}"
        );
    }

    #[test]
    fn messages_never_show_a_password() {
        assert_eq!(
            redacted("postgres://floe:secret@db:5432/meta"),
            "postgres://floe:***@db:5432/meta"
        );
        assert_eq!(redacted("postgres://db/meta"), "postgres://db/meta");
    }
}
