//! Building an object store from a URL.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::aws::AmazonS3ConfigKey;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::prefix::PrefixStore;
use object_store::{BackoffConfig, ClientConfigKey, RetryConfig};

#[derive(Debug, thiserror::Error)]
pub enum StoreUrlError {
    #[error("object store URL `{0}` has no scheme; use file://PATH or memory://")]
    NoScheme(String),
    #[error("object store scheme `{0}` is not supported (supported: s3://, file://, memory://)")]
    UnsupportedScheme(String),
    #[error("s3 URL `{0}` names no bucket; use s3://BUCKET[/PREFIX][?OPTIONS]")]
    NoBucket(String),
    #[error(
        "unknown s3 option `{0}` (known: endpoint, region, path_style, allow_http, skip_signature, bulk_delete, timeout, connect_timeout, retry_timeout, max_retries, backoff_init, backoff_max, s3_express)"
    )]
    UnknownOption(String),
    #[error("s3 option `{0}` needs true or false, not `{1}`")]
    NotABool(String, String),
    #[error("s3 option `{0}` needs a duration such as 30s, not `{1}`")]
    NotADuration(String, String),
    #[error("s3 options need 0 < backoff_init <= backoff_max, not {0:?} and {1:?}")]
    Backoff(std::time::Duration, std::time::Duration),
    #[error("s3 option `{0}` needs a whole number, not `{1}`")]
    NotANumber(String, String),
    #[error(
        "faults in S3's HTTP exchanges (slowdowns, resets, latency_p50) and given keys need an s3:// store, not `{0}`"
    )]
    HttpFaultsNeedS3(String),
    #[error("cannot use `{path}` as an object store folder: {source}")]
    Folder {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    ObjectStore(#[from] object_store::Error),
}

/// Opens the object store a URL names.
///
/// - `s3://BUCKET[/PREFIX][?OPTIONS]`: S3 or any S3-compatible store. The usual
///   `AWS_*` environment variables apply (`AWS_ACCESS_KEY_ID`,
///   `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
///   `AWS_ENDPOINT`, ...), and on EC2/ECS the instance credentials. OPTIONS
///   override them: `endpoint=http://127.0.0.1:9000`, `region=us-east-1`,
///   `path_style=true` (needed by most local servers), `allow_http=true`
///   (implied by an `http://` endpoint), `skip_signature=true` (anonymous
///   requests, for public buckets and servers without credentials),
///   `bulk_delete=false` (GC deletes one object per request, for stores
///   without S3's DeleteObjects), `s3_express=true` (an S3 Express One
///   Zone directory bucket, `BUCKET--AZID--x-s3`), the deadlines of
///   [`S3_TIMEOUTS`]: `connect_timeout=5s`, `timeout=30s` (one request),
///   `retry_timeout=30s` (all retries of one operation), and the retries of
///   [`s3_retries`]: `max_retries=10`, `backoff_init=100ms`, `backoff_max=5s`.
/// - `file://PATH`: a local folder (created if missing; a relative PATH such as
///   `file://./floe-data/objects` is taken from the working directory).
/// - `memory://`: a process-local store for tests.
pub fn open(url: &str) -> Result<Arc<dyn ObjectStore>, StoreUrlError> {
    open_with(url, OpenOptions::default())
}

/// What [`open_with`] changes of what a URL says (S3 only).
#[derive(Debug, Default)]
pub struct OpenOptions {
    /// S3's HTTP exchanges go through it (fault injection, see
    /// [`crate::http_faults`]).
    pub connector: Option<crate::http_faults::FaultyConnector>,
    /// Keys used instead of those of the environment (the conformance
    /// check's wrong credentials).
    pub keys: Option<(String, String)>,
}

/// [`open`] with `options`, which only an `s3://` store takes.
pub fn open_with(url: &str, options: OpenOptions) -> Result<Arc<dyn ObjectStore>, StoreUrlError> {
    let connector = options.connector;
    if (connector.is_some() || options.keys.is_some()) && !url.starts_with("s3://") {
        return Err(StoreUrlError::HttpFaultsNeedS3(url.to_string()));
    }
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| StoreUrlError::NoScheme(url.to_string()))?;
    match scheme {
        "memory" => Ok(Arc::new(InMemory::new())),
        "file" => {
            let folder = |source| StoreUrlError::Folder {
                path: rest.to_string(),
                source,
            };
            std::fs::create_dir_all(rest).map_err(folder)?;
            let absolute = std::fs::canonicalize(rest).map_err(folder)?;
            // Atomic puts (write to a temp file, then rename) are what makes a
            // crashed upload invisible rather than a torn object; the fsync
            // hook makes a finished one durable before it is acknowledged.
            let local = Arc::new(LocalFileSystem::new_with_prefix(&absolute)?);
            Ok(Arc::new(crate::synced::synced(local, absolute)))
        }
        "s3" => open_s3(url, rest, connector, options.keys),
        other => Err(StoreUrlError::UnsupportedScheme(other.to_string())),
    }
}

