//! Faults injected where S3 causes them: in the HTTP exchange beneath
//! object_store's S3 client, so that its retries and backoff meet them as
//! they would meet S3's own bad days.
//!
//! - `put_slowdown_rate` / `get_slowdown_rate`: the share of writes / reads
//!   answered `503 SlowDown` (S3's answer when a prefix's request rate is
//!   exceeded), without reaching the server.
//! - `reset_rate`: the share of requests whose connection is reset; half
//!   before the request is sent, half after the server handled it (the
//!   answer is lost: a PUT is then stored though its writer saw an error).
//! - `latency_p50` / `latency_p99`: each request waits first for a time
//!   drawn from a log-normal distribution with that median and 99th
//!   percentile (S3's first-byte latency has a long tail).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use object_store::ClientOptions;
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpResponseBody, HttpService, ReqwestConnector,
};

use crate::faults::Faults;

/// What was injected, counted since the store was opened.
#[derive(Debug, Default)]
pub struct Injected {
    pub slowdowns: AtomicU64,
    /// Connections reset before the request was sent.
    pub resets_before: AtomicU64,
    /// Connections reset after the server handled the request, by kind:
    /// PUTs (the object stored, its writer told of an error) and others.
    pub resets_after_put: AtomicU64,
    pub resets_after_other: AtomicU64,
}

/// An [`HttpConnector`] whose clients misbehave as `faults` says, drawing
/// from a generator seeded with `seed` (give each process its own).
#[derive(Debug)]
pub struct FaultyConnector {
    faults: Faults,
    injected: Arc<Injected>,
    seed: u64,
}

impl FaultyConnector {
    pub fn new(faults: Faults, injected: Arc<Injected>, seed: u64) -> Self {
        FaultyConnector {
            faults,
            injected,
            seed,
        }
    }
}

impl HttpConnector for FaultyConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        // A request's deadline covers the injected latency too, as it would
        // cover a slow server.
        let timeout = options
            .get_config_value(&object_store::ClientConfigKey::Timeout)
            .and_then(|t| humantime::parse_duration(&t).ok())
            .unwrap_or(Duration::from_secs(30));
        Ok(HttpClient::new(FaultyService {
            inner: ReqwestConnector::default().connect(options)?,
            faults: self.faults,
            injected: self.injected.clone(),
            state: AtomicU64::new(self.seed),
            timeout,
        }))
    }
}

#[derive(Debug)]
struct FaultyService {
    inner: HttpClient,
    faults: Faults,
    injected: Arc<Injected>,
    state: AtomicU64,
    timeout: Duration,
}

/// The standard normal quantile of 0.99: a log-normal's p99 is its median
/// times `exp(sigma * Z99)`.
const Z99: f64 = 2.326_347_874;

impl FaultyService {
    /// A uniform draw in (0, 1] (SplitMix64 on a shared counter).
    fn uniform(&self) -> f64 {
        let mut z = self
            .state
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    fn roll(&self, rate: f64) -> bool {
        rate > 0.0 && self.uniform() <= rate
    }

    /// A latency with the configured median and 99th percentile.
    fn latency(&self) -> Duration {
        let (p50, p99) = (self.faults.latency_p50, self.faults.latency_p99);
        if p50.is_zero() {
            return Duration::ZERO;
        }
        let sigma = (p99.max(p50).as_secs_f64() / p50.as_secs_f64()).ln() / Z99;
        // Box-Muller: a standard normal from two uniforms.
        let normal =
            (-2.0 * self.uniform().ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos();
        // Capped, so one draw cannot stall a test for minutes.
        Duration::from_secs_f64((p50.as_secs_f64() * (sigma * normal).exp()).min(30.0))
    }
}

fn reset() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "injected connection reset",
    )
}

/// S3's answer to too many requests on a prefix.
fn slow_down() -> HttpResponse {
    let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code>\
                <Message>Please reduce your request rate.</Message></Error>";
    let mut response = HttpResponse::new(HttpResponseBody::from(body.to_string()));
    *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    response
}

#[async_trait]
impl HttpService for FaultyService {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        match tokio::time::timeout(self.timeout, self.misbehave(request)).await {
            Ok(answer) => answer,
            Err(_) => Err(HttpError::new(
                HttpErrorKind::Timeout,
                std::io::Error::new(std::io::ErrorKind::TimedOut, "injected latency"),
            )),
        }
    }
}

impl FaultyService {
    async fn misbehave(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let wait = self.latency();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let slowdown_rate = match *request.method() {
            http::Method::PUT | http::Method::POST => self.faults.put_slowdown_rate,
            http::Method::GET | http::Method::HEAD => self.faults.get_slowdown_rate,
            _ => 0.0,
        };
        if self.roll(slowdown_rate) {
            self.injected.slowdowns.fetch_add(1, Ordering::Relaxed);
            return Ok(slow_down());
        }
        if self.roll(self.faults.reset_rate) {
            if self.roll(0.5) {
                self.injected.resets_before.fetch_add(1, Ordering::Relaxed);
                return Err(HttpError::new(HttpErrorKind::Request, reset()));
            }
            // The server handles it; its answer is lost on the way back.
            // object_store retries this only for requests it knows are
            // idempotent (GETs, PUTs), not DELETEs or POSTs.
            let after = match *request.method() {
                http::Method::PUT => &self.injected.resets_after_put,
                _ => &self.injected.resets_after_other,
            };
            after.fetch_add(1, Ordering::Relaxed);
            let _ = self.inner.execute(request).await;
            return Err(HttpError::new(HttpErrorKind::Interrupted, reset()));
        }
        self.inner.execute(request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(faults: Faults) -> FaultyService {
        FaultyService {
            inner: HttpClient::new(FaultyService::never()),
            faults,
            injected: Default::default(),
            state: AtomicU64::new(1),
            timeout: Duration::from_secs(30),
        }
    }

    impl FaultyService {
        fn never() -> impl HttpService {
            #[derive(Debug)]
            struct Never;
            #[async_trait]
            impl HttpService for Never {
                async fn call(&self, _: HttpRequest) -> Result<HttpResponse, HttpError> {
                    Err(HttpError::new(HttpErrorKind::Connect, reset()))
                }
            }
            Never
        }
    }

    #[test]
    fn latencies_have_the_median_and_tail_asked() {
        let s = service(Faults {
            latency_p50: Duration::from_millis(20),
            latency_p99: Duration::from_millis(200),
            ..Faults::default()
        });
        let mut draws: Vec<Duration> = (0..20_000).map(|_| s.latency()).collect();
        draws.sort();
        let (p50, p99) = (draws[10_000], draws[19_800]);
        assert!((18..=22).contains(&p50.as_millis()), "{p50:?}");
        assert!((170..=235).contains(&p99.as_millis()), "{p99:?}");
        assert_eq!(service(Faults::default()).latency(), Duration::ZERO);
    }

    #[test]
    fn rates_are_kept() {
        let s = service(Faults::default());
        let hits = (0..10_000).filter(|_| s.roll(0.3)).count();
        assert!((2_800..=3_200).contains(&hits), "{hits}");
        assert!(!(0..1000).any(|_| s.roll(0.0)));
    }
}
