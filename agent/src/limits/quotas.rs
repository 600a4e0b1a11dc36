//! Client quotas, enforced in each agent as Kafka's `ClientQuotaManager`
//! enforces them in each broker: a rate per user, client id or a user's
//! client id (the most specific entity that sets a quota, in Kafka's order
//! of eight), measured over 11 one-second samples; a client over its quota
//! gets the time it must wait to be back under it (`throttle_time_ms` in
//! its responses), and its connection reads nothing more for that long.
//!
//! - Produce: the bytes of each request, recorded as it is answered (the
//!   records are written whatever the rate; later requests wait).
//! - Fetch: the bytes of each response; a fetch that would go over is
//!   answered empty, and its bytes not counted (Kafka's throttled fetch).
//! - Request time: the time the agent spends running a request's handler
//!   (its future's polls, not its waits), in percent of one thread.
//! - Controller mutations (KIP-599): partitions created, added or deleted,
//!   in a token bucket of 11 seconds' worth, as Kafka's
//!   `ControllerMutationQuotaManager`: a topic asked for while the bucket is
//!   empty is refused with THROTTLING_QUOTA_EXCEEDED (requests from
//!   CreateTopics v6, CreatePartitions v3 and DeleteTopics v5 on; older
//!   ones are taken and throttled).
//!
//! A quota holds per agent, as Kafka's per broker. floe gives each client
//! one agent for all its partitions (chosen by client id and address, see
//! `handlers::metadata::leader`), so a client's produce and fetch quotas
//! hold across the cluster; a quota shared by clients that land on several
//! agents (a user's, or the default's) is granted on each of them.
//!
//! The quotas come from the metastore (AlterClientQuotas), copied every
//! [`REFRESH_EVERY`] at the latest (see [`crate::refresher`]); the rates are this agent's, kept for at most
//! [`MAX_SENSORS`] (user, client id) pairs.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use floe_metastore::Metastore;
use floe_metastore::quotas::{
    CONSUMER_BYTE_RATE, CONTROLLER_MUTATION_RATE, PRODUCER_BYTE_RATE, QuotaEntity, QuotaName,
    REQUEST_PERCENTAGE,
};

use crate::refresher::Refreshed;

/// How often the copy of the quotas is brought up to date.
pub const REFRESH_EVERY: Duration = Duration::from_secs(2);
/// Kafka's `quota.window.num` and `quota.window.size.seconds`.
const SAMPLES: usize = 11;
const SAMPLE_MS: i64 = 1_000;
/// Rates kept at most (each about 200 bytes: its key is a hash of the
/// client's names, whatever their length); when full, those idle for a
/// whole window are dropped, at most once a second, and then any one.
pub const MAX_SENSORS: usize = 50_000;
const SWEEP_EVERY_MS: i64 = 1_000;
/// Kafka's cap on request-time throttling (one quota window); byte-rate
/// throttles are not capped, as in Kafka.
const MAX_REQUEST_THROTTLE_MS: f64 = SAMPLE_MS as f64;

/// What a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Produce,
    Fetch,
    Request,
    ControllerMutation,
}

/// How many kinds there are.
const KINDS: usize = 4;

