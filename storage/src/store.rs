//! Building an object store from a URL.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::prefix::PrefixStore;

#[derive(Debug, thiserror::Error)]
pub enum StoreUrlError {
    #[error("object store URL `{0}` has no scheme; use file://PATH or memory://")]
    NoScheme(String),
    #[error("object store scheme `{0}` is not supported (supported: s3://, file://, memory://)")]
    UnsupportedScheme(String),
    #[error("s3 URL `{0}` names no bucket; use s3://BUCKET[/PREFIX][?OPTIONS]")]
    NoBucket(String),
    #[error("unknown s3 option `{0}` (known: endpoint, region, path_style, allow_http)")]
    UnknownOption(String),
    #[error("s3 option `{0}` needs true or false, not `{1}`")]
    NotABool(String, String),
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
///   (implied by an `http://` endpoint).
/// - `file://PATH`: a local folder (created if missing; a relative PATH such as
///   `file://./floe-data/objects` is taken from the working directory).
/// - `memory://`: a process-local store for tests.
pub fn open(url: &str) -> Result<Arc<dyn ObjectStore>, StoreUrlError> {
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
            // crashed upload invisible rather than a torn object.
            Ok(Arc::new(LocalFileSystem::new_with_prefix(absolute)?))
        }
        "s3" => open_s3(url, rest),
        other => Err(StoreUrlError::UnsupportedScheme(other.to_string())),
    }
}

fn open_s3(url: &str, rest: &str) -> Result<Arc<dyn ObjectStore>, StoreUrlError> {
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
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
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
            other => return Err(StoreUrlError::UnknownOption(other.to_string())),
        };
    }
    let store = builder.build()?;
    let prefix = prefix.trim_end_matches('/');
    Ok(if prefix.is_empty() {
        Arc::new(store)
    } else {
        Arc::new(PrefixStore::new(store, prefix))
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
