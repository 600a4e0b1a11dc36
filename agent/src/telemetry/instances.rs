//! The client instances that pushed metrics to this agent: when each last
//! asked and pushed (Kafka's throttling), whether it said it was
//! terminating, and the latest value of each of its series.
//!
//! Everything is bounded: instances, series and bytes per instance, and the
//! bytes of all of them, counted as they render at `/client-metrics` (so a
//! scrape is bounded too). When the instances or the bytes run out, the
//! instance closest to expiry is forgotten: one client cannot keep the
//! others out. An instance not heard from for three push intervals (at
//! least a minute, Kafka's cache expiry) is forgotten.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use uuid::Uuid;

use super::otlp::Point;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub instances: usize,
    pub stored_bytes: usize,
    pub series_per_instance: usize,
    pub bytes_per_instance: usize,
}

/// Kafka's `ClientMetricsManager` cache size (and its expiry below); the
/// byte bounds are floe's.
pub const LIMITS: Limits = Limits {
    instances: 16_384,
    stored_bytes: 32 << 20,
    series_per_instance: 1_000,
    bytes_per_instance: 512 << 10,
};
const MIN_EXPIRY_MS: i64 = 60_000;
/// Client ids and software names and versions are kept to this many bytes.
pub const MAX_LABEL_BYTES: usize = 256;

/// Who an instance is, as shown with its metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    pub client_id: String,
    pub software_name: String,
    pub software_version: String,
}

impl Identity {
    pub fn new(client_id: &str, software_name: &str, software_version: &str) -> Identity {
        Identity {
            client_id: truncated(client_id),
            software_name: truncated(software_name),
            software_version: truncated(software_version),
        }
    }

    /// As rendered (escaping at most doubles a label).
    fn cost(&self) -> usize {
        2 * (self.client_id.len() + self.software_name.len() + self.software_version.len())
    }
}