impl Kind {
    fn key(self) -> &'static str {
        match self {
            Kind::Produce => PRODUCER_BYTE_RATE,
            Kind::Fetch => CONSUMER_BYTE_RATE,
            Kind::Request => REQUEST_PERCENTAGE,
            Kind::ControllerMutation => CONTROLLER_MUTATION_RATE,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Kafka's windowed `Rate`: values summed in samples of [`SAMPLE_MS`], the
/// rate the sum over the samples' span, at least `SAMPLES - 1` of them (so
/// a first burst is not taken as a rate over a few milliseconds).
#[derive(Debug, Clone)]
struct Rate {
    /// Each sample's start and sum.
    samples: [(i64, f64); SAMPLES],
    current: usize,
}

impl Rate {
    fn new(now_ms: i64) -> Rate {
        Rate {
            samples: [(now_ms, 0.0); SAMPLES],
            current: 0,
        }
    }

    /// Samples too old to count start again, empty, now.
    fn purge(&mut self, now_ms: i64) {
        for sample in &mut self.samples {
            if now_ms - sample.0 >= SAMPLES as i64 * SAMPLE_MS {
                *sample = (now_ms, 0.0);
            }
        }
    }

    fn record(&mut self, value: f64, now_ms: i64) {
        self.purge(now_ms);
        if now_ms - self.samples[self.current].0 >= SAMPLE_MS {
            self.current = (self.current + 1) % SAMPLES;
            self.samples[self.current] = (now_ms, 0.0);
        }
        self.samples[self.current].1 += value;
    }

    /// The span the rate is taken over (Kafka's `Rate.windowSize`).
    fn window_ms(&self, now_ms: i64) -> i64 {
        let oldest = self.samples.iter().map(|s| s.0).min().unwrap_or(now_ms);
        let elapsed = (now_ms - oldest).max(0);
        let full = elapsed / SAMPLE_MS;
        let min_full = SAMPLES as i64 - 1;
        match full < min_full {
            true => elapsed + (min_full - full) * SAMPLE_MS,
            false => elapsed,
        }
    }

    /// Per second.
    fn measure(&mut self, now_ms: i64) -> f64 {
        self.purge(now_ms);
        let total: f64 = self.samples.iter().map(|s| s.1).sum();
        total * 1000.0 / self.window_ms(now_ms) as f64
    }

    fn idle_since(&self, now_ms: i64) -> bool {
        self.samples
            .iter()
            .all(|s| now_ms - s.0 >= SAMPLES as i64 * SAMPLE_MS || s.1 == 0.0)
    }
}

/// Which rate a client's requests count against: the tags Kafka gives it
/// (user and client id, each empty when the quota's entity leaves it out).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SensorKey {
    kind: Kind,
    user: String,
    client_id: String,
}

/// A [`SensorKey`] as the rates are kept by: its names hashed (with this
/// agent's random keys), so a long client id costs nothing more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct SensorId {
    kind: Kind,
    names: u64,
}

/// Kafka's `TokenBucket`: up to `SAMPLES` seconds' worth of permits,
/// refilled at the quota's rate, taken by each mutation (and allowed below
/// zero by the one that empties it).
#[derive(Debug, Clone)]
struct Bucket {
    tokens: f64,
    at_ms: i64,
    /// The quota it was last taken under (what refills it).
    quota: f64,
}

impl Bucket {
    fn burst(quota: f64) -> f64 {
        SAMPLES as f64 * SAMPLE_MS as f64 / 1000.0 * quota
    }

    fn refill(&mut self, quota: f64, now_ms: i64) {
        let refilled = quota * (now_ms - self.at_ms).max(0) as f64 / 1000.0;
        self.tokens = (self.tokens + refilled).min(Self::burst(quota));
        self.at_ms = now_ms;
        self.quota = quota;
    }

    /// Whether it would be full by now: forgetting it changes nothing.
    fn full_at(&self, now_ms: i64) -> bool {
        let refilled = self.quota * (now_ms - self.at_ms).max(0) as f64 / 1000.0;
        self.tokens + refilled >= Self::burst(self.quota)
    }

    /// How long until the bucket is no longer below zero.
    fn throttle_ms(&self, quota: f64) -> u32 {
        match self.tokens < 0.0 {
            true => (-self.tokens / quota * 1000.0)
                .round()
                .clamp(0.0, i32::MAX as f64) as u32,
            false => 0,
        }
    }
}

/// What a controller mutation quota made of a topic's mutation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// Done; the client waits this long (permissive requests past the quota).
    Taken { throttle_ms: u32 },
    /// Refused (THROTTLING_QUOTA_EXCEEDED): the bucket was empty.
    Refused { throttle_ms: u32 },
}

/// The rates, the buckets, and when idle ones were last dropped.
#[derive(Debug, Default)]
struct Sensors {
    rates: HashMap<SensorId, Rate>,
    buckets: HashMap<SensorId, Bucket>,
    swept_ms: i64,
    buckets_swept_ms: i64,
}

/// The quotas as last read: each entity's limits by kind.
#[derive(Debug, Default)]
struct Table {
    version: Option<u64>,
    limits: HashMap<QuotaEntity, [Option<f64>; KINDS]>,
}

