//! Share groups' configs (KIP-932) with Kafka 4.2's names, defaults and
//! bounds: a group's own (`share.*`, Kafka's `GroupConfig`) and the
//! cluster's (`group.share.*`, Kafka's broker configs, dynamic here as
//! `offsets.retention.minutes` is). The state resolves them for each
//! operation ([`ShareSettings`]), so every agent works under the same rules.

use std::collections::BTreeMap;

use crate::contract::shares::StartFrom;

pub const SHARE_SESSION_TIMEOUT_MS: &str = "share.session.timeout.ms";
pub const SHARE_HEARTBEAT_INTERVAL_MS: &str = "share.heartbeat.interval.ms";
pub const SHARE_RECORD_LOCK_DURATION_MS: &str = "share.record.lock.duration.ms";
pub const SHARE_AUTO_OFFSET_RESET: &str = "share.auto.offset.reset";
pub const SHARE_ISOLATION_LEVEL: &str = "share.isolation.level";

pub const GROUP_SHARE_DELIVERY_COUNT_LIMIT: &str = "group.share.delivery.count.limit";
pub const GROUP_SHARE_PARTITION_MAX_RECORD_LOCKS: &str = "group.share.partition.max.record.locks";
pub const GROUP_SHARE_RECORD_LOCK_DURATION_MS: &str = "group.share.record.lock.duration.ms";
pub const GROUP_SHARE_MIN_RECORD_LOCK_DURATION_MS: &str = "group.share.min.record.lock.duration.ms";
pub const GROUP_SHARE_MAX_RECORD_LOCK_DURATION_MS: &str = "group.share.max.record.lock.duration.ms";
pub const GROUP_SHARE_MAX_SIZE: &str = "group.share.max.size";
pub const GROUP_SHARE_SESSION_TIMEOUT_MS: &str = "group.share.session.timeout.ms";
pub const GROUP_SHARE_HEARTBEAT_INTERVAL_MS: &str = "group.share.heartbeat.interval.ms";

/// A group's integer configs: the range Kafka checks, and the cluster
/// config whose value is the default.
pub const GROUP_INTS: [(&str, i64, i64, &str); 3] = [
    (
        SHARE_SESSION_TIMEOUT_MS,
        45_000,
        60_000,
        GROUP_SHARE_SESSION_TIMEOUT_MS,
    ),
    (
        SHARE_HEARTBEAT_INTERVAL_MS,
        5_000,
        15_000,
        GROUP_SHARE_HEARTBEAT_INTERVAL_MS,
    ),
    (
        SHARE_RECORD_LOCK_DURATION_MS,
        1_000,
        3_600_000,
        GROUP_SHARE_RECORD_LOCK_DURATION_MS,
    ),
];

/// The cluster's integer configs: Kafka's default and range.
pub const CLUSTER_INTS: [(&str, i64, i64, i64); 8] = [
    (GROUP_SHARE_DELIVERY_COUNT_LIMIT, 5, 2, 10),
    (GROUP_SHARE_PARTITION_MAX_RECORD_LOCKS, 2_000, 100, 10_000),
    (
        GROUP_SHARE_RECORD_LOCK_DURATION_MS,
        30_000,
        1_000,
        3_600_000,
    ),
    (
        GROUP_SHARE_MIN_RECORD_LOCK_DURATION_MS,
        15_000,
        1_000,
        30_000,
    ),
    (
        GROUP_SHARE_MAX_RECORD_LOCK_DURATION_MS,
        60_000,
        30_000,
        3_600_000,
    ),
    (GROUP_SHARE_MAX_SIZE, 200, 1, 1_000),
    (GROUP_SHARE_SESSION_TIMEOUT_MS, 45_000, 45_000, 60_000),
    (GROUP_SHARE_HEARTBEAT_INTERVAL_MS, 5_000, 5_000, 15_000),
];

/// The range of a share config's integer value on a group (`group`) or the
/// cluster, if it is one.
pub fn int_bounds(group: bool, key: &str) -> Option<(i64, i64)> {
    match group {
        true => GROUP_INTS
            .iter()
            .find(|(k, ..)| *k == key)
            .map(|&(_, min, max, _)| (min, max)),
        false => CLUSTER_INTS
            .iter()
            .find(|(k, ..)| *k == key)
            .map(|&(_, _, min, max)| (min, max)),
    }
}

/// Kafka's default of a cluster share config.
pub fn cluster_default(key: &str) -> Option<i64> {
    CLUSTER_INTS
        .iter()
        .find(|(k, ..)| *k == key)
        .map(|&(_, default, ..)| default)
}