fn open_s3(
    url: &str,
    rest: &str,
    connector: Option<crate::http_faults::FaultyConnector>,
    keys: Option<(String, String)>,
) -> Result<Arc<dyn ObjectStore>, StoreUrlError> {
    let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (bucket, prefix) = location.split_once('/').unwrap_or((location, ""));
    if bucket.is_empty() {
        return Err(StoreUrlError::NoBucket(url.to_string()));
    }
    let flag = |key: &str, value: &str| match value {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(StoreUrlError::NotABool(key.to_string(), other.to_string())),
    };
    let duration = |key: &str, value: &str| {
        humantime::parse_duration(value)
            .map_err(|_| StoreUrlError::NotADuration(key.to_string(), value.to_string()))
    };
    // Every network wait has a deadline, stated here rather than left to
    // the library's defaults (see `S3_TIMEOUTS`); the URL may change them.
    let client = |key| AmazonS3ConfigKey::Client(key);
    let millis = |d: std::time::Duration| format!("{}ms", d.as_millis());
    let mut retry = s3_retries();
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
    // Where the environment (AWS_TIMEOUT, AWS_CONNECT_TIMEOUT) set none.
    for (key, default) in [
        (ClientConfigKey::Timeout, S3_TIMEOUTS.request),
        (ClientConfigKey::ConnectTimeout, S3_TIMEOUTS.connect),
    ] {
        if builder.get_config_value(&client(key)).is_none() {
            builder = builder.with_config(client(key), millis(default));
        }
    }
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none()
        && let Some(keys) =
            shared_credentials_file().and_then(|(file, profile)| profile_keys(&file, &profile))
    {
        builder = builder
            .with_access_key_id(keys.access_key_id)
            .with_secret_access_key(keys.secret_access_key);
        if let Some(token) = keys.session_token {
            builder = builder.with_token(token);
        }
    }
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        builder = match key.as_ref() {
            "endpoint" => {
                let plain_http = value.starts_with("http://");
                builder
                    .with_endpoint(value.as_ref())
                    .with_allow_http(plain_http)
            }
            "region" => builder.with_region(value.as_ref()),
            "path_style" => builder.with_virtual_hosted_style_request(!flag(&key, &value)?),
            "allow_http" => builder.with_allow_http(flag(&key, &value)?),
            "skip_signature" => builder.with_skip_signature(flag(&key, &value)?),
            "bulk_delete" => builder.with_disable_bulk_delete(!flag(&key, &value)?),
            "timeout" => builder.with_config(
                client(ClientConfigKey::Timeout),
                millis(duration(&key, &value)?),
            ),
            "connect_timeout" => builder.with_config(
                client(ClientConfigKey::ConnectTimeout),
                millis(duration(&key, &value)?),
            ),
            "retry_timeout" => {
                retry.retry_timeout = duration(&key, &value)?;
                builder
            }
            "max_retries" => {
                retry.max_retries = value
                    .parse()
                    .map_err(|_| StoreUrlError::NotANumber(key.to_string(), value.to_string()))?;
                builder
            }
            "backoff_init" => {
                retry.backoff.init_backoff = duration(&key, &value)?;
                builder
            }
            "backoff_max" => {
                retry.backoff.max_backoff = duration(&key, &value)?;
                builder
            }
            "s3_express" => builder.with_s3_express(flag(&key, &value)?),
            other => return Err(StoreUrlError::UnknownOption(other.to_string())),
        };
    }
    // object_store draws each wait between the first and the last, so it
    // needs 0 < backoff_init <= backoff_max (else it panics at a retry).
    let backoff = &retry.backoff;
    if backoff.init_backoff.is_zero() || backoff.init_backoff > backoff.max_backoff {
        return Err(StoreUrlError::Backoff(
            backoff.init_backoff,
            backoff.max_backoff,
        ));
    }
    if let Some(connector) = connector {
        builder = builder.with_http_connector(connector);
    }
    if let Some((key_id, secret)) = keys {
        builder = builder
            .with_access_key_id(key_id)
            .with_secret_access_key(secret);
    }
    let store = builder.with_retry(retry).build()?;
    let prefix = prefix.trim_end_matches('/');
    Ok(if prefix.is_empty() {
        Arc::new(store)
    } else {
        Arc::new(PrefixStore::new(store, prefix))
    })
}

