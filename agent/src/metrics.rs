//! Prometheus metrics, and the object-store wrapper that counts requests and
//! bytes by operation (what the cost model multiplies by S3's prices).

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabel {
    pub op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabel {
    pub api: String,
}

pub struct Metrics {
    registry: Registry,
    object_requests: Family<OpLabel, Counter>,
    object_bytes: Family<OpLabel, Counter>,
    object_errors: Family<OpLabel, Counter>,
    requests: Family<ApiLabel, Counter>,
    request_seconds: Family<ApiLabel, Histogram>,
    flush_bytes: Histogram,
    flush_batches: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("floe");
        let object_requests = Family::<OpLabel, Counter>::default();
        let object_bytes = Family::<OpLabel, Counter>::default();
        let object_errors = Family::<OpLabel, Counter>::default();
        let requests = Family::<ApiLabel, Counter>::default();
        let request_seconds = Family::<ApiLabel, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.0005, 2.0, 18))) as fn() -> Histogram,
        );
        let flush_bytes = Histogram::new(exponential_buckets(1024.0, 4.0, 10));
        let flush_batches = Histogram::new(exponential_buckets(1.0, 4.0, 8));
        registry.register(
            "object_store_requests",
            "Object-store requests by operation",
            object_requests.clone(),
        );
        registry.register(
            "object_store_bytes",
            "Object-store bytes moved by operation",
            object_bytes.clone(),
        );
        registry.register(
            "object_store_errors",
            "Failed object-store requests by operation",
            object_errors.clone(),
        );
        registry.register(
            "kafka_requests",
            "Kafka requests handled, by API",
            requests.clone(),
        );
        registry.register(
            "kafka_request_duration_seconds",
            "Time from reading a Kafka request to its response, by API",
            request_seconds.clone(),
        );
        registry.register(
            "ingest_flush_bytes",
            "Size of each uploaded ingest file",
            flush_bytes.clone(),
        );
        registry.register(
            "ingest_flush_batches",
            "Record batches in each ingest file",
            flush_batches.clone(),
        );
        Metrics {
            registry,
            object_requests,
            object_bytes,
            object_errors,
            requests,
            request_seconds,
            flush_bytes,
            flush_batches,
        }
    }

    pub fn request(&self, api: &str, took: Duration) {
        let label = ApiLabel {
            api: api.to_string(),
        };
        self.requests.get_or_create(&label).inc();
        self.request_seconds
            .get_or_create(&label)
            .observe(took.as_secs_f64());
    }

    pub fn flush(&self, bytes: usize, batches: usize) {
        self.flush_bytes.observe(bytes as f64);
        self.flush_batches.observe(batches as f64);
    }

    fn object(&self, op: &'static str, bytes: u64, ok: bool) {
        let label = OpLabel { op };
        self.object_requests.get_or_create(&label).inc();
        self.object_bytes.get_or_create(&label).inc_by(bytes);
        if !ok {
            self.object_errors.get_or_create(&label).inc();
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String");
        out
    }
}

/// An object store that counts each request and its bytes in [`Metrics`].
pub struct MeteredStore {
    inner: Arc<dyn ObjectStore>,
    metrics: Arc<Metrics>,
}

impl MeteredStore {
    pub fn new(inner: Arc<dyn ObjectStore>, metrics: Arc<Metrics>) -> Self {
        MeteredStore { inner, metrics }
    }
}

impl fmt::Display for MeteredStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Metered({})", self.inner)
    }
}

impl fmt::Debug for MeteredStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[async_trait]
impl ObjectStore for MeteredStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let bytes = payload.content_length() as u64;
        let result = self.inner.put_opts(location, payload, opts).await;
        self.metrics.object("put", bytes, result.is_ok());
        result
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let result = self.inner.put_multipart_opts(location, opts).await;
        self.metrics.object("put_multipart", 0, result.is_ok());
        result
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let result = self.inner.get_opts(location, options).await;
        let bytes = result.as_ref().map_or(0, |r| r.range.end - r.range.start);
        self.metrics.object("get", bytes, result.is_ok());
        result
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let result = self.inner.get_ranges(location, ranges).await;
        let bytes = result
            .as_ref()
            .map_or(0, |r| r.iter().map(|b| b.len() as u64).sum());
        self.metrics.object("get", bytes, result.is_ok());
        result
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        use futures::StreamExt;
        let metrics = self.metrics.clone();
        self.inner
            .delete_stream(locations)
            .inspect(move |r| metrics.object("delete", 0, r.is_ok()))
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.metrics.object("list", 0, true);
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.metrics.object("list", 0, true);
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let result = self.inner.list_with_delimiter(prefix).await;
        self.metrics.object("list", 0, result.is_ok());
        result
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let result = self.inner.copy_opts(from, to, options).await;
        self.metrics.object("copy", 0, result.is_ok());
        result
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        let result = self.inner.rename_opts(from, to, options).await;
        self.metrics.object("rename", 0, result.is_ok());
        result
    }
}