impl Table {
    fn compile(version: u64, quotas: &BTreeMap<QuotaEntity, BTreeMap<String, String>>) -> Table {
        let limits = quotas
            .iter()
            .map(|(entity, set)| {
                let limit = |kind: Kind| {
                    set.get(kind.key())
                        .and_then(|v| v.trim().parse::<f64>().ok())
                };
                (
                    entity.clone(),
                    [
                        limit(Kind::Produce),
                        limit(Kind::Fetch),
                        limit(Kind::Request),
                        limit(Kind::ControllerMutation),
                    ],
                )
            })
            .collect();
        Table {
            version: Some(version),
            limits,
        }
    }

    /// The quota of `kind` for `user`'s `client_id` and the rate it counts
    /// against, in Kafka's order: the user's client id, the user's default
    /// client id, the user, the default user's client id, the default
    /// user's default client id, the default user, the client id, the
    /// default client id.
    fn quota(&self, kind: Kind, user: &str, client_id: &str) -> Option<(f64, SensorKey)> {
        if self.limits.is_empty() {
            return None;
        }
        let named = |n: &str| Some(QuotaName::Named(n.to_string()));
        let default = || Some(QuotaName::Default);
        let both = (user.to_string(), client_id.to_string());
        let user_only = (user.to_string(), String::new());
        let client_only = (String::new(), client_id.to_string());
        let levels = [
            (named(user), named(client_id), &both),
            (named(user), default(), &both),
            (named(user), None, &user_only),
            (default(), named(client_id), &both),
            (default(), default(), &both),
            (default(), None, &user_only),
            (None, named(client_id), &client_only),
            (None, default(), &client_only),
        ];
        levels.into_iter().find_map(|(user, client_id, tags)| {
            let limit = self.limits.get(&QuotaEntity { user, client_id })?[kind.index()]?;
            Some((
                limit,
                SensorKey {
                    kind,
                    user: tags.0.clone(),
                    client_id: tags.1.clone(),
                },
            ))
        })
    }
}

pub struct Quotas {
    table: RwLock<Arc<Table>>,
    /// Whether any entity sets a quota of each kind: read on every request,
    /// so a cluster without quotas pays an atomic load.
    set_kinds: [AtomicBool; KINDS],
    sensors: Mutex<Sensors>,
    hasher: RandomState,
    max_sensors: usize,
    /// The clock of the rates (this agent's own: how fast it serves a
    /// client is its own decision).
    started: tokio::time::Instant,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas::new(MAX_SENSORS)
    }
}

/// One request's client, as quotas see it: its principal and client id,
/// and its connection's mute. Made only while quotas are set.
#[derive(Clone)]
pub struct Client {
    quotas: Arc<Quotas>,
    principal: String,
    client_id: String,
    mute: Arc<Mute>,
}

impl Client {
    pub fn of(
        quotas: &Arc<Quotas>,
        principal: &str,
        client_id: &str,
        mute: &Arc<Mute>,
    ) -> Option<Client> {
        quotas.any().then(|| Client {
            quotas: quotas.clone(),
            principal: principal.to_string(),
            client_id: client_id.to_string(),
            mute: mute.clone(),
        })
    }

    /// Counts `value` against the client's quota of `kind` (taken back
    /// when over it, with `undo`); when over it, mutes the connection for
    /// the throttle time, which it answers.
    pub fn record(&self, kind: Kind, value: f64, undo: bool) -> u32 {
        let throttle = self
            .quotas
            .record(kind, &self.principal, &self.client_id, value, undo);
        self.mute.extend(throttle);
        throttle
    }

    /// Whether a quota of `kind` may apply (any entity sets one).
    pub fn enabled(&self, kind: Kind) -> bool {
        self.quotas.enabled(kind)
    }

    pub fn max_in_window(&self, kind: Kind) -> Option<f64> {
        self.quotas
            .max_in_window(kind, &self.principal, &self.client_id)
    }

    /// Whether a quota of `kind` applies to this client.
    pub fn has_quota(&self, kind: Kind) -> bool {
        self.quotas.enabled(kind)
            && self
                .quotas
                .table()
                .quota(kind, user_of(&self.principal), &self.client_id)
                .is_some()
    }