/// Whether a group's string share config takes `value` (`None`: not one
/// of them), with Kafka's message.
pub fn check_group_string(key: &str, value: &str) -> Option<Result<(), String>> {
    let invalid = |why: &str| {
        Err(format!(
            "Invalid value {value} for configuration {key}: {why}"
        ))
    };
    match key {
        SHARE_AUTO_OFFSET_RESET => Some(match parse_start_from(value) {
            Some(_) => Ok(()),
            None => invalid("must be earliest, latest or by_duration:<ISO-8601 duration>"),
        }),
        SHARE_ISOLATION_LEVEL => Some(match value.trim() {
            "read_committed" | "read_uncommitted" => Ok(()),
            _ => invalid("String must be one of: read_committed, read_uncommitted"),
        }),
        _ => None,
    }
}

/// Checks across a group's share configs (Kafka's `GroupConfig.validateValues`).
pub fn check_group(configs: &BTreeMap<String, String>) -> Result<(), String> {
    let int = |key: &str| configs.get(key).and_then(|v| v.trim().parse::<i64>().ok());
    if let (Some(session), Some(interval)) = (
        int(SHARE_SESSION_TIMEOUT_MS),
        int(SHARE_HEARTBEAT_INTERVAL_MS),
    ) && session <= interval
    {
        return Err(format!(
            "{SHARE_SESSION_TIMEOUT_MS} must be greater than {SHARE_HEARTBEAT_INTERVAL_MS}"
        ));
    }
    Ok(())
}

/// `share.auto.offset.reset`: `earliest`, `latest` or
/// `by_duration:PnDTnHnMn.nS` (ISO-8601, Java's `Duration.parse`; no
/// negative durations).
pub fn parse_start_from(value: &str) -> Option<StartFrom> {
    match value.trim().to_ascii_lowercase().as_str() {
        "earliest" => Some(StartFrom::Earliest),
        "latest" => Some(StartFrom::Latest),
        other => {
            let iso = other.strip_prefix("by_duration:")?;
            iso_duration_ms(iso.trim()).map(StartFrom::Ago)
        }
    }
}

/// An ISO-8601 duration as Java's `Duration.parse` takes it (`PnDTnHnMn.nS`,
/// case-insensitive), in milliseconds; none negative, none past `i64`.
fn iso_duration_ms(text: &str) -> Option<i64> {
    let rest = text.strip_prefix('p')?;
    let (days, time) = match rest.split_once('t') {
        Some((days, time)) => (days, Some(time)),
        None => (rest, None),
    };
    let mut ms: i64 = 0;
    let mut any = false;
    if !days.is_empty() {
        let n: i64 = days.strip_suffix('d')?.parse().ok()?;
        ms = ms.checked_add(n.checked_mul(86_400_000)?)?;
        any = true;
    }
    if let Some(mut time) = time {
        if time.is_empty() {
            return None;
        }
        for (unit, scale) in [('h', 3_600_000.0), ('m', 60_000.0), ('s', 1_000.0)] {
            if let Some(at) = time.find(unit) {
                let n: f64 = time[..at].parse().ok()?;
                if !n.is_finite() {
                    return None;
                }
                ms = ms.checked_add((n * scale) as i64)?;
                time = &time[at + 1..];
                any = true;
            }
        }
        if !time.is_empty() {
            return None;
        }
    }
    (any && ms >= 0).then_some(ms)
}

/// Whether a share group reads committed records only.
pub fn read_committed(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.trim() == "read_committed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_offset_reset_takes_kafka_s_values() {
        assert_eq!(parse_start_from("earliest"), Some(StartFrom::Earliest));
        assert_eq!(parse_start_from(" LATEST "), Some(StartFrom::Latest));
        assert_eq!(
            parse_start_from("by_duration:PT1H30M"),
            Some(StartFrom::Ago(5_400_000))
        );
        assert_eq!(
            parse_start_from("by_duration:P2DT0.5S"),
            Some(StartFrom::Ago(172_800_500))
        );
        for bad in [
            "",
            "none",
            "by_duration:",
            "by_duration:P",
            "by_duration:PT",
            "by_duration:PT-1S",
            "by_duration:1H",
            "by_duration:PT1X",
            "by_duration:P99999999999999999D",
        ] {
            assert_eq!(parse_start_from(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_session_must_outlast_its_heartbeat() {
        let configs = |s: &str, h: &str| {
            BTreeMap::from([
                (SHARE_SESSION_TIMEOUT_MS.to_string(), s.to_string()),
                (SHARE_HEARTBEAT_INTERVAL_MS.to_string(), h.to_string()),
            ])
        };
        assert!(check_group(&configs("45000", "5000")).is_ok());
        assert!(check_group(&configs("45000", "45000")).is_err());
    }
}
