//! Durable puts for the local-folder store.
//!
//! `object_store`'s `LocalFileSystem` writes a temp file and renames it, but
//! never fsyncs, while the metastore fsyncs every commit: after a power loss
//! the metastore could point into an ingest file that is empty or missing.
//! This hook fsyncs the file and every folder from it up to the store's root
//! (folders may have been created for it) before the put is reported done,
//! so nothing is acknowledged before it is on disk.

use std::path::PathBuf;

use async_trait::async_trait;
use object_store::path::Path;

use crate::hooked::{HookedStore, Hooks};

pub struct Fsync {
    root: PathBuf,
}

/// A local-folder store whose puts are durable when they return.
pub type SyncedLocal = HookedStore<Fsync>;

pub fn synced(inner: std::sync::Arc<dyn object_store::ObjectStore>, root: PathBuf) -> SyncedLocal {
    HookedStore::new(inner, Fsync { root })
}

#[async_trait]
impl Hooks for Fsync {
    async fn after_put(&self, location: &Path) -> object_store::Result<()> {
        let file = location
            .parts()
            .fold(self.root.clone(), |path, part| path.join(part.as_ref()));
        let root = self.root.clone();
        let synced = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            std::fs::File::open(&file)?.sync_all()?;
            let mut dir = file.parent();
            while let Some(d) = dir {
                std::fs::File::open(d)?.sync_all()?;
                if d == root {
                    break;
                }
                dir = d.parent();
            }
            Ok(())
        })
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|r| r);
        synced.map_err(|e| object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(e),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;

    #[tokio::test]
    async fn puts_land_and_missing_files_fail_the_put() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let local = std::sync::Arc::new(
            object_store::local::LocalFileSystem::new_with_prefix(&root).unwrap(),
        );
        let store = synced(local, root.clone());
        let key = Path::from("ingest/3f/abc");
        store
            .put(&key, bytes::Bytes::from_static(b"data").into())
            .await
            .unwrap();
        assert_eq!(std::fs::read(root.join("ingest/3f/abc")).unwrap(), b"data");
        // A hook that cannot find what it must sync fails the put, loudly.
        let wrong = Fsync {
            root: root.join("elsewhere"),
        };
        assert!(wrong.after_put(&key).await.is_err());
        let _ = store.head(&key).await.unwrap();
    }
}