    /// Takes `permits` partitions from the client's controller mutation
    /// quota (see [`Quotas::mutate`]); a throttle mutes the connection.
    pub fn mutate(&self, permits: f64, strict: bool) -> Mutation {
        let done = self
            .quotas
            .mutate(&self.principal, &self.client_id, permits, strict);
        let (Mutation::Taken { throttle_ms } | Mutation::Refused { throttle_ms }) = done;
        self.mute.extend(throttle_ms);
        done
    }
}

/// A connection's throttle: until when it reads no more requests (Kafka
/// mutes a throttled client's channel). Shared by the connection and its
/// requests in flight, which extend it; read on every turn of the
/// connection's loop, so an atomic (milliseconds since [`epoch`], 0: not
/// muted).
#[derive(Debug, Default)]
pub struct Mute(AtomicU64);

/// The instant mute deadlines count from.
fn epoch() -> tokio::time::Instant {
    static EPOCH: OnceLock<tokio::time::Instant> = OnceLock::new();
    *EPOCH.get_or_init(tokio::time::Instant::now)
}

impl Mute {
    /// Reads nothing more for `ms` from now (or longer, if already muted).
    pub fn extend(&self, ms: u32) {
        if ms == 0 {
            return;
        }
        let until = epoch().elapsed().as_millis() as u64 + u64::from(ms) + 1;
        self.0.fetch_max(until, Ordering::Relaxed);
    }

    /// Until when reading waits, if it does.
    pub fn until(&self) -> Option<tokio::time::Instant> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            ms => {
                let until = epoch() + Duration::from_millis(ms);
                (until > tokio::time::Instant::now()).then_some(until)
            }
        }
    }
}

/// A future and the time spent in its polls (a request's handler time,
/// which the request quota counts: not the time it waits).
pub struct Timed<F> {
    inner: F,
    spent: Duration,
}

impl<F> Timed<F> {
    pub fn new(inner: F) -> Timed<F> {
        Timed {
            inner,
            spent: Duration::ZERO,
        }
    }
}

impl<F: std::future::Future + Unpin> std::future::Future for Timed<F> {
    type Output = (F::Output, Duration);

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let started = tokio::time::Instant::now();
        let polled = std::pin::Pin::new(&mut self.inner).poll(cx);
        self.spent += started.elapsed();
        polled.map(|out| (out, self.spent))
    }
}

/// The user a principal's quotas are set for (`User:alice`: `alice`).
pub fn user_of(principal: &str) -> &str {
    principal.strip_prefix("User:").unwrap_or(principal)
}

impl Quotas {
    pub fn new(max_sensors: usize) -> Quotas {
        Quotas {
            table: RwLock::default(),
            set_kinds: Default::default(),
            sensors: Mutex::default(),
            hasher: RandomState::new(),
            max_sensors,
            started: tokio::time::Instant::now(),
        }
    }

    fn now_ms(&self) -> i64 {
        self.started.elapsed().as_millis() as i64
    }

    fn table(&self) -> Arc<Table> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether any quota is set (none: nothing is measured).
    pub fn any(&self) -> bool {
        self.set_kinds.iter().any(|k| k.load(Ordering::Relaxed))
    }

    /// Whether any entity sets a quota of `kind`.
    pub fn enabled(&self, kind: Kind) -> bool {
        self.set_kinds[kind.index()].load(Ordering::Relaxed)
    }

    /// Takes the quotas the metastore holds (the refresher, and tests).
    pub fn set(&self, version: u64, quotas: &BTreeMap<QuotaEntity, BTreeMap<String, String>>) {
        let table = Table::compile(version, quotas);
        let mut held = self.table.write().unwrap_or_else(|p| p.into_inner());
        // Two refreshes may cross: never go back to an older copy.
        if held.version <= table.version {
            for (i, set) in self.set_kinds.iter().enumerate() {
                set.store(
                    table.limits.values().any(|l| l[i].is_some()),
                    Ordering::Relaxed,
                );
            }
            *held = Arc::new(table);
        }
    }
}