fn truncated(s: &str) -> String {
    let mut end = s.len().min(MAX_LABEL_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// A series: the metric's name and its attributes.
type Series = (String, String);

/// A series' line as rendered: its name and attributes (escaping at most
/// doubles them), the instance id and the value.
fn series_cost((name, attributes): &Series) -> usize {
    2 * (name.len() + attributes.len()) + 128
}

/// An instance as shown: its id, who it is, and its series' values.
pub type Shown = (Uuid, Identity, Vec<(Series, f64)>);

/// What an instance costs besides its series (its info line, with the
/// identity's cost).
const INSTANCE_COST: usize = 256;

#[derive(Debug)]
struct Instance {
    identity: Identity,
    last_get_ms: Option<i64>,
    last_push_ms: Option<i64>,
    terminating: bool,
    deadline_ms: i64,
    series: BTreeMap<Series, f64>,
    cost: usize,
}

/// Why a push is refused before its metrics are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// It pushed with `terminating` already (INVALID_REQUEST).
    Terminated,
    /// Sooner than its interval after its last push (THROTTLING_QUOTA_EXCEEDED).
    Throttled,
}

/// Every instance heard from.
#[derive(Debug)]
pub struct Instances {
    limits: Limits,
    by_id: HashMap<Uuid, Instance>,
    by_deadline: BTreeSet<(i64, Uuid)>,
    stored: usize,
}

impl Instances {
    pub fn new(limits: Limits) -> Instances {
        Instances {
            limits,
            by_id: HashMap::new(),
            by_deadline: BTreeSet::new(),
            stored: 0,
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    #[cfg(test)]
    pub fn stored_bytes(&self) -> usize {
        self.stored
    }

    /// A GetTelemetrySubscriptions from `id`: lets its next push come at
    /// once (the client jitters its first push). Nothing is stored for an
    /// instance not known yet: only pushes take memory.
    pub fn asked(&mut self, id: Uuid, now_ms: i64) {
        if let Some(instance) = self.by_id.get_mut(&id) {
            instance.last_get_ms = Some(now_ms);
        }
    }

    /// Kafka's checks of a push that need the instance's past: refused
    /// after a terminating push, or sooner than `interval_ms` after the
    /// last push unless the client asked for its subscription since (or is
    /// terminating). Passing them counts as a push (and a terminating one
    /// ends the instance) whatever the later checks say, as in Kafka. An
    /// unknown instance passes, and is kept only if its push is accepted.
    pub fn admit_push(
        &mut self,
        id: Uuid,
        now_ms: i64,
        interval_ms: i32,
        terminating: bool,
    ) -> Result<(), Refused> {
        let Some(instance) = self.by_id.get_mut(&id) else {
            return Ok(());
        };
        if instance.terminating {
            return Err(Refused::Terminated);
        }
        let asked_since = match (instance.last_get_ms, instance.last_push_ms) {
            (Some(get), Some(push)) => get >= push,
            (_, None) => true,
            (None, Some(_)) => false,
        };
        let waited = instance
            .last_push_ms
            .is_none_or(|at| now_ms - at >= i64::from(interval_ms));
        if !(asked_since || waited || terminating) {
            return Err(Refused::Throttled);
        }
        instance.last_push_ms = Some(now_ms);
        instance.terminating |= terminating;
        Ok(())
    }
    /// Records an accepted push and its points: a series already kept
    /// takes its new value; new ones are kept within the instance's bounds,
    /// room being made in the whole by forgetting the instances closest to
    /// expiry.
    pub fn pushed(
        &mut self,
        id: Uuid,
        identity: Identity,
        now_ms: i64,
        interval_ms: i32,
        terminating: bool,
        points: Vec<Point>,
    ) {
        self.expire(now_ms);
        let deadline_ms = now_ms + (3 * i64::from(interval_ms)).max(MIN_EXPIRY_MS);
        if !self.by_id.contains_key(&id) {
            while self.by_id.len() >= self.limits.instances {
                let Some(&(_, oldest)) = self.by_deadline.first() else {
                    break;
                };
                self.remove(oldest);
            }
            // The identity's cost is added below, as for a known instance.
            self.stored += INSTANCE_COST;
            self.by_id.insert(
                id,
                Instance {
                    identity: Identity::default(),
                    last_get_ms: None,
                    last_push_ms: None,
                    terminating: false,
                    deadline_ms,
                    series: BTreeMap::new(),
                    cost: INSTANCE_COST,
                },
            );
            self.by_deadline.insert((deadline_ms, id));
        }
        let limits = self.limits;
        let Some(instance) = self.by_id.get_mut(&id) else {
            return;
        };
        self.by_deadline.remove(&(instance.deadline_ms, id));
        self.by_deadline.insert((deadline_ms, id));
        instance.deadline_ms = deadline_ms;
        self.stored = self.stored - instance.identity.cost() + identity.cost();
        instance.cost = instance.cost - instance.identity.cost() + identity.cost();
        instance.identity = identity;
        instance.last_push_ms = Some(now_ms);
        instance.terminating |= terminating;
        let mut new = Vec::new();
        let (mut count, mut cost) = (instance.series.len(), instance.cost);
        for point in points {
            let series = (point.name, point.attributes);
            if let Some(kept) = instance.series.get_mut(&series) {
                *kept = point.value;
                continue;
            }
            let more = series_cost(&series);
            if count < limits.series_per_instance && cost + more <= limits.bytes_per_instance {
                count += 1;
                cost += more;
                new.push((series, point.value, more));
            }
        }
        let needed: usize = new.iter().map(|(_, _, c)| c).sum();
        while self.stored + needed > limits.stored_bytes {
            let Some(&(_, oldest)) = self.by_deadline.iter().find(|(_, other)| *other != id) else {
                break;
            };
            self.remove(oldest);
        }
        let Some(instance) = self.by_id.get_mut(&id) else {
            return;
        };
        for (series, value, more) in new {
            if self.stored + more > limits.stored_bytes {
                break;
            }
            self.stored += more;
            instance.cost += more;
            instance.series.insert(series, value);
        }
    }

    fn remove(&mut self, id: Uuid) {
        if let Some(instance) = self.by_id.remove(&id) {
            self.by_deadline.remove(&(instance.deadline_ms, id));
            self.stored -= instance.cost;
        }
    }

    /// Forgets the instances past their deadline.
    pub fn expire(&mut self, now_ms: i64) {
        while let Some(&(deadline, id)) = self.by_deadline.first() {
            if deadline > now_ms {
                break;
            }
            self.remove(id);
        }
    }

    /// A copy of every instance's series, to render without the lock.
    pub fn snapshot(&self) -> Vec<Shown> {
        self.by_id
            .iter()
            .map(|(id, i)| {
                let series = i.series.iter().map(|(s, v)| (s.clone(), *v)).collect();
                (*id, i.identity.clone(), series)
            })
            .collect()
    }

    /// Checks the byte count and the deadline index (tests).
    #[cfg(test)]
    fn check_invariants(&self) {
        let counted: usize = self.by_id.values().map(|i| i.cost).sum();
        assert_eq!(counted, self.stored);
        for i in self.by_id.values() {
            let series: usize = i.series.keys().map(series_cost).sum();
            assert_eq!(i.cost, INSTANCE_COST + i.identity.cost() + series);
            assert!(i.series.len() <= self.limits.series_per_instance);
        }
        assert_eq!(self.by_deadline.len(), self.by_id.len());
        for (deadline, id) in &self.by_deadline {
            assert_eq!(self.by_id[id].deadline_ms, *deadline);
        }
        assert!(self.by_id.len() <= self.limits.instances);
        assert!(
            self.stored
                <= self.limits.stored_bytes
                    + self.limits.instances * (INSTANCE_COST + 3 * MAX_LABEL_BYTES)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(name: &str, value: f64) -> Point {
        Point {
            name: name.into(),
            attributes: String::new(),
            value,
        }
    }

    fn who() -> Identity {
        Identity::new("app", "librdkafka", "2.16.0")
    }

    /// Kafka's throttling: a push comes a whole interval after the last,
    /// or right after the client asked again; terminating is never
    /// throttled, and nothing is accepted after it.
    #[test]
    fn throttling_and_terminating() {
        let mut m = Instances::new(LIMITS);
        let id = Uuid::from_u128(1);
        assert_eq!(m.admit_push(id, 0, 1000, false), Ok(()));
        m.pushed(id, who(), 0, 1000, false, vec![point("a", 1.0)]);
        assert_eq!(m.admit_push(id, 999, 1000, false), Err(Refused::Throttled));
        assert_eq!(m.admit_push(id, 1000, 1000, false), Ok(()));
        // Passing the checks counted as a push, accepted or not.
        assert_eq!(m.admit_push(id, 1001, 1000, false), Err(Refused::Throttled));
        m.asked(id, 1010);
        assert_eq!(m.admit_push(id, 1011, 1000, false), Ok(()));
        m.pushed(id, who(), 1011, 1000, false, vec![point("a", 2.0)]);
        assert_eq!(m.admit_push(id, 1012, 1000, false), Err(Refused::Throttled));
        assert_eq!(m.admit_push(id, 1012, 1000, true), Ok(()));
        m.pushed(id, who(), 1012, 1000, true, vec![point("a", 3.0)]);
        assert_eq!(
            m.admit_push(id, 5000, 1000, false),
            Err(Refused::Terminated)
        );
        let snap = m.snapshot();
        assert_eq!(snap[0].2, vec![(("a".to_string(), String::new()), 3.0)]);
        // Asking creates nothing.
        m.asked(Uuid::from_u128(2), 0);
        assert_eq!(m.len(), 1);
        m.check_invariants();
    }

    #[test]
    fn instances_series_and_bytes_are_bounded() {
        let limits = Limits {
            instances: 3,
            stored_bytes: 20_000,
            series_per_instance: 5,
            bytes_per_instance: 4_000,
        };
        let mut m = Instances::new(limits);
        for n in 0..10u128 {
            let points = (0..20)
                .map(|k| point(&format!("metric.{k}"), k as f64))
                .collect();
            m.pushed(Uuid::from_u128(n), who(), n as i64, 1000, false, points);
            m.check_invariants();
        }
        assert_eq!(m.len(), 3);
        // The newest three, each with at most five series.
        let mut ids: Vec<u128> = m.snapshot().iter().map(|(id, _, _)| id.as_u128()).collect();
        ids.sort();
        assert_eq!(ids, vec![7, 8, 9]);
        assert!(m.snapshot().iter().all(|(_, _, s)| s.len() == 5));

        // Long names run into the instance's byte bound, not past it.
        let mut m = Instances::new(limits);
        let long: Vec<Point> = (0..5)
            .map(|k| point(&format!("{k}{}", "x".repeat(1000)), 0.0))
            .collect();
        m.pushed(Uuid::from_u128(1), who(), 0, 1000, false, long);
        m.check_invariants();
        assert_eq!(m.snapshot()[0].2.len(), 1);

        // Instances that filled the whole make room for a newcomer: the
        // one closest to expiry goes.
        let limits = Limits {
            instances: 100,
            stored_bytes: 10_000,
            series_per_instance: 100,
            bytes_per_instance: 4_000,
        };
        let mut m = Instances::new(limits);
        let many = |n: usize| -> Vec<Point> {
            (0..n).map(|k| point(&format!("metric.{k}"), 1.0)).collect()
        };
        for n in 0..5u128 {
            m.pushed(Uuid::from_u128(n), who(), n as i64, 1000, false, many(20));
            m.check_invariants();
            assert!(m.stored_bytes() <= limits.stored_bytes);
        }
        let kept = |m: &Instances, id: u128| {
            m.snapshot()
                .iter()
                .find(|(i, _, _)| i.as_u128() == id)
                .map(|(_, _, s)| s.len())
        };
        assert!(kept(&m, 4).unwrap() > 0, "the newest pusher is kept");
        assert_eq!(kept(&m, 0), None, "the oldest made room");
    }

    #[test]
    fn silent_instances_expire() {
        let mut m = Instances::new(LIMITS);
        m.pushed(
            Uuid::from_u128(1),
            who(),
            0,
            1000,
            false,
            vec![point("a", 1.0)],
        );
        m.pushed(
            Uuid::from_u128(2),
            who(),
            0,
            100_000,
            false,
            vec![point("a", 1.0)],
        );
        m.expire(MIN_EXPIRY_MS);
        assert_eq!(m.len(), 1, "a minute at least, three intervals when longer");
        m.expire(300_000);
        assert!(m.is_empty());
        assert_eq!(m.stored_bytes(), 0);
        m.check_invariants();
    }

    #[test]
    fn labels_are_truncated_on_a_char_boundary() {
        let id = Identity::new(&"é".repeat(200), "", "");
        assert!(id.client_id.len() <= MAX_LABEL_BYTES);
        assert!(id.client_id.chars().all(|c| c == 'é'));
    }
}
