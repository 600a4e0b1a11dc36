//! Does an object store do what floe asks of it? Each call floe makes, tried
//! against a store under a fresh prefix, with the answer floe relies on:
//! `floe check-store URL` runs it against any S3-compatible server (the
//! tests run it against moto; docs/run/object-storage.md lists the servers it was run on).

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
    let base = Path::from(prefix);
    // A bucket that does not answer at all (missing, refused, unreachable)
    // fails every check alike: said once.
    if let Err(e) = store.list_with_delimiter(Some(&base)).await {
        let outcome = Outcome::Failed(brief(&e.to_string()));
        let check = "the bucket answers a LIST (the other checks need it)";
        return Ok(vec![Finding { check, outcome }]);
    }
    let mut findings = Vec::new();
    let mut report = |check: &'static str, outcome: Result<Outcome, String>| {
        let outcome = outcome.unwrap_or_else(|why| Outcome::Failed(brief(&why)));
        findings.push(Finding { check, outcome });
    };
    let key = |name: &str| base.clone().join(name);
    let sizes = [("empty", 0usize), ("small", 1000), ("large", 6 << 20)];

    report(
        "PUT of objects of 0 B, 1 kB and 6 MiB",
        put_all(&store, &key, &sizes).await,
    );
    report(
        "ranged GET (inside, to the end, across 5 MiB; the object's size told)",
        ranged_gets(&store, &key("large")).await,
    );
    report(
        "GET of a range past the end is refused",
        past_the_end(&store, &key("small")).await,
    );
    report(
        "LIST under a prefix, with sizes, and by delimiter",
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
        "LIST of 1,001 keys (pages), then their bulk DELETE",
        many(&store, &base.clone().join("many")).await,
    );
    report(
        "wrong credentials are refused",
        wrong_credentials(url, &base).await,
    );
    report("a missing bucket is named", missing_bucket(url).await);
    // Whatever failed, nothing is left behind.
    let left: Vec<Path> = store
        .list(Some(&base))
        .map_ok(|meta| meta.location)
        .try_collect()
        .await
        .unwrap_or_default();
    for key in left {
        let _ = store.delete(&key).await;
    }
    Ok(findings)
}

type Check = Result<Outcome, String>;

/// An error as one short line: an S3 error's XML body becomes its code and
/// message, and anything after the first line goes.
fn brief(why: &str) -> String {
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let start = why.find(&open)? + open.len();
        let end = why[start..].find('<')? + start;
        Some(why[start..end].trim().to_string())
    };
    let head = why.split("<?xml").next().unwrap_or(why);
    let head = head
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .trim_end_matches(':');
    match (tag("Code"), tag("Message")) {
        (Some(code), Some(message)) => format!("{head}: {code}: {message}"),
        (Some(code), None) => format!("{head}: {code}"),
        _ => head.to_string(),
    }
}

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
    let options = object_store::GetOptions::default().with_range(Some(1000..2000u64));
    let got = store
        .get_opts(large, options)
        .await
        .map_err(|e| e.to_string())?;
    if got.meta.size != data.len() as u64 {
        // The cache checks a block's object by this size.
        return Err(format!(
            "a ranged GET told a size of {}, not {}",
            got.meta.size,
            data.len()
        ));
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
        // S3 answers 416; object_store names it, or checks the range itself.
        Err(e) if format!("{e}").to_lowercase().contains("range") => Ok(Outcome::Passed),
        Err(e) => Err(format!("refused, but not for its range: {e}")),
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
    // As the start-up check lists: one level, common prefixes apart.
    let parent = Path::from(base.as_ref().rsplit_once('/').map_or("", |(p, _)| p));
    let level = store
        .list_with_delimiter(Some(&parent))
        .await
        .map_err(|e| e.to_string())?;
    if !level.common_prefixes.contains(base) {
        return Err(format!("listing by delimiter did not show {base}"));
    }
    Ok(Outcome::Passed)
}

/// More keys than one LIST page holds (1,000 on S3), as the orphan sweep
/// lists; deleted in bulk, as GC deletes (DeleteObjects takes 1,000 a call).
async fn many(store: &Arc<dyn ObjectStore>, prefix: &Path) -> Check {
    const KEYS: usize = 1001;
    let keys: Vec<Path> = (0..KEYS)
        .map(|i| prefix.clone().join(format!("k{i:04}")))
        .collect();
    futures::stream::iter(keys.iter().cloned())
        .map(|key| async move { store.put(&key, PutPayload::from_static(b"x")).await })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await
        .map_err(|e| e.to_string())?;
    let listed: Vec<_> = store
        .list(Some(prefix))
        .try_collect()
        .await
        .map_err(|e| e.to_string())?;
    if listed.len() != KEYS {
        return Err(format!("listed {} of {KEYS} keys", listed.len()));
    }
    delete_in_bulk(store, keys, prefix).await
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
    delete_in_bulk(store, keys, base).await
}

/// Deletes `keys` in bulk, as GC does, and checks nothing is left under
/// `prefix`. A missing key may be answered as deleted (S3) or NotFound (a
/// local folder): GC takes either as gone.
async fn delete_in_bulk(store: &Arc<dyn ObjectStore>, keys: Vec<Path>, prefix: &Path) -> Check {
    let stream = futures::stream::iter(keys.into_iter().map(Ok)).boxed();
    let results: Vec<_> = store.delete_stream(stream).collect().await;
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
        .list(Some(prefix))
        .try_collect()
        .await
        .map_err(|e| e.to_string())?;
    match left.len() {
        0 => Ok(Outcome::Passed),
        n => Err(format!("{n} objects left after the bulk delete")),
    }
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
    if url.contains("s3_express=true") {
        // A directory bucket's name says its zone; there is none to make up.
        return Ok(Outcome::NotChecked("an S3 Express directory bucket".into()));
    }
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

#[cfg(test)]
mod tests {
    use super::brief;

    #[test]
    fn an_s3_error_is_told_in_one_line() {
        let s3 = "Generic S3 error: Error performing list request: Client error with status 404 \
                  Not Found: <?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchBucket\
                  </Code><Message>The specified bucket does not exist</Message></Error>";
        assert_eq!(
            brief(s3),
            "Generic S3 error: Error performing list request: Client error with status 404 \
             Not Found: NoSuchBucket: The specified bucket does not exist"
        );
        assert_eq!(
            brief("connection refused\nretried 3 times"),
            "connection refused"
        );
    }
}
