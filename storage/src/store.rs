//! Building an object store from a URL.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;

#[derive(Debug, thiserror::Error)]
pub enum StoreUrlError {
    #[error("object store URL `{0}` has no scheme; use file://PATH or memory://")]
    NoScheme(String),
    #[error("object store scheme `{0}` is not supported (supported: file://, memory://)")]
    UnsupportedScheme(String),
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
/// `file://PATH` is a local folder (created if missing; a relative PATH such as
/// `file://./floe-data/objects` is taken from the working directory), and
/// `memory://` is a process-local store for tests.
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
        other => Err(StoreUrlError::UnsupportedScheme(other.to_string())),
    }
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
    fn bad_urls_are_clear_errors() {
        assert!(matches!(open("objects"), Err(StoreUrlError::NoScheme(_))));
        assert!(matches!(
            open("gopher://x"),
            Err(StoreUrlError::UnsupportedScheme(s)) if s == "gopher"
        ));
    }
}