impl Refreshed for Quotas {
    const WHAT: &str = "client quotas";
    const EVERY: Duration = REFRESH_EVERY;

    fn held_version(&self) -> Option<u64> {
        self.table().version
    }

    fn pushed_version(versions: &floe_metastore::push::Versions) -> u64 {
        versions.configs
    }

    async fn refresh(&self, meta: &dyn Metastore) -> Result<(), floe_metastore::MetaError> {
        let known = self.table().version;
        let (version, quotas) = meta.client_quotas_if_changed(known).await?;
        if let Some(quotas) = quotas {
            self.set(version, &quotas);
        }
        Ok(())
    }
}

impl Quotas {
    /// Counts `value` against the client's quota of `kind`, and answers how
    /// long it must wait (0: within its quota, or none set). With `undo`, a
    /// value that goes over is taken back at once, under the same lock and
    /// clock (Kafka's throttled fetch, which is answered empty).
    pub fn record(
        &self,
        kind: Kind,
        principal: &str,
        client_id: &str,
        value: f64,
        undo: bool,
    ) -> u32 {
        if !self.enabled(kind) {
            return 0;
        }
        let Some((limit, key)) = self.table().quota(kind, user_of(principal), client_id) else {
            return 0;
        };
        let id = SensorId {
            kind,
            names: self.hasher.hash_one((&key.user, &key.client_id)),
        };
        let now_ms = self.now_ms();
        let mut sensors = self.sensors.lock().unwrap_or_else(|p| p.into_inner());
        if !sensors.rates.contains_key(&id) && sensors.rates.len() >= self.max_sensors {
            if now_ms - sensors.swept_ms >= SWEEP_EVERY_MS {
                sensors.swept_ms = now_ms;
                sensors.rates.retain(|_, rate| !rate.idle_since(now_ms));
            }
            if sensors.rates.len() >= self.max_sensors {
                // Full of busy clients: one is forgotten (it starts again
                // from nothing, as after an agent restart).
                let any = sensors.rates.keys().next().copied();
                if let Some(any) = any {
                    sensors.rates.remove(&any);
                }
            }
        }
        let rate = sensors.rates.entry(id).or_insert_with(|| Rate::new(now_ms));
        rate.record(value, now_ms);
        let measured = rate.measure(now_ms);
        if measured <= limit {
            return 0;
        }
        // Kafka's `QuotaUtils.throttleTime`: long enough for the rate over
        // the window to come back to the quota.
        let throttle = (measured - limit) / limit * rate.window_ms(now_ms) as f64;
        if undo {
            rate.record(-value, now_ms);
        }
        let throttle = match kind {
            Kind::Request => throttle.min(MAX_REQUEST_THROTTLE_MS),
            _ => throttle,
        };
        throttle.round().clamp(0.0, i32::MAX as f64) as u32
    }

    /// Takes `permits` (partitions created, added or deleted) from the
    /// client's controller mutation bucket, as Kafka's strict quota (newer
    /// requests: refused while the bucket is below zero, else taken even
    /// past it) or permissive one (older requests: always taken, throttled
    /// once below zero).
    pub fn mutate(&self, principal: &str, client_id: &str, permits: f64, strict: bool) -> Mutation {
        let kind = Kind::ControllerMutation;
        let taken = Mutation::Taken { throttle_ms: 0 };
        if !self.enabled(kind) {
            return taken;
        }
        let Some((quota, key)) = self.table().quota(kind, user_of(principal), client_id) else {
            return taken;
        };
        let id = SensorId {
            kind,
            names: self.hasher.hash_one((&key.user, &key.client_id)),
        };
        let now_ms = self.now_ms();
        let mut sensors = self.sensors.lock().unwrap_or_else(|p| p.into_inner());
        if !sensors.buckets.contains_key(&id) && sensors.buckets.len() >= self.max_sensors {
            // Buckets that would be full again are idle: they go first (at
            // most once a second), then any one.
            if now_ms - sensors.buckets_swept_ms >= SWEEP_EVERY_MS {
                sensors.buckets_swept_ms = now_ms;
                sensors.buckets.retain(|_, b| !b.full_at(now_ms));
            }
            let any = sensors.buckets.keys().next().copied();
            if let (true, Some(any)) = (sensors.buckets.len() >= self.max_sensors, any) {
                sensors.buckets.remove(&any);
            }
        }
        let bucket = sensors.buckets.entry(id).or_insert(Bucket {
            tokens: Bucket::burst(quota),
            at_ms: now_ms,
            quota,
        });
        bucket.refill(quota, now_ms);
        if strict && bucket.tokens < 0.0 {
            return Mutation::Refused {
                throttle_ms: bucket.throttle_ms(quota),
            };
        }
        bucket.tokens -= permits;
        Mutation::Taken {
            throttle_ms: match strict {
                true => 0,
                false => bucket.throttle_ms(quota),
            },
        }
    }

