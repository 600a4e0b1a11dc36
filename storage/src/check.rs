//! The check an agent makes of its object store before it serves: that the
//! bucket is there, the credentials may list, write and delete, and the
//! endpoint answers, within a deadline. A store that fails it is named in one
//! readable line and the agent exits, rather than starting and retrying every
//! upload in a loop that only its logs show.

use std::time::Duration;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

/// How long the whole check may take: past S3's connect timeout and a
/// retry or two, short enough that a wrong endpoint is said at once.
pub const CHECK_WITHIN: Duration = Duration::from_secs(30);

/// How many times the probe's delete is tried while it fails retriably.
const DELETE_TRIES: u32 = 10;

/// Where the check writes (and at once deletes) its object. Compaction's
/// orphan sweep lists only its own prefixes, so a probe left by a failed
/// delete stays, a few bytes, rather than being taken for data.
pub const PROBE_PREFIX: &str = "probe/";

/// Why a store cannot be used, in the words an operator needs.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(
        "the object store {url} did not answer within {within:?} ({step}): is the endpoint reachable?"
    )]
    NoAnswer {
        url: String,
        step: Step,
        within: Duration,
    },
    #[error(
        "the object store {url} refused the credentials ({step}): check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the profile, and the bucket's policy: {cause}"
    )]
    Credentials {
        url: String,
        step: Step,
        cause: String,
    },
    #[error("the object store {url} has no such bucket ({step})")]
    NoBucket {
        url: String,
        step: Step,
        cause: String,
    },
    #[error("the object store {url} failed ({step}): {cause}")]
    Failed {
        url: String,
        step: Step,
        cause: String,
    },
}

/// What the check was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    List = 0,
    Write = 1,
    Delete = 2,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Step::List => "listing",
            Step::Write => "writing a probe object",
            Step::Delete => "deleting the probe object",
        })
    }
}

/// Lists, writes `probe` and deletes it, within `within`. `url` names the
/// store in the error (without its query: it may hold an endpoint's options).
pub async fn check(
    store: &dyn ObjectStore,
    url: &str,
    probe: &Path,
    within: Duration,
) -> Result<(), CheckError> {
    let url = url.split('?').next().unwrap_or(url).to_string();
    // The step reached, for the message if the deadline passes in it.
    let reached = std::sync::atomic::AtomicU8::new(0);
    let at = |step: Step| reached.store(step as u8, std::sync::atomic::Ordering::Relaxed);
    let run = async {
        at(Step::List);
        store
            .list_with_delimiter(Some(&Path::from(crate::keys::INGEST_PREFIX)))
            .await
            .map_err(|e| (Step::List, e))?;
        at(Step::Write);
        store
            .put(probe, PutPayload::from_static(b"floe"))
            .await
            .map_err(|e| (Step::Write, e))?;
        at(Step::Delete);
        // A DELETE whose answer was lost is not retried by object_store
        // (it retries only requests it knows are idempotent); deleting a
        // key again is harmless, so a failed one is tried again, with a
        // growing pause, up to DELETE_TRIES times within the deadline (a
        // store resetting 40% of connections failed three tries in 6% of
        // start-ups).
        let mut tries = 0;
        let mut pause = Duration::from_millis(50);
        loop {
            tries += 1;
            match store.delete(probe).await {
                Ok(()) => return Ok(()),
                Err(object_store::Error::NotFound { .. }) if tries > 1 => return Ok(()),
                Err(e) if tries >= DELETE_TRIES || !retriable(&e) => {
                    return Err((Step::Delete, e));
                }
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
        }
    };
    match tokio::time::timeout(within, run).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err((step, source))) => Err(classify(url, step, source)),
        Err(_) => {
            let step = match reached.load(std::sync::atomic::Ordering::Relaxed) {
                0 => Step::List,
                1 => Step::Write,
                _ => Step::Delete,
            };
            Err(CheckError::NoAnswer { url, step, within })
        }
    }
}

/// Whether trying a request again could help: not for refused
/// credentials or a missing bucket.
fn retriable(e: &object_store::Error) -> bool {
    !matches!(
        e,
        object_store::Error::Unauthenticated { .. } | object_store::Error::PermissionDenied { .. }
    ) && !format!("{e}").contains("NoSuchBucket")
}

/// Names what a store's error means. S3 says it in the error's code, which
/// `object_store` carries in the message of a generic error.
fn classify(url: String, step: Step, source: object_store::Error) -> CheckError {
    let text = format!("{source:#}");
    let credentials = matches!(
        source,
        object_store::Error::Unauthenticated { .. } | object_store::Error::PermissionDenied { .. }
    ) || [
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "AccessDenied",
        "ExpiredToken",
        "InvalidToken",
        "403 Forbidden",
    ]
    .iter()
    .any(|code| text.contains(code));
    // One line: the store's own words, without the response bodies the
    // error chain repeats.
    let cause = source
        .to_string()
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(300)
        .collect();
    if credentials {
        CheckError::Credentials { url, step, cause }
    } else if text.contains("NoSuchBucket") {
        CheckError::NoBucket { url, step, cause }
    } else {
        CheckError::Failed { url, step, cause }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn a_working_store_passes_and_keeps_nothing() {
        let store = InMemory::new();
        let probe = Path::from("probe/a");
        check(&store, "memory://", &probe, CHECK_WITHIN)
            .await
            .unwrap();
        assert!(store.head(&probe).await.is_err(), "the probe is deleted");
    }

    #[test]
    fn errors_are_named_by_what_s3_said() {
        let generic = |message: &str| object_store::Error::Generic {
            store: "S3",
            source: message.to_string().into(),
        };
        let url = || "s3://b/p".to_string();
        assert!(matches!(
            classify(
                url(),
                Step::List,
                generic("Error performing list: <Code>NoSuchBucket</Code>")
            ),
            CheckError::NoBucket { .. }
        ));
        assert!(matches!(
            classify(
                url(),
                Step::Write,
                generic("<Code>SignatureDoesNotMatch</Code>")
            ),
            CheckError::Credentials { .. }
        ));
        assert!(matches!(
            classify(url(), Step::List, generic("connection reset")),
            CheckError::Failed { .. }
        ));
        let message = classify(url(), Step::List, generic("<Code>AccessDenied</Code>")).to_string();
        assert!(
            message.starts_with("the object store s3://b/p refused"),
            "{message}"
        );
    }
}