/// How S3 calls are retried, unless the URL says otherwise (`max_retries`,
/// `backoff_init`, `backoff_max`, `retry_timeout`). object_store retries
/// connection errors, timeouts of idempotent requests (floe's PUTs are:
/// each key is written once), 5xx answers and 429, and S3's `SlowDown` and
/// `InternalError` sent with a 200; it waits with decorrelated jitter (each
/// wait drawn between `init_backoff` and twice the last), which spreads
/// agents that were throttled together.
///
/// - The first retry after 100 ms: S3's throttling clears in about a second
///   once the request rate drops, and an ingest PUT waits in the ordered
///   commit pipeline, so short waits matter.
/// - No wait longer than 5 s: a produce request's answer waits for its
///   PUT, and clients give up after 30 s by default (`request.timeout.ms`;
///   the ingest PUT itself is abandoned after 60 s whatever the store).
/// - At most 10 retries, and none begun after [`S3_TIMEOUTS`]`.retries`.
pub fn s3_retries() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: std::time::Duration::from_millis(100),
            max_backoff: std::time::Duration::from_secs(5),
            base: 2.0,
        },
        max_retries: 10,
        retry_timeout: S3_TIMEOUTS.retries,
    }
}

/// The deadlines of S3 calls, unless the URL sets them (`timeout`,
/// `connect_timeout`, `retry_timeout`).
pub struct S3Timeouts {
    /// Connecting to the endpoint.
    pub connect: std::time::Duration,
    /// One whole request (an 8 MiB ingest PUT takes well under a second
    /// in a region; 30 s is object_store's own default).
    pub request: std::time::Duration,
    /// Retrying one operation after throttling or server errors, in all
    /// (object_store's default is 3 min; the upload pipeline is ordered, so
    /// one stuck PUT would hold every later commit that long).
    pub retries: std::time::Duration,
}

pub const S3_TIMEOUTS: S3Timeouts = S3Timeouts {
    connect: std::time::Duration::from_secs(5),
    request: std::time::Duration::from_secs(30),
    retries: std::time::Duration::from_secs(30),
};

/// Static keys of one profile of an AWS shared credentials file.
#[derive(Debug, PartialEq, Eq)]
struct ProfileKeys {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
}

/// The shared credentials file and profile the AWS tools would use:
/// `AWS_SHARED_CREDENTIALS_FILE` or `~/.aws/credentials`, `AWS_PROFILE` or `default`.
fn shared_credentials_file() -> Option<(std::path::PathBuf, String)> {
    let file = std::env::var_os("AWS_SHARED_CREDENTIALS_FILE")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".aws/credentials"))
        })?;
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".to_string());
    Some((file, profile))
}