    /// The most one response may hold without being throttled whatever came
    /// before (Kafka's `getMaxValueInQuotaWindow`): fetches ask for no more,
    /// so a consumer under a small quota is not refused every fetch.
    pub fn max_in_window(&self, kind: Kind, principal: &str, client_id: &str) -> Option<f64> {
        if !self.enabled(kind) {
            return None;
        }
        let (limit, _) = self.table().quota(kind, user_of(principal), client_id)?;
        Some(limit * (SAMPLES as f64 - 1.0) * SAMPLE_MS as f64 / 1000.0)
    }

    #[cfg(test)]
    fn sensors(&self) -> usize {
        self.sensors.lock().unwrap().rates.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(user: Option<Option<&str>>, client_id: Option<Option<&str>>) -> QuotaEntity {
        let name = |n: Option<&str>| QuotaName::of(n);
        QuotaEntity {
            user: user.map(name),
            client_id: client_id.map(name),
        }
    }

    fn quotas(set: &[(QuotaEntity, &str, f64)]) -> Quotas {
        let mut table: BTreeMap<QuotaEntity, BTreeMap<String, String>> = BTreeMap::new();
        for (e, key, value) in set {
            table
                .entry(e.clone())
                .or_default()
                .insert(key.to_string(), value.to_string());
        }
        let q = Quotas::default();
        q.set(1, &table);
        q
    }

    /// Kafka's controller mutation quota: a token bucket of 11 s, taken
    /// past zero by the mutation that empties it; then strict requests are
    /// refused and permissive ones throttled until it refills.
    #[tokio::test(start_paused = true)]
    async fn mutations_take_from_a_token_bucket() {
        let q = quotas(&[(entity(None, Some(Some("m"))), CONTROLLER_MUTATION_RATE, 2.0)]);
        let mutate = |permits, strict| q.mutate("User:ANONYMOUS", "m", permits, strict);
        assert_eq!(mutate(30.0, true), Mutation::Taken { throttle_ms: 0 });
        // 22 - 30 = -8 tokens: 4 s at 2 a second.
        assert_eq!(mutate(1.0, true), Mutation::Refused { throttle_ms: 4000 });
        assert_eq!(mutate(2.0, false), Mutation::Taken { throttle_ms: 5000 });
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(mutate(1.0, true), Mutation::Taken { throttle_ms: 0 });
        // Another client id has no quota.
        let other = q.mutate("User:ANONYMOUS", "n", 1_000.0, true);
        assert_eq!(other, Mutation::Taken { throttle_ms: 0 });
    }

    /// Kafka's eight levels, most specific first; an entity counts only
    /// for the kinds it sets.
    #[test]
    fn the_most_specific_entity_that_sets_a_quota_wins() {
        let levels = [
            entity(Some(Some("alice")), Some(Some("app"))),
            entity(Some(Some("alice")), Some(None)),
            entity(Some(Some("alice")), None),
            entity(Some(None), Some(Some("app"))),
            entity(Some(None), Some(None)),
            entity(Some(None), None),
            entity(None, Some(Some("app"))),
            entity(None, Some(None)),
        ];
        for first in 0..levels.len() {
            let set: Vec<_> = levels[first..]
                .iter()
                .enumerate()
                .map(|(i, e)| (e.clone(), PRODUCER_BYTE_RATE, (first + i + 1) as f64))
                .collect();
            let q = quotas(&set);
            let (limit, key) = q.table().quota(Kind::Produce, "alice", "app").unwrap();
            assert_eq!(limit, (first + 1) as f64, "level {first}");
            let tags = (key.user.as_str(), key.client_id.as_str());
            let want = match first {
                2 | 5 => ("alice", ""),
                6 | 7 => ("", "app"),
                _ => ("alice", "app"),
            };
            assert_eq!(tags, want, "level {first}");
            assert!(q.table().quota(Kind::Fetch, "alice", "app").is_none());
        }
        // Another client of another user: only the defaults apply.
        let q = quotas(&[
            (levels[0].clone(), PRODUCER_BYTE_RATE, 1.0),
            (levels[7].clone(), PRODUCER_BYTE_RATE, 8.0),
        ]);
        assert_eq!(
            q.table().quota(Kind::Produce, "bob", "other").unwrap().0,
            8.0
        );
    }

    /// Kafka's rate: a first burst counts over ten seconds; the throttle is
    /// the time for the rate to come back to the quota.
    #[test]
    fn the_rate_and_the_throttle_are_kafkas() {
        let mut rate = Rate::new(0);
        rate.record(10_000.0, 0);
        assert_eq!(rate.window_ms(0), 10_000);
        assert_eq!(rate.measure(0), 1_000.0);
        // 2,000 bytes/s over 10 s against a 1,000 bytes/s quota: 10 s more.
        let q = quotas(&[(entity(None, Some(None)), PRODUCER_BYTE_RATE, 1_000.0)]);
        assert_eq!(
            q.record(Kind::Produce, "User:ANONYMOUS", "app", 10_000.0, false),
            0
        );
        let throttle = q.record(Kind::Produce, "User:ANONYMOUS", "app", 10_000.0, false);
        assert!((9_900..=10_000).contains(&throttle), "{throttle}");
        // Another client id has a rate of its own (the default client id's
        // quota is per client id).
        assert_eq!(
            q.record(Kind::Produce, "User:ANONYMOUS", "other", 10_000.0, false),
            0
        );
        // Samples older than the window no longer count.
        let mut rate = Rate::new(0);
        rate.record(10_000.0, 0);
        assert_eq!(rate.measure(11_000), 0.0);
        assert!(rate.idle_since(11_000));
    }

    #[test]
    fn request_throttles_are_capped_at_a_window() {
        let q = quotas(&[(entity(Some(None), None), REQUEST_PERCENTAGE, 1.0)]);
        // 500 percent-seconds: far over 1 %.
        assert_eq!(
            q.record(Kind::Request, "User:alice", "app", 500.0, false),
            SAMPLE_MS as u32
        );
    }

    #[test]
    fn an_unrecorded_fetch_does_not_count() {
        let q = quotas(&[(entity(None, Some(None)), CONSUMER_BYTE_RATE, 1_000.0)]);
        assert_eq!(q.record(Kind::Fetch, "", "app", 10_000.0, false), 0);
        // Over, and taken back: the next one of the same size is over too,
        // but nothing counts meanwhile.
        assert!(q.record(Kind::Fetch, "", "app", 10_000.0, true) > 0);
        assert!(q.record(Kind::Fetch, "", "app", 10_000.0, true) > 0);
        assert_eq!(q.record(Kind::Fetch, "", "app", 0.0, false), 0);
    }

    #[test]
    fn without_quotas_nothing_is_kept_and_sensors_are_bounded() {
        let q = Quotas::default();
        assert_eq!(q.record(Kind::Produce, "User:a", "c", 1e12, false), 0);
        assert_eq!(q.sensors(), 0);
        let mut table = BTreeMap::new();
        table.insert(
            entity(None, Some(None)),
            BTreeMap::from([(PRODUCER_BYTE_RATE.to_string(), "1000".to_string())]),
        );
        let q = Quotas::new(10);
        q.set(1, &table);
        for n in 0..100 {
            q.record(Kind::Produce, "", &format!("client-{n}"), 1.0, false);
            assert!(q.sensors() <= 10);
        }
        // An older copy never replaces a newer one.
        q.set(0, &BTreeMap::new());
        assert!(q.any());
    }
}
