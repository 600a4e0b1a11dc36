//! An object store wrapper that injects errors and latency, for tests of what
//! floe does when the object store misbehaves.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use object_store::{ObjectStore, Result};

use crate::hooked::{HookedStore, Hooks, Op};

/// What to inject. Parsed from `put_error_rate=0.3,get_error_rate=0.1,latency=20ms`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    /// Share of PUTs that fail before storing anything.
    pub put_error_rate: f64,
    /// Share of PUTs that store the object and then report a failure (the
    /// caller cannot tell: the object exists but was never acknowledged).
    pub put_lost_reply_rate: f64,
    /// Share of GETs that fail.
    pub get_error_rate: f64,
    /// Added before every request.
    pub latency: Duration,
    /// S3 only (see [`crate::http_faults`]): shares of writes and reads
    /// answered `503 SlowDown`, of connections reset, and the median and
    /// 99th percentile of a latency added to each HTTP request.
    pub put_slowdown_rate: f64,
    pub get_slowdown_rate: f64,
    pub reset_rate: f64,
    pub latency_p50: Duration,
    pub latency_p99: Duration,
}

impl Faults {
    /// Whether any fault is injected in S3's HTTP exchanges (which only an
    /// `s3://` store has).
    pub fn in_http(&self) -> bool {
        self.put_slowdown_rate > 0.0
            || self.get_slowdown_rate > 0.0
            || self.reset_rate > 0.0
            || !self.latency_p50.is_zero()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FaultSpecError {
    #[error("fault `{0}` is not `key=value`")]
    NotKeyValue(String),
    #[error(
        "unknown fault `{0}` (known: put_error_rate, put_lost_reply_rate, get_error_rate, latency; on s3:// only: put_slowdown_rate, get_slowdown_rate, reset_rate, latency_p50, latency_p99)"
    )]
    Unknown(String),
    #[error("fault `{0}` has a bad value `{1}`")]
    BadValue(String, String),
}

impl std::str::FromStr for Faults {
    type Err = FaultSpecError;

    fn from_str(spec: &str) -> Result<Faults, FaultSpecError> {
        let mut faults = Faults::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| FaultSpecError::NotKeyValue(item.to_string()))?;
            let bad = || FaultSpecError::BadValue(key.to_string(), value.to_string());
            let rate = || {
                value
                    .parse::<f64>()
                    .ok()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or_else(bad)
            };
            match key {
                "put_error_rate" => faults.put_error_rate = rate()?,
                "put_lost_reply_rate" => faults.put_lost_reply_rate = rate()?,
                "get_error_rate" => faults.get_error_rate = rate()?,
                "latency" => {
                    faults.latency = humantime::parse_duration(value).map_err(|_| bad())?
                }
                "put_slowdown_rate" => faults.put_slowdown_rate = rate()?,
                "get_slowdown_rate" => faults.get_slowdown_rate = rate()?,
                "reset_rate" => faults.reset_rate = rate()?,
                "latency_p50" => {
                    faults.latency_p50 = humantime::parse_duration(value).map_err(|_| bad())?
                }
                "latency_p99" => {
                    faults.latency_p99 = humantime::parse_duration(value).map_err(|_| bad())?
                }
                other => return Err(FaultSpecError::Unknown(other.to_string())),
            }
        }
        Ok(faults)
    }
}

/// Injects [`Faults`] as [`Hooks`] of a [`HookedStore`].
pub struct FaultInjector {
    faults: Faults,
    state: AtomicU64,
}

/// An object store that misbehaves as `faults` says.
pub type FaultyStore = HookedStore<FaultInjector>;

/// Wraps `inner` so that it misbehaves as `faults` says.
pub fn faulty(inner: Arc<dyn ObjectStore>, faults: Faults) -> FaultyStore {
    HookedStore::new(
        inner,
        FaultInjector {
            faults,
            state: AtomicU64::new(0x9E37_79B9_7F4A_7C15),
        },
    )
}

impl FaultInjector {
    /// A coin weighted `rate` (xorshift; good enough to spread faults).
    fn roll(&self, rate: f64) -> bool {
        if rate <= 0.0 {
            return false;
        }
        let mut x = self.state.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state.store(x, Ordering::Relaxed);
        ((x >> 11) as f64 / ((1u64 << 53) as f64)) < rate
    }

    fn injected(what: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "faults",
            source: format!("injected {what} failure").into(),
        }
    }
}

#[async_trait]
impl Hooks for FaultInjector {
    async fn before(&self, op: Op) -> Result<()> {
        if !self.faults.latency.is_zero() {
            tokio::time::sleep(self.faults.latency).await;
        }
        let rate = match op {
            Op::Put | Op::PutMultipart => self.faults.put_error_rate,
            Op::Get => self.faults.get_error_rate,
            _ => 0.0,
        };
        if self.roll(rate) {
            return Err(Self::injected(op.name()));
        }
        Ok(())
    }

    fn after(&self, op: Op, _bytes: u64, ok: bool) -> Result<()> {
        // The object is stored, but the caller is told it failed.
        if ok && op == Op::Put && self.roll(self.faults.put_lost_reply_rate) {
            return Err(Self::injected("PUT reply"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::path::Path;
    use object_store::{ObjectStoreExt, PutPayload};

    #[test]
    fn specs_parse_or_explain() {
        let f: Faults = "put_error_rate=0.25, latency=20ms".parse().unwrap();
        assert_eq!(f.put_error_rate, 0.25);
        assert_eq!(f.latency, Duration::from_millis(20));
        assert!(matches!(
            "put_error_rate=2".parse::<Faults>(),
            Err(FaultSpecError::BadValue(..))
        ));
        assert!(matches!(
            "colour=red".parse::<Faults>(),
            Err(FaultSpecError::Unknown(_))
        ));
        assert!(matches!(
            "oops".parse::<Faults>(),
            Err(FaultSpecError::NotKeyValue(_))
        ));
    }

    #[tokio::test]
    async fn injects_at_about_the_rate_asked() {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let store = faulty(inner.clone(), "put_error_rate=0.3".parse().unwrap());
        let mut failed = 0;
        for n in 0..1000 {
            let path = Path::from(format!("k{n}"));
            if store
                .put(&path, PutPayload::from_static(b"x"))
                .await
                .is_err()
            {
                failed += 1;
                assert!(
                    inner.head(&path).await.is_err(),
                    "a failed PUT stored nothing"
                );
            }
        }
        assert!((200..400).contains(&failed), "{failed} of 1000 failed");
    }

    #[tokio::test]
    async fn lost_replies_store_the_object() {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let store = faulty(inner.clone(), "put_lost_reply_rate=1".parse().unwrap());
        let path = Path::from("k");
        assert!(
            store
                .put(&path, PutPayload::from_static(b"x"))
                .await
                .is_err()
        );
        assert!(inner.head(&path).await.is_ok());
    }
}
