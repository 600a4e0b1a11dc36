//! floe's object layer.
//!
//! - [`store`]: an `object_store` from a URL (`file://`, `memory://`).
//! - [`check`]: the start-up check that a store can be used, in an operator's words.
//! - [`conformance`]: every call floe makes of a store, checked (`floe check-store`).
//! - [`ids`]: where fresh ids for keys come from (random, or seeded in the simulation).
//! - [`keys`]: where each kind of object lives in the bucket.
//! - [`hooked`]: an object-store wrapper with hooks around each request.
//! - [`faults`]: hooks injecting errors and latency, for tests.
//! - [`http_faults`]: S3's bad days (SlowDown, resets, slow requests) injected beneath its client.
//! - [`synced`]: a hook making local-folder puts durable (fsync) before they return.
//! - [`sized`]: ranged reads that name their object's size, so a cache can answer them.
//! - [`segment_index`]: the offset index of version-2 segments.
//! - [`ingest`]: the ingest-file format shared by ingest and segment objects
//!   (see `docs/ingest-format.md`).

pub mod check;
pub mod conformance;
pub mod faults;
pub mod hooked;
pub mod http_faults;
pub mod ids;
pub mod ingest;
pub mod keys;
pub mod segment_index;
pub mod sized;
pub mod store;
pub mod synced;

pub use object_store::{ObjectStore, path::Path as ObjectPath};
