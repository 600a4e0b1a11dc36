//! Does an object store do what floe asks of it? Each call floe makes, tried
//! against a store under a fresh prefix, with the answer floe relies on:
//! `floe check-store URL` runs it against any S3-compatible server (the
//! tests run it against moto; the README lists the servers it was run on).

use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::check::{CHECK_WITHIN, CheckError};
use crate::store::{OpenOptions, open, open_with};

/// How one check went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed(String),
    /// The check does not apply, or the store cannot show it (said why).
    NotChecked(String),
}

#[derive(Debug, Clone)]
pub struct Finding {
    pub check: &'static str,
    pub outcome: Outcome,
}

/// The object of `size` bytes the checks write (varied, so a wrong range shows).
fn object(size: usize) -> Bytes {
    (0..size).map(|i| (i * 31 % 251) as u8).collect()
}

/// Runs every check against the store `url` names, under `prefix` (which
/// it leaves empty), in order; later checks use what earlier ones wrote.
pub async fn run(url: &str, prefix: &str) -> Result<Vec<Finding>, crate::store::StoreUrlError> {
    let store = open(url)?;
    let mut findings = Vec::new();
    let mut report = |check: &'static str, outcome: Result<Outcome, String>| {
        let outcome = outcome.unwrap_or_else(Outcome::Failed);
        findings.push(Finding { check, outcome });
    };
    let base = Path::from(prefix);
    let key = |name: &str| base.clone().join(name);
    let sizes = [("empty", 0usize), ("small", 1000), ("large", 6 << 20)];

    report(
        "PUT of objects of 0 B, 1 kB and 6 MiB",
        put_all(&store, &key, &sizes).await,
    );
    report(
        "ranged GET (inside, to the end, across 5 MiB)",
        ranged_gets(&store, &key("large")).await,
    );
    report(
        "GET of a range past the end is refused",
        past_the_end(&store, &key("small")).await,
    );
    report(
        "LIST under a prefix, with sizes",
        list(&store, &base, &sizes).await,
    );
    report(
        "GET of a missing key is NotFound",
        missing(&store, &key("never-written")).await,
    );
    report(
        "bulk DELETE (a missing key among them)",
        bulk_delete(&store, &base, &key, &sizes).await,
    );
    report(
        "wrong credentials are refused",
        wrong_credentials(url, &base).await,
    );
    report("a missing bucket is named", missing_bucket(url).await);
    Ok(findings)
}

type Check = Result<Outcome, String>;

async fn put_all(
    store: &Arc<dyn ObjectStore>,
    key: &dyn Fn(&str) -> Path,
    sizes: &[(&str, usize)],
) -> Check {
    for (name, size) in sizes {
        store
            .put(&key(name), PutPayload::from(object(*size)))
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        let got = store.get(&key(name)).await.map_err(|e| e.to_string())?;
        let bytes = got.bytes().await.map_err(|e| e.to_string())?;
        if bytes != object(*size) {
            return Err(format!(
                "{name}: read back {} bytes, not what was written",
                bytes.len()
            ));
        }
    }
    Ok(Outcome::Passed)
}

async fn ranged_gets(store: &Arc<dyn ObjectStore>, large: &Path) -> Check {
    let data = object(6 << 20);
    for range in [
        0..1u64,
        1000..5000,
        (6 << 20) - 10..6 << 20,
        1 << 20..6 << 20,
    ] {
        let got = store
            .get_range(large, range.clone())
            .await
            .map_err(|e| format!("{range:?}: {e}"))?;
        if got[..] != data[range.start as usize..range.end as usize] {
            return Err(format!("{range:?}: wrong bytes ({} of them)", got.len()));
        }
    }
    let several = store
        .get_ranges(large, &[0..10, 4 << 20..(4 << 20) + 10])
        .await
        .map_err(|e| e.to_string())?;
    if several[1][..] != data[4 << 20..(4 << 20) + 10] {
        return Err("several ranges at once: wrong bytes".into());
    }
    Ok(Outcome::Passed)
}

async fn past_the_end(store: &Arc<dyn ObjectStore>, small: &Path) -> Check {
    match store.get_range(small, 2000..3000).await {
        Err(_) => Ok(Outcome::Passed),
        Ok(bytes) => Err(format!("answered {} bytes", bytes.len())),
    }
}

