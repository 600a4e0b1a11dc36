//! The cluster's id, kept in two places that must agree: the metastore
//! (set once, by the first agent that claims one) and the object store (a
//! small object at its root, [`MARKER`]). An agent pointed at another
//! cluster's bucket or prefix, or at a metastore started afresh over an old
//! bucket, would otherwise serve without complaint: records written through
//! it unreadable through the others, and garbage collection deciding about
//! objects its metastore never heard of. So a mismatch refuses to start, in
//! one line.

use floe_metastore::MetaError;
use floe_metastore::contract::ops::ClusterIdentity;
use floe_storage::keys::{INGEST_PREFIX, MERGED_PREFIX, SEGMENT_PREFIX};
use floe_storage::{ObjectPath, ObjectStore};
use object_store::ObjectStoreExt;

use crate::world::World;

/// The object at the store's root (under its prefix) naming the cluster.
/// Outside every prefix garbage collection lists, so it is never swept.
pub const MARKER: &str = "cluster-id";

/// Why an agent cannot serve this metastore over this object store.
#[derive(Debug, thiserror::Error)]
pub enum Mismatch {
    #[error(
        "the object store {store} belongs to cluster {stored}, but the metastore is cluster {claimed}: \
         an agent serves only the object store its cluster was created with (check --object-store and --metastore)"
    )]
    OtherCluster {
        store: String,
        stored: String,
        claimed: String,
    },
    #[error(
        "the object store {store} holds no cluster id, but cluster {claimed}'s store does: this is another \
         bucket or prefix (check --object-store), or its {MARKER} object was deleted (then write {claimed} to it)"
    )]
    OtherStore { store: String, claimed: String },
    #[error(
        "the object store {store} holds none of cluster {claimed}'s objects ({known} is missing): \
         this is another bucket, prefix or folder (check --object-store and --data-dir)"
    )]
    NotOurs {
        store: String,
        claimed: String,
        known: String,
    },
    #[error(
        "the object store {store} holds records cluster {claimed}'s metastore never heard of ({stranger}, ...): \
         another cluster's store (check --object-store and --metastore), or one whose {MARKER} was deleted"
    )]
    Strangers {
        store: String,
        claimed: String,
        stranger: String,
    },
    #[error("the object store {store} holds a {MARKER} that is not a cluster id: {why}")]
    Unreadable { store: String, why: String },
    #[error("reading or writing {MARKER} in the object store {store}: {why}")]
    Store { store: String, why: String },
    #[error("learning the cluster's id from the metastore: {0}")]
    Metastore(#[from] MetaError),
}

/// A fresh cluster id as Kafka draws them: a UUID in URL-safe base64,
/// 22 characters.
pub fn fresh(world: &World) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(world.ids.next_id().as_bytes())
}

/// Checks the store's [`MARKER`] against the metastore's cluster id,
/// claiming one with `claim` (called with the id to propose, and whether
/// the store is now seen to hold it). A store without the marker gets it
/// only while the metastore has not recorded marking one (a new cluster,
/// or one created before cluster ids), and only if it holds an object the
/// metastore knows of (when it knows any); once recorded, a store without
/// it is another store. The marker is created only if absent, so of two
/// clusters racing over one empty store, one wins and the other is
/// refused. `store_name` names the store in errors.
pub async fn check<F, C>(
    store: &dyn ObjectStore,
    meta: &dyn floe_metastore::Metastore,
    store_name: &str,
    proposed: String,
    mut claim: C,
) -> Result<String, Mismatch>
where
    F: std::future::Future<Output = Result<ClusterIdentity, MetaError>>,
    C: FnMut(String, bool) -> F,
{
    let cluster = claim(proposed, false).await?;
    let marker = ObjectPath::from(MARKER);
    let failed = |e: object_store::Error| Mismatch::Store {
        store: store_name.to_string(),
        why: e.to_string(),
    };
    let stored = match read(store, &marker).await {
        Ok(stored) => stored,
        Err(object_store::Error::NotFound { .. }) => {
            if cluster.store_marked {
                return Err(Mismatch::OtherStore {
                    store: store_name.to_string(),
                    claimed: cluster.id,
                });
            }
            if let Some(known) = &cluster.known_object {
                match store.head(&ObjectPath::from(known.as_str())).await {
                    Ok(_) => {}
                    Err(object_store::Error::NotFound { .. }) => {
                        return Err(Mismatch::NotOurs {
                            store: store_name.to_string(),
                            claimed: cluster.id,
                            known: known.clone(),
                        });
                    }
                    Err(e) => return Err(failed(e)),
                }
            }
            if let Some(stranger) = strangers(store, store_name, meta).await? {
                return Err(Mismatch::Strangers {
                    store: store_name.to_string(),
                    claimed: cluster.id,
                    stranger,
                });
            }
            match create(store, &marker, &cluster.id).await.map_err(failed)? {
                Created::Ours => cluster.id.as_bytes().to_vec().into(),
                Created::Maybe => read_created(store, &marker).await.map_err(failed)?,
            }
        }
        Err(e) => return Err(failed(e)),
    };
    let stored = std::str::from_utf8(&stored)
        .map_err(|e| Mismatch::Unreadable {
            store: store_name.to_string(),
            why: e.to_string(),
        })?
        .trim();
    if stored != cluster.id {
        return Err(Mismatch::OtherCluster {
            store: store_name.to_string(),
            stored: stored.to_string(),
            claimed: cluster.id,
        });
    }
    if !cluster.store_marked {
        claim(cluster.id.clone(), true).await?;
    }
    Ok(cluster.id)
}

