//! An object store wrapper that injects errors and latency, for tests of what
//! floe does when the object store misbehaves.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

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
}

#[derive(Debug, thiserror::Error)]
pub enum FaultSpecError {
    #[error("fault `{0}` is not `key=value`")]
    NotKeyValue(String),
    #[error(
        "unknown fault `{0}` (known: put_error_rate, put_lost_reply_rate, get_error_rate, latency)"
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
                other => return Err(FaultSpecError::Unknown(other.to_string())),
            }
        }
        Ok(faults)
    }
}

pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    faults: Faults,
    state: AtomicU64,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn ObjectStore>, faults: Faults) -> Self {
        FaultyStore {
            inner,
            faults,
            state: AtomicU64::new(0x9E37_79B9_7F4A_7C15),
        }
    }

    /// A fair coin weighted `rate` (xorshift; good enough to spread faults).
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

    async fn delay(&self) {
        if !self.faults.latency.is_zero() {
            tokio::time::sleep(self.faults.latency).await;
        }
    }

    fn injected(what: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "faults",
            source: format!("injected {what} failure").into(),
        }
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({}, {:?})", self.inner, self.faults)
    }
}

impl fmt::Debug for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.delay().await;
        if self.roll(self.faults.put_error_rate) {
            return Err(Self::injected("PUT"));
        }
        let result = self.inner.put_opts(location, payload, opts).await?;
        if self.roll(self.faults.put_lost_reply_rate) {
            return Err(Self::injected("PUT reply"));
        }
        Ok(result)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.delay().await;
        if self.roll(self.faults.put_error_rate) {
            return Err(Self::injected("multipart PUT"));
        }
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.delay().await;
        if self.roll(self.faults.get_error_rate) {
            return Err(Self::injected("GET"));
        }
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.delay().await;
        if self.roll(self.faults.get_error_rate) {
            return Err(Self::injected("GET"));
        }
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

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
        let store = FaultyStore::new(inner.clone(), "put_error_rate=0.3".parse().unwrap());
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
        let store = FaultyStore::new(inner.clone(), "put_lost_reply_rate=1".parse().unwrap());
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
