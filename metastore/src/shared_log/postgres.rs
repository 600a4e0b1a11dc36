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
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection, Row};

use super::*;

/// The schema's migrations, applied at start by whichever node gets the
/// migrator's advisory lock first (the others wait, then find them applied).
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The longest any one call may take, connecting included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections per node: the writer, the lease keeper, a snapshot, a status.
const CONNECTIONS: u32 = 4;

/// Told of every call to the database: its name and, if it was answered,
/// how long it took (an agent counts them in its metrics).
pub type CallHook = Arc<dyn Fn(&'static str, Option<Duration>) + Send + Sync>;

/// A shared log in PostgreSQL.
pub struct PostgresLog {
    pool: PgPool,
    described: String,
    hook: Option<CallHook>,
}

/// Milliseconds since the epoch of a `timestamptz` expression, in SQL.
macro_rules! ms {
    ($e:literal) => {
        concat!("(floor(extract(epoch from ", $e, ") * 1000))::bigint")
    };
}

const CLAIM: &str = concat!(
    "WITH claimed AS (
        UPDATE floe_lease
           SET term = CASE WHEN holder = $1 THEN term ELSE term + 1 END,
               holder = $1, node = $2, address = $3,
               expires_at = clock_timestamp() + make_interval(secs => $4::float8 / 1000)
         WHERE id = 1 AND (holder = $1 OR holder IS NULL OR expires_at <= clock_timestamp())
        RETURNING term, holder, node, address, expires_at)
     SELECT term, holder, node, address, ",
    ms!("expires_at"),
    " AS expires_ms, ",
    ms!("clock_timestamp()"),
    " AS now_ms FROM claimed
     UNION ALL
     SELECT term, holder, node, address, ",
    ms!("expires_at"),
    ", ",
    ms!("clock_timestamp()"),
    " FROM floe_lease WHERE id = 1 AND NOT EXISTS (SELECT 1 FROM claimed)"
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
        // The server ends a statement that runs past the deadline too.
        let options = options.options([(
            "statement_timeout",
            format!("{}", CALL_TIMEOUT.as_millis()).as_str(),
        )]);
        let pool = PgPoolOptions::new()
            .max_connections(CONNECTIONS)
            .acquire_timeout(CALL_TIMEOUT)
            .connect_lazy_with(options.clone());
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
            .call(
                "migrations",
                sqlx::query("SELECT version FROM _sqlx_migrations ORDER BY version")
                    .fetch_all(&self.pool),
            )
            .await?;
        rows.iter().map(|r| self.get(r, "version")).collect()
    }

    async fn call<T>(
        &self,
        name: &'static str,
        query: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, LogError> {
        let sent = tokio::time::Instant::now();
        let answer = bounded(query).await;
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
        let row = self
            .call(
                "claim",
                sqlx::query(CLAIM)
                    .bind(me.holder)
                    .bind(me.node as i64)
                    .bind(&me.address)
                    .bind(lease_ms)
                    .fetch_one(&self.pool),
            )
            .await?;
        Ok(Tenure {
            term: self.get::<i64>(&row, "term")? as u64,
            holder: self
                .get::<Option<Uuid>>(&row, "holder")?
                .unwrap_or_default(),
            node: self.get::<Option<i64>>(&row, "node")?.unwrap_or_default() as u64,
            address: self
                .get::<Option<String>>(&row, "address")?
                .unwrap_or_default(),
            expires_ms: self
                .get::<Option<i64>>(&row, "expires_ms")?
                .unwrap_or(i64::MIN),
            store_now_ms: self.get(&row, "now_ms")?,
        })
    }

    async fn release(&self, me: &Candidate) -> Result<(), LogError> {
        self.call(
            "release",
            sqlx::query(RELEASE).bind(me.holder).execute(&self.pool),
        )
        .await
        .map(|_| ())
    }

    async fn append(&self, term: u64, entry: StoredEntry) -> Result<Appended, LogError> {
        let row = self
            .call(
                "append",
                sqlx::query(APPEND)
                    .bind(term as i64)
                    .bind(entry.index as i64)
                    .bind(entry.format as i16)
                    .bind(entry.entry)
                    .fetch_one(&self.pool),
            )
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
            .call(
                "read",
                sqlx::query(READ)
                    .bind(after as i64)
                    .bind(max as i64)
                    .fetch_all(&self.pool),
            )
            .await?;
        rows.iter().map(|row| self.entry(row)).collect()
    }

    async fn snapshot(&self) -> Result<Option<StoredSnapshot>, LogError> {
        let row = self
            .call("snapshot", sqlx::query(SNAPSHOT).fetch_optional(&self.pool))
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
        let saved = async {
            let mut txn = self.pool.begin().await?;
            sqlx::query(
                "INSERT INTO floe_snapshots (log_index, format, state) VALUES ($1, $2, $3)
                 ON CONFLICT (log_index) DO NOTHING",
            )
            .bind(snapshot.index as i64)
            .bind(snapshot.format as i16)
            .bind(&snapshot.state)
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
        };
        self.call("save_snapshot", saved).await
    }

    async fn sizes(&self) -> Result<LogSizes, LogError> {
        let row = self
            .call("sizes", sqlx::query(SIZES).fetch_one(&self.pool))
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

    #[test]
    fn messages_never_show_a_password() {
        assert_eq!(
            redacted("postgres://floe:secret@db:5432/meta"),
            "postgres://floe:***@db:5432/meta"
        );
        assert_eq!(redacted("postgres://db/meta"), "postgres://db/meta");
    }
}