/// The first objects holding records in the store, when the metastore
/// knows none of them: a store (without a marker) that another cluster
/// filled, which this one's orphan sweep would delete. An upload a
/// crash left uncommitted is unknown too, so only a store where every
/// object looked at is unknown counts.
async fn strangers(
    store: &dyn ObjectStore,
    store_name: &str,
    meta: &dyn floe_metastore::Metastore,
) -> Result<Option<String>, Mismatch> {
    use futures::{StreamExt, TryStreamExt};
    // The three listings at once: a start-up on a slow store waits for one.
    let listings = [INGEST_PREFIX, MERGED_PREFIX, SEGMENT_PREFIX].map(|prefix| {
        let prefix = ObjectPath::from(prefix.trim_end_matches('/'));
        store
            .list(Some(&prefix))
            .take(LOOK_AT)
            .try_collect::<Vec<_>>()
    });
    let mut keys = Vec::new();
    for listed in futures::future::join_all(listings).await {
        let listed = listed.map_err(|e| Mismatch::Store {
            store: store_name.to_string(),
            why: e.to_string(),
        })?;
        keys.extend(listed.into_iter().map(|entry| entry.location.to_string()));
    }
    if keys.is_empty() {
        return Ok(None);
    }
    let unknown = meta.unknown_objects(keys.clone()).await?;
    Ok((unknown.len() == keys.len()).then(|| keys.swap_remove(0)))
}

/// How many objects of each kind [`strangers`] looks at.
const LOOK_AT: usize = 100;

/// The marker just created (or found created): read again for a moment if
/// a conditional write in flight elsewhere kept it from being visible.
async fn read_created(
    store: &dyn ObjectStore,
    marker: &ObjectPath,
) -> Result<bytes::Bytes, object_store::Error> {
    for _ in 0..READ_CREATED_TRIES {
        match read(store, marker).await {
            Err(object_store::Error::NotFound { .. }) => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            read => return read,
        }
    }
    read(store, marker).await
}

const READ_CREATED_TRIES: usize = 10;

/// What [`create`] knows of the marker it wrote.
enum Created {
    /// Its conditional write succeeded: the marker is ours.
    Ours,
    /// Another was there, or a write whose answer was lost may have
    /// landed: read it.
    Maybe,
}