async fn list(store: &Arc<dyn ObjectStore>, base: &Path, sizes: &[(&str, usize)]) -> Check {
    let mut listed: Vec<(String, u64)> = store
        .list(Some(base))
        .map_ok(|meta| {
            (
                meta.location.filename().unwrap_or("").to_string(),
                meta.size,
            )
        })
        .try_collect()
        .await
        .map_err(|e| e.to_string())?;
    listed.sort();
    let mut expected: Vec<(String, u64)> = sizes
        .iter()
        .map(|(n, s)| (n.to_string(), *s as u64))
        .collect();
    expected.sort();
    if listed != expected {
        return Err(format!("listed {listed:?}, expected {expected:?}"));
    }
    Ok(Outcome::Passed)
}

async fn missing(store: &Arc<dyn ObjectStore>, key: &Path) -> Check {
    match store.get(key).await {
        Err(object_store::Error::NotFound { .. }) => Ok(Outcome::Passed),
        Err(e) => Err(format!("another error: {e}")),
        Ok(_) => Err("answered with an object".into()),
    }
}

async fn bulk_delete(
    store: &Arc<dyn ObjectStore>,
    base: &Path,
    key: &dyn Fn(&str) -> Path,
    sizes: &[(&str, usize)],
) -> Check {
    let mut keys: Vec<Path> = sizes.iter().map(|(n, _)| key(n)).collect();
    keys.push(key("never-written"));
    let stream = futures::stream::iter(keys.into_iter().map(Ok)).boxed();
    let results: Vec<_> = store.delete_stream(stream).collect().await;
    // A missing key may be answered as deleted (S3) or NotFound (a local
    // folder): GC takes either as gone.
    let failed = results.into_iter().find_map(|r| match r {
        Err(object_store::Error::NotFound { .. }) | Ok(_) => None,
        Err(e) => Some(e),
    });
    if let Some(e) = failed {
        // GC sees the same error; `bulk_delete=false` deletes one by one.
        return Err(format!(
            "{e} (for a store without DeleteObjects, add bulk_delete=false)"
        ));
    }
    let left: Vec<_> = store
        .list(Some(base))
        .try_collect()
        .await
        .map_err(|e| e.to_string())?;
    if !left.is_empty() {
        return Err(format!("{} objects left after the delete", left.len()));
    }
    Ok(Outcome::Passed)
}

async fn wrong_credentials(url: &str, base: &Path) -> Check {
    if !url.starts_with("s3://") {
        return Ok(Outcome::NotChecked("not an s3:// store".into()));
    }
    let options = OpenOptions {
        keys: Some(("FLOEWRONGKEY".into(), "floe-wrong-secret".into())),
        ..OpenOptions::default()
    };
    let store = open_with(url, options).map_err(|e| e.to_string())?;
    let probe = base.clone().join("wrong-credentials");
    match crate::check::check(store.as_ref(), url, &probe, CHECK_WITHIN).await {
        Err(CheckError::Credentials { .. }) => Ok(Outcome::Passed),
        Err(e) => Err(format!("refused, but not named as credentials: {e}")),
        Ok(()) => {
            let _ = store.delete(&probe).await;
            Ok(Outcome::NotChecked(
                "the server accepted wrong credentials (it checks none)".into(),
            ))
        }
    }
}

async fn missing_bucket(url: &str) -> Check {
    let Some(rest) = url.strip_prefix("s3://") else {
        return Ok(Outcome::NotChecked("not an s3:// store".into()));
    };
    let after_bucket = rest.find(['/', '?']).map_or("", |i| &rest[i..]);
    let missing = format!("s3://floe-no-such-bucket-{}{after_bucket}", {
        use crate::ids::Ids;
        crate::ids::RandomIds.next_id().simple()
    });
    let store = open(&missing).map_err(|e| e.to_string())?;
    let probe = Path::from("probe/missing-bucket");
    match crate::check::check(store.as_ref(), &missing, &probe, CHECK_WITHIN).await {
        Err(CheckError::NoBucket { .. }) => Ok(Outcome::Passed),
        Err(e) => Err(format!(
            "refused, but the bucket was not named missing: {e}"
        )),
        Ok(()) => Err("a bucket that does not exist was written to".into()),
    }
}