/// Reads `[profile]`'s keys from an INI-style credentials file, if present.
fn profile_keys(file: &std::path::Path, profile: &str) -> Option<ProfileKeys> {
    let text = std::fs::read_to_string(file).ok()?;
    let mut in_profile = false;
    let (mut id, mut secret, mut token) = (None, None, None);
    for line in text.lines().map(str::trim) {
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_profile = section.trim() == profile;
        } else if in_profile && let Some((key, value)) = line.split_once('=') {
            let value = Some(value.trim().to_string());
            match key.trim() {
                "aws_access_key_id" => id = value,
                "aws_secret_access_key" => secret = value,
                "aws_session_token" => token = value,
                _ => {}
            }
        }
    }
    Some(ProfileKeys {
        access_key_id: id?,
        secret_access_key: secret?,
        session_token: token,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::{ObjectStoreExt, PutPayload, path::Path};

    #[tokio::test]
    async fn file_url_with_relative_path_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}/objects", dir.path().display());
        let store = open(&url).unwrap();
        let path = Path::from("a/b");
        store
            .put(&path, PutPayload::from_static(b"hello"))
            .await
            .unwrap();
        let got = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(&got[..], b"hello");
        assert!(dir.path().join("objects/a/b").exists());
    }

    #[test]
    fn s3_urls_are_parsed() {
        assert!(open("s3://bucket/some/prefix?endpoint=http://127.0.0.1:9&region=eu-west-1&path_style=true").is_ok());
        assert!(matches!(
            open("s3:///prefix"),
            Err(StoreUrlError::NoBucket(_))
        ));
        assert!(matches!(
            open("s3://bucket?colour=blue"),
            Err(StoreUrlError::UnknownOption(o)) if o == "colour"
        ));
        assert!(matches!(
            open("s3://bucket?path_style=yes"),
            Err(StoreUrlError::NotABool(..))
        ));
        assert!(open("s3://bucket?timeout=2s&connect_timeout=100ms&retry_timeout=1m").is_ok());
        assert!(matches!(
            open("s3://bucket?timeout=soon"),
            Err(StoreUrlError::NotADuration(..))
        ));
        assert!(open("s3://b?max_retries=3&backoff_init=50ms&backoff_max=2s").is_ok());
        assert!(matches!(
            open("s3://bucket?max_retries=many"),
            Err(StoreUrlError::NotANumber(..))
        ));
        for bad in ["backoff_init=0s", "backoff_init=2s&backoff_max=1s"] {
            assert!(matches!(
                open(&format!("s3://bucket?{bad}")),
                Err(StoreUrlError::Backoff(..))
            ));
        }
        assert!(open("s3://floe--use1-az4--x-s3/p?region=us-east-1&s3_express=true").is_ok());
        // Injected HTTP faults and given keys are for S3 only.
        let keys = OpenOptions {
            keys: Some(("k".into(), "s".into())),
            ..OpenOptions::default()
        };
        assert!(matches!(
            open_with("memory://", keys),
            Err(StoreUrlError::HttpFaultsNeedS3(_))
        ));
    }

    /// An S3 endpoint that accepts connections and never answers: every
    /// call gives up at its deadlines instead of waiting forever (issue 8:
    /// every network wait has a deadline).
    #[tokio::test]
    async fn a_silent_s3_endpoint_fails_calls_at_their_deadlines() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // Accept and hold every connection, answering nothing.
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                held.push(stream);
            }
        });
        let store = open(&format!(
            "s3://bucket?endpoint=http://127.0.0.1:{port}&region=us-east-1&path_style=true\
             &skip_signature=true&bulk_delete=false&timeout=300ms&retry_timeout=1s"
        ))
        .unwrap();
        let started = tokio::time::Instant::now();
        let path = object_store::path::Path::from("a");
        let put = store.put(&path, bytes::Bytes::from_static(b"x").into());
        let outcome = tokio::time::timeout(std::time::Duration::from_secs(20), put).await;
        let error = format!("{outcome:?}");
        assert!(matches!(outcome, Ok(Err(_))), "{error}");
        assert!(
            error.contains("imed out") || error.contains("imeout"),
            "failed for another reason than its deadline: {error}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn profiles_are_read_from_a_shared_credentials_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("credentials");
        std::fs::write(
            &file,
            "[default]\naws_access_key_id = AK1\naws_secret_access_key = S1\n\n\
             [ci]\naws_access_key_id=AK2\naws_secret_access_key=S2\naws_session_token=T2\n[half]\naws_access_key_id=X\n",
        )
        .unwrap();
        let keys = |p| profile_keys(&file, p);
        assert_eq!(keys("default").unwrap().access_key_id, "AK1");
        let ci = keys("ci").unwrap();
        assert_eq!(
            (ci.secret_access_key.as_str(), ci.session_token.as_deref()),
            ("S2", Some("T2"))
        );
        assert_eq!(keys("half"), None);
        assert_eq!(keys("missing"), None);
        assert_eq!(profile_keys(&dir.path().join("nope"), "default"), None);
    }

    #[test]
    fn bad_urls_are_clear_errors() {
        assert!(matches!(open("objects"), Err(StoreUrlError::NoScheme(_))));
        assert!(matches!(
            open("gopher://x"),
            Err(StoreUrlError::UnsupportedScheme(s)) if s == "gopher"
        ));
    }
}