/// Writes the marker if no marker exists (S3's `If-None-Match: *`). A
/// conditional write is not retried by the store's client once sent, so a
/// failed one is tried again a few times (one that landed before failing
/// is then refused as existing, and read). A store without conditional
/// writes gets a plain PUT: two clusters racing over one empty store are
/// then told apart only by the read that follows.
async fn create(
    store: &dyn ObjectStore,
    marker: &ObjectPath,
    id: &str,
) -> object_store::Result<Created> {
    let payload = id.as_bytes().to_vec();
    let mut tries = 0;
    loop {
        let options = object_store::PutOptions::from(object_store::PutMode::Create);
        match store
            .put_opts(marker, payload.clone().into(), options)
            .await
        {
            Ok(_) => return Ok(Created::Ours),
            Err(object_store::Error::AlreadyExists { .. }) => return Ok(Created::Maybe),
            Err(object_store::Error::NotImplemented { .. }) => {
                store.put(marker, payload.into()).await?;
                return Ok(Created::Maybe);
            }
            Err(_) if tries < CREATE_TRIES => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Failed conditional writes of the marker tried again.
const CREATE_TRIES: usize = 5;

/// The marker's bytes: a few dozen, never more than [`MARKER_MOST_BYTES`]
/// read.
async fn read(
    store: &dyn ObjectStore,
    marker: &ObjectPath,
) -> Result<bytes::Bytes, object_store::Error> {
    let options = object_store::GetOptions {
        range: Some(object_store::GetRange::Bounded(0..MARKER_MOST_BYTES)),
        ..Default::default()
    };
    store.get_opts(marker, options).await?.bytes().await
}

/// More than any cluster id (see `floe_metastore`'s `MAX_CLUSTER_ID_BYTES`).
const MARKER_MOST_BYTES: u64 = 128;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use floe_metastore::{LocalMetastore, Metastore};

    use super::*;

    fn store() -> Arc<dyn ObjectStore> {
        Arc::new(object_store::memory::InMemory::new())
    }

    async fn check_with(
        meta: &dyn Metastore,
        store: &dyn ObjectStore,
        proposed: &str,
    ) -> Result<String, Mismatch> {
        check(store, meta, "mem://x", proposed.into(), |id, marked| {
            meta.claim_cluster_id(id, marked)
        })
        .await
    }

    #[tokio::test]
    async fn the_first_agent_marks_the_store_and_the_next_agree() {
        let (meta, store) = (LocalMetastore::in_memory().await.unwrap(), store());
        assert_eq!(check_with(&meta, &*store, "a").await.unwrap(), "a");
        assert_eq!(check_with(&meta, &*store, "b").await.unwrap(), "a");
        let marker = store.get(&ObjectPath::from(MARKER)).await.unwrap();
        assert_eq!(&marker.bytes().await.unwrap()[..], b"a");
    }

    #[tokio::test]
    async fn another_clusters_store_is_refused_in_one_line() {
        let (ours, theirs, store) = (
            LocalMetastore::in_memory().await.unwrap(),
            LocalMetastore::in_memory().await.unwrap(),
            store(),
        );
        check_with(&ours, &*store, "ours").await.unwrap();
        let refused = check_with(&theirs, &*store, "theirs")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("belongs to cluster ours")
                && refused.contains("the metastore is cluster theirs")
                && !refused.contains('\n'),
            "{refused}"
        );
    }

    #[tokio::test]
    async fn a_store_without_the_metastores_objects_is_not_marked() {
        let meta = LocalMetastore::in_memory().await.unwrap();
        let (ours, elsewhere) = (store(), store());
        ours.put(&ObjectPath::from("ingest/00/a"), b"x".to_vec().into())
            .await
            .unwrap();
        let (_, committed) =
            crate::testing::topic_with_records(&meta, "t", "ingest/00/a", &[1]).await;
        assert_eq!(committed, vec![Ok(0)]);
        // An upgrade pointed at another folder: refused, nothing marked.
        let refused = check_with(&meta, &*elsewhere, "ours").await.unwrap_err();
        assert!(
            refused.to_string().contains("ingest/00/a is missing"),
            "{refused}"
        );
        assert_eq!(check_with(&meta, &*ours, "ours").await.unwrap(), "ours");
    }

    #[tokio::test]
    async fn a_new_metastore_never_takes_a_filled_store_without_a_marker() {
        // Another cluster's records, in a store whose marker is gone (or
        // that predates cluster ids): a fresh metastore knows none of them.
        let (meta, filled) = (LocalMetastore::in_memory().await.unwrap(), store());
        filled
            .put(&ObjectPath::from("segment/00/x"), b"x".to_vec().into())
            .await
            .unwrap();
        let refused = check_with(&meta, &*filled, "new").await.unwrap_err();
        assert!(
            refused.to_string().contains("never heard of (segment/00/x"),
            "{refused}"
        );
        assert!(
            filled.head(&ObjectPath::from(MARKER)).await.is_err(),
            "marked all the same"
        );
    }

    #[tokio::test]
    async fn two_clusters_racing_over_one_store_are_not_both_taken() {
        let (a, b, store) = (
            LocalMetastore::in_memory().await.unwrap(),
            LocalMetastore::in_memory().await.unwrap(),
            store(),
        );
        let (first, second) =
            tokio::join!(check_with(&a, &*store, "a"), check_with(&b, &*store, "b"));
        assert!(first.is_ok() != second.is_ok(), "{first:?} {second:?}");
    }

    #[tokio::test]
    async fn an_empty_store_of_a_marked_cluster_is_another_store() {
        let meta = LocalMetastore::in_memory().await.unwrap();
        check_with(&meta, &*store(), "ours").await.unwrap();
        let refused = check_with(&meta, &*store(), "ours")
            .await
            .unwrap_err()
            .to_string();
        assert!(refused.contains("holds no cluster id"), "{refused}");
    }

    #[test]
    fn fresh_ids_look_like_kafkas() {
        let id = fresh(&World::default());
        assert_eq!(id.len(), 22);
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
    }
}
