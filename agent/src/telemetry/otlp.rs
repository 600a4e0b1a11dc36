//! The part of an OTLP `MetricsData` protobuf (opentelemetry-proto,
//! `metrics/v1`) that floe keeps from a client's push: each gauge's and
//! sum's data points, as (metric name, attributes, latest value).
//!
//! The bytes are walked field by field, borrowing, never decoded into
//! structs: a push is hostile input, and decoding into `Vec`s of messages
//! lets a few MiB of empty messages allocate hundreds. Only what is kept
//! allocates: at most `max_series` series, each with a name of at most
//! [`MAX_NAME_BYTES`] that the caller wants and attributes of at most
//! [`MAX_ATTRIBUTES_BYTES`]; anything longer is checked before it is copied.

/// One series of a push: a metric, its data point's attributes (`k=v`
/// pairs, sorted, comma-joined; empty without), and the point's value.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub name: String,
    pub attributes: String,
    pub value: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

/// A field's value by wire type (groups, deprecated, are refused).
enum Value<'a> {
    Varint(u64),
    Fixed64([u8; 8]),
    Bytes(&'a [u8]),
    Fixed32,
}

/// The fields of one message, in order.
struct Fields<'a> {
    buf: &'a [u8],
}

fn varint(buf: &mut &[u8]) -> Result<u64, Malformed> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = buf.split_first().ok_or(Malformed)?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(Malformed)
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8], Malformed> {
    if buf.len() < n {
        return Err(Malformed);
    }
    let (taken, rest) = buf.split_at(n);
    *buf = rest;
    Ok(taken)
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Value<'a>), Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        let field = (|| {
            let key = varint(&mut self.buf)?;
            let value = match key & 7 {
                0 => Value::Varint(varint(&mut self.buf)?),
                1 => Value::Fixed64(take(&mut self.buf, 8)?.try_into().map_err(|_| Malformed)?),
                2 => {
                    let len = usize::try_from(varint(&mut self.buf)?).map_err(|_| Malformed)?;
                    Value::Bytes(take(&mut self.buf, len)?)
                }
                5 => {
                    take(&mut self.buf, 4)?;
                    Value::Fixed32
                }
                _ => return Err(Malformed),
            };
            Ok((key >> 3, value))
        })();
        if field.is_err() {
            // Nothing after a malformed field can be read.
            self.buf = &[];
        }
        Some(field)
    }
}

fn fields(buf: &[u8]) -> Fields<'_> {
    Fields { buf }
}

/// The messages in field `number` of `buf`.
fn messages(buf: &[u8], number: u64) -> impl Iterator<Item = Result<&[u8], Malformed>> {
    fields(buf).filter_map(move |f| match f {
        Ok((n, Value::Bytes(b))) if n == number => Some(Ok(b)),
        Ok((n, _)) if n == number => Some(Err(Malformed)),
        Ok(_) => None,
        Err(e) => Some(Err(e)),
    })
}

fn text(bytes: &[u8]) -> Result<&str, Malformed> {
    std::str::from_utf8(bytes).map_err(|_| Malformed)
}

/// Attributes longer than this (joined) are dropped from a series, keeping
/// its name and value.
pub const MAX_ATTRIBUTES_BYTES: usize = 256;
/// Metrics with longer names are skipped.
pub const MAX_NAME_BYTES: usize = 256;

/// A data point's attributes (OTLP `KeyValue`s, field 7), as `k=v,...`
/// sorted; values that are not strings, bools or numbers are skipped. Past
/// [`MAX_ATTRIBUTES_BYTES`] none are kept, and nothing longer is copied.
fn attributes(point: &[u8]) -> Result<String, Malformed> {
    let mut pairs: Vec<String> = Vec::new();
    let mut bytes = 0;
    for kv in messages(point, 7) {
        let kv = kv?;
        let (mut key, mut value) = ("", None);
        for field in fields(kv) {
            match field? {
                (1, Value::Bytes(k)) => key = text(k)?,
                (2, Value::Bytes(any)) => value = any_value(any)?,
                _ => {}
            }
        }
        if let Some(value) = value {
            bytes += key.len() + value.len() + 2;
            if bytes > MAX_ATTRIBUTES_BYTES {
                return Ok(String::new());
            }
            pairs.push(format!("{key}={value}"));
        }
    }
    pairs.sort();
    Ok(pairs.join(","))
}

/// An OTLP `AnyValue` that is a string (1, borrowed), bool (2), int (3) or
/// double (4).
fn any_value(any: &[u8]) -> Result<Option<std::borrow::Cow<'_, str>>, Malformed> {
    use std::borrow::Cow;
    let mut value = None;
    for field in fields(any) {
        value = match field? {
            (1, Value::Bytes(s)) => Some(Cow::Borrowed(text(s)?)),
            (2, Value::Varint(b)) => Some(Cow::Owned((b != 0).to_string())),
            (3, Value::Varint(i)) => Some(Cow::Owned((i as i64).to_string())),
            (4, Value::Fixed64(d)) => Some(Cow::Owned(f64::from_le_bytes(d).to_string())),
            _ => continue,
        };
    }
    Ok(value)
}

/// A `NumberDataPoint`'s value: `as_double` (4) or `as_int` (6).
fn point_value(point: &[u8]) -> Result<Option<f64>, Malformed> {
    let mut value = None;
    for field in fields(point) {
        match field? {
            (4, Value::Fixed64(d)) => value = Some(f64::from_le_bytes(d)),
            (6, Value::Fixed64(i)) => value = Some(i64::from_le_bytes(i) as f64),
            _ => {}
        }
    }
    Ok(value)
}

/// Every gauge's and sum's data points in `data` (a `MetricsData`) whose
/// metric name is `wanted`, at most `max_series` of them.
pub fn points(
    data: &[u8],
    max_series: usize,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<Vec<Point>, Malformed> {
    let mut out: Vec<Point> = Vec::new();
    // MetricsData.resource_metrics (1) → ResourceMetrics.scope_metrics (2)
    // → ScopeMetrics.metrics (2) → Metric: name (1), gauge (5), sum (7).
    for resource in messages(data, 1) {
        for scope in messages(resource?, 2) {
            for metric in messages(scope?, 2) {
                let metric = metric?;
                // Twice over the metric: its name first, then its points
                // (nothing collected in between).
                let mut name = "";
                for field in fields(metric) {
                    if let (1, Value::Bytes(n)) = field? {
                        name = text(n)?;
                    }
                }
                if name.len() > MAX_NAME_BYTES || !wanted(name) {
                    continue;
                }
                // Gauge and Sum both hold their points in field 1.
                let holders = fields(metric).filter_map(|f| match f {
                    Ok((5 | 7, Value::Bytes(points))) => Some(points),
                    _ => None,
                });
                for holder in holders {
                    for point in messages(holder, 1) {
                        let point = point?;
                        let Some(value) = point_value(point)? else {
                            continue;
                        };
                        if out.len() >= max_series {
                            return Ok(out);
                        }
                        out.push(Point {
                            name: name.to_string(),
                            attributes: attributes(point)?,
                            value,
                        });
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Protobuf encoding, enough to build pushes in tests.
    pub fn key(number: u64, wire: u64) -> Vec<u8> {
        encode_varint(number << 3 | wire)
    }

    pub fn encode_varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return out;
            }
            out.push(byte | 0x80);
        }
    }

    pub fn bytes_field(number: u64, body: &[u8]) -> Vec<u8> {
        let mut out = key(number, 2);
        out.extend(encode_varint(body.len() as u64));
        out.extend_from_slice(body);
        out
    }

    /// A `MetricsData` with one gauge per (name, attribute, value).
    /// A gauge: its name, maybe one attribute, and its value.
    pub type Gauge<'a> = (&'a str, Option<(&'a str, &'a str)>, f64);

    pub fn metrics_data(series: &[Gauge]) -> Vec<u8> {
        let mut scope = Vec::new();
        for (name, attr, value) in series {
            let mut point = key(4, 1);
            point.extend(value.to_le_bytes());
            if let Some((k, v)) = attr {
                let any = bytes_field(1, v.as_bytes());
                let mut kv = bytes_field(1, k.as_bytes());
                kv.extend(bytes_field(2, &any));
                point.extend(bytes_field(7, &kv));
            }
            let gauge = bytes_field(1, &point);
            let mut metric = bytes_field(1, name.as_bytes());
            metric.extend(bytes_field(5, &gauge));
            scope.extend(bytes_field(2, &metric));
        }
        let resource = bytes_field(2, &scope);
        bytes_field(1, &resource)
    }

    #[test]
    fn reads_names_attributes_and_values() {
        let data = metrics_data(&[
            ("org.apache.kafka.producer.record.queue.time.avg", None, 1.5),
            (
                "org.apache.kafka.producer.node.request.latency.avg",
                Some(("node.id", "3")),
                7.0,
            ),
        ]);
        let got = points(&data, 100, &|_| true).unwrap();
        assert_eq!(
            got,
            vec![
                Point {
                    name: "org.apache.kafka.producer.record.queue.time.avg".into(),
                    attributes: String::new(),
                    value: 1.5
                },
                Point {
                    name: "org.apache.kafka.producer.node.request.latency.avg".into(),
                    attributes: "node.id=3".into(),
                    value: 7.0
                },
            ]
        );
        assert_eq!(points(&data, 1, &|_| true).unwrap().len(), 1);
    }

    #[test]
    fn int_points_and_sums() {
        let mut point = key(6, 1);
        point.extend(42i64.to_le_bytes());
        let sum = bytes_field(1, &point);
        let mut metric = bytes_field(1, b"org.apache.kafka.producer.record.send.total");
        metric.extend(bytes_field(7, &sum));
        let data = bytes_field(1, &bytes_field(2, &bytes_field(2, &metric)));
        assert_eq!(points(&data, 10, &|_| true).unwrap()[0].value, 42.0);
    }

    /// Truncated, mistyped or overlong input is refused, never read past.
    #[test]
    fn malformed_input_is_refused() {
        let data = metrics_data(&[("m", None, 1.0)]);
        for cut in 1..data.len() {
            assert!(points(&data[..cut], 10, &|_| true).is_err(), "cut at {cut}");
        }
        // A length past the end.
        let mut lying = key(1, 2);
        lying.extend(encode_varint(u64::MAX));
        assert_eq!(points(&lying, 10, &|_| true), Err(Malformed));
        // A start-group wire type.
        assert_eq!(points(&key(1, 3), 10, &|_| true), Err(Malformed));
        // A varint of eleven bytes.
        assert_eq!(points(&[0x80; 11], 10, &|_| true), Err(Malformed));
        // Field 1 that is not a message.
        assert_eq!(points(&[0x08, 0x01], 10, &|_| true), Err(Malformed));
    }

    /// A hostile push: a name of megabytes on thousands of points, and
    /// names nobody asked for, are skipped before anything is copied.
    #[test]
    fn long_and_unwanted_names_are_skipped() {
        let long = "x".repeat(4 << 20);
        let mut points_of_long = Vec::new();
        for _ in 0..2000 {
            let mut point = key(4, 1);
            point.extend(1.0f64.to_le_bytes());
            points_of_long.extend(bytes_field(1, &point));
        }
        let mut metric = bytes_field(1, long.as_bytes());
        metric.extend(bytes_field(5, &points_of_long));
        let data = bytes_field(1, &bytes_field(2, &bytes_field(2, &metric)));
        assert!(points(&data, 10_000, &|_| true).unwrap().is_empty());

        let data = metrics_data(&[("a.x", None, 1.0), ("b.y", None, 2.0)]);
        let got = points(&data, 10, &|n| n.starts_with("b.")).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].name, "b.y");

        // An attribute value of megabytes: the series is kept without it.
        let mut point = key(4, 1);
        point.extend(3.0f64.to_le_bytes());
        let any = bytes_field(1, long.as_bytes());
        let mut kv = bytes_field(1, b"k");
        kv.extend(bytes_field(2, &any));
        point.extend(bytes_field(7, &kv));
        let mut metric = bytes_field(1, b"m");
        metric.extend(bytes_field(5, &bytes_field(1, &point)));
        let data = bytes_field(1, &bytes_field(2, &bytes_field(2, &metric)));
        let got = points(&data, 10, &|_| true).unwrap();
        assert_eq!((got[0].attributes.as_str(), got[0].value), ("", 3.0));
    }

    /// Megabytes of empty metrics read without error, and nothing is kept
    /// for them (the walk collects nothing per metric: see `points`).
    #[test]
    fn empty_metrics_cost_nothing() {
        let empty_metric = bytes_field(2, &[]);
        let scope: Vec<u8> = empty_metric.iter().copied().cycle().take(4 << 20).collect();
        let data = bytes_field(1, &bytes_field(2, &scope));
        assert!(points(&data, 1000, &|_| true).unwrap().is_empty());
    }
}
