//! The block cache over object storage: the cache docs/architecture.md describes.
//!
//! - Reads of any byte range are served from whole aligned blocks (4 MiB by
//!   default). Each block is loaded at most once at a time however many
//!   readers want it (foyer's single-flight `get_or_fetch`), and objects an
//!   agent just uploaded are put in the cache directly, so consumers tailing
//!   a topic never wait on a GET.
//! - Blocks of the tail live in foyer's hybrid cache: memory, and a local
//!   disk tier when one is configured. Catch-up reads (far behind the tail)
//!   get a small memory pool of their own, so a consumer replaying a topic
//!   does not evict the blocks every tailing consumer reads.
//! - The agents of a zone form a ring (see [`ring`]): a block missing here
//!   is asked of the agent that owns it, which loads it once for the zone;
//!   when the owner is down or slow the block is read from the object store.
//!   An owner serves from its own cache and the object store only, never
//!   asking further, so a disagreement about owners cannot loop.

pub mod key;
pub mod peer;
pub mod ring;
pub mod server;

use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use foyer::{
    BlockEngineConfig, Cache, CacheBuilder, DeviceBuilder, FsDeviceBuilder, HybridCache,
    HybridCacheBuilder, Load, RecoverMode,
};
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore};
use tokio::sync::Semaphore;

pub use key::BlockKey;
use peer::PeerClient;
pub use ring::{Member, Ring};

/// Default block size: large enough that a GET costs little per byte.
pub const DEFAULT_BLOCK_BYTES: u64 = 4 * 1024 * 1024;

/// Blocks served to peers at once; more are refused (the asker reads the
/// object store instead), so peers cannot queue unbounded work here.
const MAX_SERVING: usize = 64;

/// Longest an owner works on a peer's block, whatever the peer asks.
const MAX_SERVE_WITHIN: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("range {start}..{end} is outside object `{key}` of {size} bytes")]
    OutOfBounds {
        key: String,
        start: u64,
        end: u64,
        size: u64,
    },
    #[error("loading `{key}` block {block} failed: {reason}")]
    Load {
        key: String,
        block: u64,
        reason: String,
    },
    #[error("serving {0} blocks to peers already")]
    Busy(usize),
    #[error("not loaded within the {0:?} the peer allowed")]
    Slow(Duration),
    #[error("a peer asked with blocks of {asked} bytes; this agent's are {ours}")]
    BlockSize { asked: u64, ours: u64 },
    #[error("the disk tier at {dir}: {reason}")]
    Disk { dir: String, reason: String },
}

/// Which pool a read belongs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Near the end of a partition: kept in the main (hybrid) pool.
    Tail,
    /// Far behind the end: served from the main pool if there, else kept
    /// only in the small catch-up pool.
    CatchUp,
    /// Far behind the end, in an object many partitions share (an ingest
    /// or merged file): a block either pool holds serves it, but a missing
    /// one is not loaded whole: only the bytes asked are read, and kept
    /// nowhere. (A GET costs more than the bytes it brings: the caller
    /// reads small extents as [`Reading::CatchUp`], by whole blocks.) The rest of such a block belongs to other partitions, which
    /// their own fetches reach in their own time, long after a small pool
    /// has let it go: a consumer that lags across many partitions would
    /// read each block once per partition in it.
    CatchUpShared,
}

impl Reading {
    fn catches_up(self) -> bool {
        self != Reading::Tail
    }
}

/// How big each part of the cache is, and how its peers prove themselves.
#[derive(Clone)]
pub struct CacheOptions {
    /// Memory for the main pool.
    pub memory_bytes: usize,
    /// A directory and a size for the main pool's disk tier.
    pub disk: Option<(PathBuf, u64)>,
    /// Memory for catch-up reads.
    pub catch_up_bytes: usize,
    pub block_bytes: u64,
    /// How long a peer may take to send a block before the object store is read.
    pub peer_timeout: Duration,
    /// Signs requests to peers and checks theirs (none: the zone's agents
    /// trust each other).
    pub peer_auth: Option<Arc<dyn peer::PeerAuth>>,
}

impl CacheOptions {
    /// Memory only, with an eighth of it for catch-up reads (tests and tools).
    pub fn memory(memory_bytes: usize, block_bytes: u64) -> Self {
        CacheOptions {
            memory_bytes,
            disk: None,
            catch_up_bytes: memory_bytes / 8,
            block_bytes,
            peer_timeout: Duration::from_secs(1),
            peer_auth: None,
        }
    }
}

/// What the cache did, counted since it was built.
#[derive(Debug, Default)]
pub struct CacheCounters {
    /// GETs this cache sent to the object store.
    pub store_gets: AtomicU64,
    /// Blocks a peer sent; blocks asked of a peer that were read from the
    /// object store instead (the peer failed, was slow or refused); and
    /// blocks not asked of their owner because it failed lately.
    pub peer_hits: AtomicU64,
    pub peer_fallbacks: AtomicU64,
    pub peer_skips: AtomicU64,
    /// Blocks this agent sent to peers, and blocks it refused them.
    pub served: AtomicU64,
    pub refused: AtomicU64,
    /// Blocks read for catch-up reads (from either pool or loaded).
    pub catch_up_blocks: AtomicU64,
    /// GETs of a part of a block only, for catch-up reads of shared objects
    /// (see [`Reading::CatchUpShared`]); counted in `store_gets` too.
    pub part_gets: AtomicU64,
    /// Bytes this cache read from the object store.
    pub store_bytes: AtomicU64,
    /// Cached blocks found to hold the wrong bytes, read again from the store.
    pub reloaded: AtomicU64,
    /// Blocks of ranges background readers (compaction) found whole in the
    /// main pool, and of ranges they read from the object store instead.
    pub background_hits: AtomicU64,
    pub background_misses: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// What loads a missing block: a peer or the object store. Shared with the
/// loads in flight, which outlive the call that started them.
struct Loader {
    store: Arc<dyn ObjectStore>,
    block_bytes: u64,
    ring: RwLock<Arc<Ring>>,
    peers: PeerClient,
    /// Checks that a block request comes from a peer.
    peer_auth: Option<Arc<dyn peer::PeerAuth>>,
    counters: CacheCounters,
}

impl Loader {
    /// Block `key`, from its owner when that is a peer (and `ask_owner`),
    /// else (or when the owner fails) from the object store.
    async fn load(
        self: Arc<Self>,
        key: BlockKey,
        catch_up: bool,
        ask_owner: bool,
    ) -> Result<Bytes, CacheError> {
        let owner = ask_owner
            .then(|| {
                let ring = self.ring.read().expect("ring lock poisoned").clone();
                ring.owner(&key)
                    .filter(|m| !m.local)
                    .map(|m| m.address.clone())
            })
            .flatten();
        if let Some(address) = owner {
            match self.peers.get_block(&address, &key, catch_up).await {
                Ok(bytes) => {
                    bump(&self.counters.peer_hits, 1);
                    return Ok(bytes);
                }
                Err(peer::PeerError::Down(_)) => bump(&self.counters.peer_skips, 1),
                Err(e) => {
                    bump(&self.counters.peer_fallbacks, 1);
                    tracing::debug!(error = %e, "cache: reading the object store instead of the owner");
                }
            }
        }
        self.load_from_store(&key).await
    }

    /// Block `key` from the object store: exactly its bytes, from an object
    /// of exactly the size the key names.
    async fn load_from_store(&self, key: &BlockKey) -> Result<Bytes, CacheError> {
        self.get_part(key, 0..key.length()).await
    }

    /// Bytes `part` (relative to the block) of block `key`, from the object
    /// store: what a catch-up read of a shared object misses.
    async fn load_part(&self, key: &BlockKey, part: Range<usize>) -> Result<Bytes, CacheError> {
        bump(&self.counters.part_gets, 1);
        self.get_part(key, part).await
    }

    /// One GET of bytes `part` of block `key`, checked to come from an
    /// object of the size the key names and to be as long as asked.
    async fn get_part(&self, key: &BlockKey, part: Range<usize>) -> Result<Bytes, CacheError> {
        let failed = |reason: String| CacheError::Load {
            key: key.object.to_string(),
            block: key.block,
            reason,
        };
        bump(&self.counters.store_gets, 1);
        let start = key.range().start;
        let range = start + part.start as u64..start + part.end as u64;
        let options = GetOptions::default().with_range(Some(range));
        let got = self
            .store
            .get_opts(&Path::from(&*key.object), options)
            .await
            .map_err(|e| failed(e.to_string()))?;
        if got.meta.size != key.object_size {
            return Err(failed(format!(
                "the object has {} bytes, not the {} asked for",
                got.meta.size, key.object_size
            )));
        }
        let bytes = got.bytes().await.map_err(|e| failed(e.to_string()))?;
        bump(&self.counters.store_bytes, bytes.len() as u64);
        if bytes.len() != part.len() {
            return Err(failed(format!(
                "store returned {} bytes, expected {}",
                bytes.len(),
                part.len()
            )));
        }
        Ok(bytes)
    }
}

/// Where [`BlockCache::read_blocks`] takes blocks from.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// The pools, loading what they miss (from the owner, else the store).
    Cache,
    /// The object store, replacing what the pools hold.
    Store,
}

pub struct BlockCache {
    /// Held while the cache lives: no other agent may use its disk tier.
    _disk_lock: Option<std::fs::File>,
    main: HybridCache<BlockKey, Bytes>,
    catch_up: Cache<BlockKey, Bytes>,
    loader: Arc<Loader>,
    serving: Semaphore,
}

/// Locks the disk tier's directory for this process: two agents writing one
/// device would each take the other's blocks for its own (the lock goes
/// with the process, however it ends).
fn lock_disk(dir: &std::path::Path) -> Result<std::fs::File, CacheError> {
    let error = |reason: String| CacheError::Disk {
        dir: dir.display().to_string(),
        reason,
    };
    std::fs::create_dir_all(dir).map_err(|e| error(e.to_string()))?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("floe-cache.lock"))
        .map_err(|e| error(e.to_string()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(error(
            "another agent uses it (floe-cache.lock is held): give each agent its own".into(),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(error(e.to_string())),
    }
}

/// The disk tier's unit of writing: several cached blocks (foyer's default is 16 MiB).
fn disk_block_bytes(block_bytes: u64) -> usize {
    (block_bytes as usize).saturating_mul(4).max(16 << 20)
}

/// Least disk a disk tier may have: a few of its units.
pub fn min_disk_bytes(block_bytes: u64) -> u64 {
    4 * disk_block_bytes(block_bytes) as u64
}

/// Shards of a memory pool of `capacity` bytes: foyer splits the capacity
/// evenly and evicts per shard, so each shard must hold many blocks or a
/// few readers hashing to one shard evict each other.
fn shards(capacity: usize, block_bytes: u64) -> usize {
    (capacity / (16 * block_bytes.max(1) as usize)).clamp(1, 8)
}

impl BlockCache {
    /// What a peer's block request must be signed with, if anything.
    pub fn peer_auth(&self) -> Option<&Arc<dyn peer::PeerAuth>> {
        self.loader.peer_auth.as_ref()
    }

    pub async fn new(
        store: Arc<dyn ObjectStore>,
        options: CacheOptions,
    ) -> Result<Self, CacheError> {
        let weigh = |key: &BlockKey, value: &Bytes| key.object.len() + value.len();
        let block_bytes = options.block_bytes;
        let main = HybridCacheBuilder::new()
            .with_name("floe-blocks")
            .memory(options.memory_bytes)
            .with_shards(shards(options.memory_bytes, block_bytes))
            .with_weighter(weigh)
            .storage();
        let disk_lock = match &options.disk {
            Some((dir, _)) => Some(lock_disk(dir)?),
            None => None,
        };
        let main = match &options.disk {
            None => main.build().await.map_err(|e| CacheError::Disk {
                dir: "(none)".into(),
                reason: e.to_string(),
            }),
            Some((dir, bytes)) => {
                let disk_error = |reason: String| CacheError::Disk {
                    dir: dir.display().to_string(),
                    reason,
                };
                let device = FsDeviceBuilder::new(dir)
                    .with_capacity(*bytes as usize)
                    .build()
                    .map_err(|e| disk_error(e.to_string()))?;
                let unit = disk_block_bytes(block_bytes);
                main.with_engine_config(
                    BlockEngineConfig::new(device)
                        .with_block_size(unit)
                        // Room for a burst of evicted blocks on their way to
                        // disk (foyer drops writes past these, by default 16 MiB).
                        .with_buffer_pool_size(4 * unit)
                        .with_submit_queue_size_threshold(8 * unit),
                )
                // Blocks never change under their keys (see [`BlockKey`]):
                // what the disk held before a restart is still right.
                .with_recover_mode(RecoverMode::Quiet)
                .build()
                .await
                .map_err(|e| disk_error(e.to_string()))
            }
        };
        let main = main?;
        let catch_up_bytes = options.catch_up_bytes.max(1);
        let catch_up = CacheBuilder::new(catch_up_bytes)
            .with_shards(shards(catch_up_bytes, block_bytes))
            .with_weighter(weigh)
            .build();
        Ok(BlockCache {
            _disk_lock: disk_lock,
            main,
            catch_up,
            loader: Arc::new(Loader {
                store,
                block_bytes,
                ring: RwLock::new(Arc::new(Ring::default())),
                peers: PeerClient::new(options.peer_timeout, options.peer_auth.clone()),
                peer_auth: options.peer_auth.clone(),
                counters: CacheCounters::default(),
            }),
            serving: Semaphore::new(MAX_SERVING),
        })
    }

    pub fn block_bytes(&self) -> u64 {
        self.loader.block_bytes
    }

    pub fn counters(&self) -> &CacheCounters {
        &self.loader.counters
    }

    /// The members of this agent's zone from now on (this agent among them,
    /// marked local). With no other member, nothing is asked of peers.
    pub fn set_ring(&self, ring: Ring) {
        let addresses: Vec<&str> = ring
            .members()
            .iter()
            .filter(|m| !m.local)
            .map(|m| m.address.as_str())
            .collect();
        self.loader.peers.forget_others(&addresses);
        *self.loader.ring.write().expect("ring lock poisoned") = Arc::new(ring);
    }

    pub fn ring(&self) -> Arc<Ring> {
        self.loader.ring.read().expect("ring lock poisoned").clone()
    }

    fn key(&self, object: &Arc<str>, object_size: u64, block: u64) -> BlockKey {
        BlockKey {
            object: object.clone(),
            object_size,
            block_bytes: self.loader.block_bytes,
            block,
        }
    }

    /// The blocks holding bytes `range` (not empty, within the object) of
    /// object `key`, of `object_size` bytes.
    fn blocks_of(
        &self,
        key: &str,
        object_size: u64,
        range: &Range<u64>,
    ) -> impl Iterator<Item = BlockKey> + use<'_> {
        let object: Arc<str> = Arc::from(key);
        let block_bytes = self.loader.block_bytes;
        let blocks = range.start / block_bytes..=(range.end - 1) / block_bytes;
        blocks.map(move |block| self.key(&object, object_size, block))
    }

    /// Puts a whole object, just written, into the main pool as its blocks.
    ///
    /// Each block is copied out of the object: a slice would keep the whole
    /// object's buffer alive while any one of its blocks stays cached, so the
    /// cache could hold several times its capacity while counting less.
    /// One copy per upload is cheap next to the upload.
    pub fn insert_object(&self, key: &str, object: &Bytes) {
        let object_key: Arc<str> = Arc::from(key);
        let size = object.len() as u64;
        for block in 0..size.div_ceil(self.loader.block_bytes) {
            let key = self.key(&object_key, size, block);
            let r = key.range();
            let bytes = Bytes::copy_from_slice(&object[r.start as usize..r.end as usize]);
            self.main.insert(key, bytes);
        }
    }

    /// Block `key` from a pool, loaded if missing (from its owner when
    /// `ask_owner`), checked to be of the block's length: a wrong one (a
    /// bad peer's, a disk entry of another layout) is dropped and read
    /// again from the object store.
    async fn block(
        &self,
        key: &BlockKey,
        reading: Reading,
        ask_owner: bool,
    ) -> Result<Bytes, CacheError> {
        let bytes = self.pooled(key, reading, ask_owner).await?;
        if bytes.len() == key.length() {
            return Ok(bytes);
        }
        tracing::error!(object = %key.object, block = key.block, got = bytes.len(), expected = key.length(),
            "cache: a block of the wrong length; reading it from the object store");
        self.reload(key, reading).await
    }

    /// Block `key` read from the object store itself (not joining a load
    /// in flight, nor taking what a pool or its disk still holds), put in
    /// its pool over whatever was there.
    async fn reload(&self, key: &BlockKey, reading: Reading) -> Result<Bytes, CacheError> {
        bump(&self.loader.counters.reloaded, 1);
        self.forget(key);
        let bytes = self.loader.load_from_store(key).await?;
        match reading {
            Reading::Tail => {
                self.main.insert(key.clone(), bytes.clone());
            }
            Reading::CatchUp | Reading::CatchUpShared => {
                self.catch_up.insert(key.clone(), bytes.clone());
            }
        }
        Ok(bytes)
    }

    async fn pooled(
        &self,
        key: &BlockKey,
        reading: Reading,
        ask_owner: bool,
    ) -> Result<Bytes, CacheError> {
        let failed = |e: foyer::Error| CacheError::Load {
            key: key.object.to_string(),
            block: key.block,
            reason: e.to_string(),
        };
        let catch_up = reading.catches_up();
        let load = self.loader.clone().load(key.clone(), catch_up, ask_owner);
        if !catch_up {
            let entry = self.main.get_or_fetch(key, || load).await.map_err(failed)?;
            return Ok(entry.value().clone());
        }
        bump(&self.loader.counters.catch_up_blocks, 1);
        // From the main pool's memory or disk, without bringing a disk hit
        // into memory (where it would evict the tail).
        if let Some(bytes) = self.held_block(key).await {
            return Ok(bytes);
        }
        let entry = self.catch_up.get_or_fetch(key, || load).await;
        entry
            .map(|e| e.value().clone())
            .map_err(|e| CacheError::Load {
                key: key.object.to_string(),
                block: key.block,
                reason: e.to_string(),
            })
    }

    /// Bytes `range` of object `key` (of `object_size` bytes) if the main
    /// pool holds every block of it, in memory or on disk; `None` otherwise.
    /// For background readers (compaction): nothing is loaded, asked of a
    /// peer or brought into memory from disk, so they do not fill the pools
    /// the consumers read from. (A memory hit counts as a use in the pool's
    /// LRU, as a consumer's read would: the blocks compaction reads were
    /// uploaded seconds before, so they move little.) The ingest files an
    /// agent uploaded are all there while fresh
    /// ([`BlockCache::insert_object`]).
    pub async fn cached_range(
        &self,
        key: &str,
        object_size: u64,
        range: Range<u64>,
    ) -> Option<Bytes> {
        let block_bytes = self.loader.block_bytes;
        let blocks = range
            .end
            .div_ceil(block_bytes)
            .saturating_sub(range.start / block_bytes);
        let found = self.held_range(key, object_size, range).await;
        match found {
            Some(_) => bump(&self.loader.counters.background_hits, blocks),
            None => bump(&self.loader.counters.background_misses, blocks),
        }
        found
    }

    async fn held_range(&self, key: &str, object_size: u64, range: Range<u64>) -> Option<Bytes> {
        if range.is_empty() || range.end > object_size {
            return None;
        }
        let mut out = BytesMut::with_capacity((range.end - range.start) as usize);
        for key in self.blocks_of(key, object_size, &range) {
            let bytes = self.held_block(&key).await?;
            if bytes.len() != key.length() {
                return None;
            }
            out.extend_from_slice(&bytes[key.part_of(&range)]);
        }
        Some(out.freeze())
    }

    /// Block `key` if the main pool holds it, in memory or on disk (a disk
    /// hit stays on disk; a disk error is a miss).
    async fn held_block(&self, key: &BlockKey) -> Option<Bytes> {
        if let Some(entry) = self.main.memory().get(key) {
            return Some(entry.value().clone());
        }
        if !self.main.is_hybrid() {
            return None;
        }
        match self.main.storage().load(key).await {
            Ok(Load::Entry { value, .. }) => Some(value),
            Ok(Load::Piece { piece, .. }) => Some(piece.value().clone()),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!(error = %e, "cache: disk tier read failed");
                None
            }
        }
    }

    /// Drops block `key` from every pool.
    fn forget(&self, key: &BlockKey) {
        self.main.remove(key);
        self.catch_up.remove(key);
    }

    /// Appends bytes `range` of object `key` (of `object_size` bytes) to `out`.
    pub async fn read_into(
        &self,
        key: &str,
        object_size: u64,
        range: Range<u64>,
        out: &mut BytesMut,
        reading: Reading,
    ) -> Result<(), CacheError> {
        self.read_blocks(key, object_size, range, out, reading, Source::Cache)
            .await
    }

    /// [`BlockCache::read_into`] for bytes found wrong (a record batch whose
    /// CRC does not hold): their blocks are dropped from every pool and read
    /// from the object store, not asked of a peer.
    pub async fn reread_into(
        &self,
        key: &str,
        object_size: u64,
        range: Range<u64>,
        out: &mut BytesMut,
        reading: Reading,
    ) -> Result<(), CacheError> {
        self.read_blocks(key, object_size, range, out, reading, Source::Store)
            .await
    }

    async fn read_blocks(
        &self,
        key: &str,
        object_size: u64,
        range: Range<u64>,
        out: &mut BytesMut,
        reading: Reading,
        source: Source,
    ) -> Result<(), CacheError> {
        if range.start > range.end || range.end > object_size {
            return Err(CacheError::OutOfBounds {
                key: key.to_string(),
                start: range.start,
                end: range.end,
                size: object_size,
            });
        }
        if range.is_empty() {
            return Ok(());
        }
        out.reserve((range.end - range.start) as usize);
        for key in self.blocks_of(key, object_size, &range) {
            let part = key.part_of(&range);
            let partial = reading == Reading::CatchUpShared && part.len() < key.length();
            if partial && let Source::Cache = source {
                out.extend_from_slice(&self.shared_part(&key, part).await?);
                continue;
            }
            let bytes = match source {
                Source::Cache => self.block(&key, reading, true).await?,
                Source::Store => self.reload(&key, reading).await?,
            };
            out.extend_from_slice(&bytes[part]);
        }
        Ok(())
    }

    /// Bytes `part` of block `key` for a catch-up read of a shared object:
    /// from a pool that holds the block, else only those bytes from the
    /// object store (not asked of a peer, whose miss would load the whole
    /// block; not kept).
    async fn shared_part(&self, key: &BlockKey, part: Range<usize>) -> Result<Bytes, CacheError> {
        bump(&self.loader.counters.catch_up_blocks, 1);
        let held = match self.held_block(key).await {
            Some(bytes) => Some(bytes),
            None => self.catch_up.get(key).map(|e| e.value().clone()),
        };
        match held {
            Some(bytes) if bytes.len() == key.length() => return Ok(bytes.slice(part)),
            Some(bytes) => {
                tracing::error!(object = %key.object, block = key.block, got = bytes.len(),
                    expected = key.length(), "cache: a block of the wrong length; dropped");
                self.forget(key);
            }
            None => {}
        }
        self.loader.load_part(key, part).await
    }

    /// A block a peer asked for (it names this agent its owner): from this
    /// agent's pools, or loaded from the object store within `within`, never
    /// from another peer. Refused when the peer's blocks are cut differently,
    /// or when [`MAX_SERVING`] blocks are being served already.
    pub async fn serve(
        &self,
        key: &BlockKey,
        reading: Reading,
        within: Duration,
    ) -> Result<Bytes, CacheError> {
        let ours = self.loader.block_bytes;
        if key.block_bytes != ours {
            return Err(CacheError::BlockSize {
                asked: key.block_bytes,
                ours,
            });
        }
        if !key.is_within() {
            return Err(CacheError::OutOfBounds {
                key: key.object.to_string(),
                start: key.block.saturating_mul(ours),
                end: key.block.saturating_mul(ours).saturating_add(ours),
                size: key.object_size,
            });
        }
        let Ok(_turn) = self.serving.try_acquire() else {
            bump(&self.loader.counters.refused, 1);
            return Err(CacheError::Busy(MAX_SERVING));
        };
        let within = within.min(MAX_SERVE_WITHIN);
        let bytes = tokio::time::timeout(within, self.block(key, reading, false))
            .await
            .map_err(|_| CacheError::Slow(within))??;
        bump(&self.loader.counters.served, 1);
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutPayload};

    async fn store_with(key: &str, data: &[u8]) -> Arc<dyn ObjectStore> {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        store
            .put(&Path::from(key), PutPayload::from(data.to_vec()))
            .await
            .unwrap();
        store
    }

    async fn cache(store: Arc<dyn ObjectStore>, memory: usize, block: u64) -> BlockCache {
        BlockCache::new(store, CacheOptions::memory(memory, block))
            .await
            .unwrap()
    }

    fn gets(cache: &BlockCache) -> u64 {
        cache.counters().store_gets.load(Ordering::Relaxed)
    }

    async fn read(
        cache: &BlockCache,
        key: &str,
        size: u64,
        range: Range<u64>,
        reading: Reading,
    ) -> BytesMut {
        let mut out = BytesMut::new();
        cache
            .read_into(key, size, range, &mut out, reading)
            .await
            .unwrap();
        out
    }

    #[tokio::test]
    async fn reads_across_block_boundaries() {
        let data: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let store = store_with("obj", &data).await;
        let cache = cache(store, 1 << 20, 64).await;
        for (start, end) in [
            (0, 1000),
            (10, 20),
            (60, 70),
            (63, 64),
            (64, 128),
            (999, 1000),
            (5, 5),
        ] {
            let out = read(&cache, "obj", 1000, start..end, Reading::Tail).await;
            assert_eq!(
                &out[..],
                &data[start as usize..end as usize],
                "{start}..{end}"
            );
        }
        let mut out = BytesMut::new();
        assert!(matches!(
            cache
                .read_into("obj", 1000, 990..1001, &mut out, Reading::Tail)
                .await,
            Err(CacheError::OutOfBounds { .. })
        ));
    }

    #[tokio::test]
    async fn inserted_objects_are_served_without_the_store() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let cache = cache(store, 1 << 20, 16).await;
        let data = Bytes::from((0..100u8).collect::<Vec<_>>());
        cache.insert_object("never-uploaded", &data);
        let out = read(&cache, "never-uploaded", 100, 10..90, Reading::Tail).await;
        assert_eq!(&out[..], &data[10..90]);
        let out = read(&cache, "never-uploaded", 100, 0..100, Reading::CatchUp).await;
        assert_eq!(&out[..], &data[..]);
        assert_eq!(gets(&cache), 0);
    }

    /// Background readers get only ranges held whole, and bring nothing in.
    #[tokio::test]
    async fn background_reads_take_only_what_is_held() {
        let data: Vec<u8> = (0..100u8).collect();
        let store = store_with("stored", &data).await;
        let cache = cache(store, 1 << 20, 16).await;
        let uploaded = Bytes::from(data.clone());
        cache.insert_object("uploaded", &uploaded);
        let held = cache.cached_range("uploaded", 100, 10..90).await;
        assert_eq!(held.as_deref(), Some(&data[10..90]));
        assert_eq!(cache.cached_range("uploaded", 100, 90..101).await, None);
        // Another size is another object.
        assert_eq!(cache.cached_range("uploaded", 99, 0..10).await, None);
        // Not loaded from the store, then or after.
        for _ in 0..2 {
            assert_eq!(cache.cached_range("stored", 100, 0..10).await, None);
        }
        assert_eq!(gets(&cache), 0);
        // Held once a reader brought it in; a range missing one block is not.
        read(&cache, "stored", 100, 0..40, Reading::Tail).await;
        let held = cache.cached_range("stored", 100, 5..40).await;
        assert_eq!(held.as_deref(), Some(&data[5..40]));
        assert_eq!(cache.cached_range("stored", 100, 5..50).await, None);
        let counters = cache.counters();
        let blocks = |c: &AtomicU64| c.load(Ordering::Relaxed);
        assert_eq!(blocks(&counters.background_hits), 6 + 3);
        assert_eq!(blocks(&counters.background_misses), 2 + 1 + 2 + 4);
    }

    #[tokio::test]
    async fn missing_object_is_an_error() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let cache = cache(store, 1 << 20, 16).await;
        let mut out = BytesMut::new();
        assert!(matches!(
            cache
                .read_into("nope", 10, 0..5, &mut out, Reading::Tail)
                .await,
            Err(CacheError::Load { .. })
        ));
    }

    #[tokio::test]
    async fn catch_up_reads_do_not_evict_the_tail() {
        const B: u64 = 1024;
        let old = vec![7u8; (B * 200) as usize];
        let store = store_with("old", &old).await;
        store
            .put(
                &Path::from("new"),
                PutPayload::from(vec![1u8; (B * 4) as usize]),
            )
            .await
            .unwrap();
        // Room for about 64 blocks in the main pool, 8 for catch-up reads.
        let cache = cache(store, (64 * B) as usize, B).await;
        read(&cache, "new", 4 * B, 0..4 * B, Reading::Tail).await;
        assert_eq!(gets(&cache), 4);
        // A replay of 200 blocks.
        read(&cache, "old", 200 * B, 0..200 * B, Reading::CatchUp).await;
        assert_eq!(gets(&cache), 4 + 200);
        read(&cache, "new", 4 * B, 0..4 * B, Reading::Tail).await;
        assert_eq!(gets(&cache), 204, "the tail's blocks were kept");
        // Read as tail, the same replay evicts them.
        read(&cache, "old", 200 * B, 0..200 * B, Reading::Tail).await;
        read(&cache, "new", 4 * B, 0..4 * B, Reading::Tail).await;
        assert!(gets(&cache) > 404, "the test can fail");
    }

    fn store_bytes(cache: &BlockCache) -> u64 {
        cache.counters().store_bytes.load(Ordering::Relaxed)
    }

    /// A consumer far behind reads eight partitions' chunks of a shared
    /// object (two a block) in the order its fetches take them, with a
    /// catch-up pool of one block: read whole, each block is read twice;
    /// read as shared, each byte once, and a block a pool holds is read
    /// from it.
    #[tokio::test]
    async fn a_catch_up_read_of_a_shared_object_reads_its_own_bytes_once() {
        const B: u64 = 1024;
        let object: Vec<u8> = (0..4 * B).map(|i| i as u8).collect();
        let order = [0u64, 2, 4, 6, 1, 3, 5, 7];
        let chunk = |p: u64| p * B / 2..(p + 1) * B / 2;
        for (reading, gets_expected, bytes_expected) in [
            (Reading::CatchUp, 8, 8 * B),
            (Reading::CatchUpShared, 8, 4 * B),
        ] {
            let store = store_with("ingest/obj", &object).await;
            let mut options = CacheOptions::memory((64 * B) as usize, B);
            options.catch_up_bytes = B as usize + 64;
            let cache = BlockCache::new(store, options).await.unwrap();
            for p in order {
                let out = read(&cache, "ingest/obj", 4 * B, chunk(p), reading).await;
                assert_eq!(
                    &out[..],
                    &object[chunk(p).start as usize..chunk(p).end as usize]
                );
            }
            assert_eq!(
                (gets(&cache), store_bytes(&cache)),
                (gets_expected, bytes_expected),
                "{reading:?}"
            );
        }

        // Blocks the main pool holds (an upload's) are read from it.
        let store = store_with("ingest/obj", &object).await;
        let uploaded = cache(store, (64 * B) as usize, B).await;
        uploaded.insert_object("ingest/obj", &Bytes::from(object.clone()));
        for p in order {
            read(
                &uploaded,
                "ingest/obj",
                4 * B,
                chunk(p),
                Reading::CatchUpShared,
            )
            .await;
        }
        assert_eq!(gets(&uploaded), 0);
        // A range over a whole block loads it whole, into the catch-up pool.
        let store = store_with("ingest/obj", &object).await;
        let cache = cache(store, (64 * B) as usize, B).await;
        read(
            &cache,
            "ingest/obj",
            4 * B,
            B / 2..2 * B + B / 2,
            Reading::CatchUpShared,
        )
        .await;
        assert_eq!(store_bytes(&cache), B / 2 + B + B / 2);
        assert_eq!(cache.counters().part_gets.load(Ordering::Relaxed), 2);
        read(
            &cache,
            "ingest/obj",
            4 * B,
            B..2 * B,
            Reading::CatchUpShared,
        )
        .await;
        assert_eq!(gets(&cache), 3, "the whole block was kept");
    }

    #[tokio::test]
    async fn the_disk_tier_keeps_what_memory_cannot() {
        let dir = tempfile::tempdir().unwrap();
        let block = 64 << 10;
        let data = vec![3u8; 16 * block as usize];
        let store = store_with("obj", &data).await;
        let mut options = CacheOptions::memory(2 * block as usize, block);
        options.catch_up_bytes = 0;
        options.disk = Some((dir.path().to_path_buf(), min_disk_bytes(block)));
        let cache = BlockCache::new(store, options).await.unwrap();
        read(
            &cache,
            "obj",
            data.len() as u64,
            0..data.len() as u64,
            Reading::Tail,
        )
        .await;
        assert_eq!(gets(&cache), 16);
        cache.main.storage().wait().await;
        let out = read(
            &cache,
            "obj",
            data.len() as u64,
            0..data.len() as u64,
            Reading::Tail,
        )
        .await;
        assert_eq!(&out[..], &data[..]);
        assert!(
            gets(&cache) < 16 + 8,
            "most blocks came from disk: {}",
            gets(&cache)
        );
    }

    #[tokio::test]
    async fn a_restart_with_other_blocks_reads_the_right_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
        let store = store_with("obj", &data).await;
        let open = |block: u64| {
            let mut options = CacheOptions::memory(64 << 10, block);
            options.disk = Some((dir.path().to_path_buf(), min_disk_bytes(block)));
            BlockCache::new(store.clone(), options)
        };
        let size = data.len() as u64;
        let first = open(16 << 10).await.unwrap();
        // A second cache on the same directory (another agent) is refused
        // while the first lives.
        match open(16 << 10).await {
            Err(e) => assert!(e.to_string().contains("another agent uses it"), "{e}"),
            Ok(_) => panic!("two caches on one disk directory"),
        }
        read(&first, "obj", size, 0..size, Reading::Tail).await;
        first.main.storage().wait().await;
        first.main.close().await.unwrap();
        drop(first);
        // Recovered with blocks of another size: none of the old ones is
        // taken for a new one.
        let second = open(64 << 10).await.unwrap();
        let out = read(&second, "obj", size, 1000..size, Reading::Tail).await;
        assert_eq!(&out[..], &data[1000..]);
        assert_eq!(second.counters().reloaded.load(Ordering::Relaxed), 0);
        second.main.close().await.unwrap();
        drop(second);
        // With the same size, the disk still serves.
        let third = open(64 << 10).await.unwrap();
        let out = read(&third, "obj", size, 0..size, Reading::Tail).await;
        assert_eq!(&out[..], &data[..]);
        assert!(
            gets(&third) < 16,
            "recovered blocks came from disk: {}",
            gets(&third)
        );
    }

    /// Three caches of one zone, each serving its blocks on a port of its own.
    async fn zone(store: Arc<dyn ObjectStore>, block: u64) -> Vec<Arc<BlockCache>> {
        zone_signing(store, block, [None, None, None]).await
    }

    /// A toy signature for tests: the key, then a checksum of the message.
    struct Keyed(u8);

    impl peer::PeerAuth for Keyed {
        fn sign(&self, message: &[u8]) -> Vec<u8> {
            let sum = message.iter().fold(0u8, |a, b| a.wrapping_add(*b));
            vec![self.0, sum]
        }
        fn verify(&self, message: &[u8], tag: &[u8]) -> bool {
            self.sign(message) == tag
        }
    }

    /// Three caches of one zone, each signing (and asking signatures) with its key.
    async fn zone_signing(
        store: Arc<dyn ObjectStore>,
        block: u64,
        keys: [Option<u8>; 3],
    ) -> Vec<Arc<BlockCache>> {
        let mut caches = Vec::new();
        let mut addresses = Vec::new();
        for key in keys {
            // A generous deadline: a loaded test machine must not fall back.
            let mut options = CacheOptions::memory(1 << 20, block);
            options.peer_timeout = Duration::from_secs(10);
            options.peer_auth = key.map(|k| Arc::new(Keyed(k)) as Arc<dyn peer::PeerAuth>);
            let cache = Arc::new(BlockCache::new(store.clone(), options).await.unwrap());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addresses.push(listener.local_addr().unwrap().to_string());
            tokio::spawn(axum::serve(listener, server::routes(cache.clone())).into_future());
            caches.push(cache);
        }
        for (me, cache) in caches.iter().enumerate() {
            cache.set_ring(Ring::new(
                (0..3)
                    .map(|n| Member {
                        address: addresses[n].clone(),
                        local: n == me,
                    })
                    .collect(),
            ));
        }
        caches
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_zone_gets_each_block_once() {
        let data: Vec<u8> = (0..64 * 30).map(|i| (i % 251) as u8).collect();
        let store = store_with("ingest/00/obj", &data).await;
        let caches = zone(store, 64).await;
        for round in 0..2 {
            for cache in &caches {
                let out = read(
                    cache,
                    "ingest/00/obj",
                    data.len() as u64,
                    0..data.len() as u64,
                    Reading::Tail,
                )
                .await;
                assert_eq!(&out[..], &data[..], "round {round}");
            }
        }
        let total = |f: fn(&CacheCounters) -> &AtomicU64| -> u64 {
            caches
                .iter()
                .map(|c| f(c.counters()).load(Ordering::Relaxed))
                .sum()
        };
        assert_eq!(
            total(|c| &c.store_gets),
            30,
            "one GET per block for the zone"
        );
        assert_eq!(
            total(|c| &c.peer_hits),
            60,
            "each block came from its owner to the other two"
        );
        assert_eq!(total(|c| &c.served), 60);
        assert_eq!(total(|c| &c.peer_fallbacks) + total(|c| &c.peer_skips), 0);
        // Every cache owns some blocks.
        assert!(
            caches
                .iter()
                .all(|c| c.counters().store_gets.load(Ordering::Relaxed) > 0)
        );
    }

    /// With a cluster secret, an owner serves only requests signed with it:
    /// a cache with another key is refused and reads the store itself.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn owners_serve_only_signed_requests() {
        let data: Vec<u8> = (0..64 * 30).map(|i| (i % 251) as u8).collect();
        let store = store_with("ingest/00/obj", &data).await;
        let caches = zone_signing(store, 64, [Some(7), Some(7), Some(9)]).await;
        for cache in &caches {
            let out = read(cache, "ingest/00/obj", 64 * 30, 0..64 * 30, Reading::Tail).await;
            assert_eq!(&out[..], &data[..]);
        }
        let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let (a, b, stranger) = (
            caches[0].counters(),
            caches[1].counters(),
            caches[2].counters(),
        );
        assert!(
            count(&a.peer_hits) > 0 && count(&b.peer_hits) > 0,
            "signed peers are served"
        );
        assert_eq!(
            count(&stranger.peer_hits),
            0,
            "another key is served nothing"
        );
        assert!(count(&stranger.peer_fallbacks) > 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_owner_that_is_down_is_read_around() {
        let data = vec![5u8; 64 * 20];
        let store = store_with("ingest/00/obj", &data).await;
        let cache = cache(store, 1 << 20, 64).await;
        // A port nothing listens on, owning the blocks it scores highest.
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = closed.local_addr().unwrap().to_string();
        drop(closed);
        cache.set_ring(Ring::new(vec![
            Member {
                address: "127.0.0.1:1".into(),
                local: true,
            },
            Member {
                address,
                local: false,
            },
        ]));
        let out = read(&cache, "ingest/00/obj", 64 * 20, 0..64 * 20, Reading::Tail).await;
        assert_eq!(&out[..], &data[..]);
        assert_eq!(gets(&cache), 20);
        // The owner was asked once, failed, and was skipped after.
        let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let counters = cache.counters();
        assert_eq!(count(&counters.peer_fallbacks), 1);
        assert!(count(&counters.peer_skips) >= 1);
        assert_eq!(count(&counters.peer_hits), 0);
    }

    #[tokio::test]
    async fn peers_are_refused_what_their_own_blocks_cannot_name() {
        let store = store_with("ingest/obj", &[1u8; 100]).await;
        let cache = cache(store, 1 << 20, 16).await;
        let key = |object_size, block_bytes, block| BlockKey {
            object: Arc::from("ingest/obj"),
            object_size,
            block_bytes,
            block,
        };
        let serve = |key: BlockKey| {
            let cache = &cache;
            async move {
                cache
                    .serve(&key, Reading::Tail, Duration::from_secs(5))
                    .await
            }
        };
        assert!(matches!(
            serve(key(100, 32, 0)).await,
            Err(CacheError::BlockSize { .. })
        ));
        assert!(matches!(
            serve(key(100, 16, 7)).await,
            Err(CacheError::OutOfBounds { .. })
        ));
        assert_eq!(serve(key(100, 16, 6)).await.unwrap().len(), 4);
        // A peer that lies about the size is refused: the object's is checked.
        assert!(matches!(
            serve(key(20, 16, 0)).await,
            Err(CacheError::Load { .. })
        ));
        let out = read(&cache, "ingest/obj", 100, 0..100, Reading::Tail).await;
        assert_eq!(out.len(), 100);
    }

    #[tokio::test]
    async fn wrong_bytes_are_read_again_from_the_store() {
        let data: Vec<u8> = (0..100u8).collect();
        let store = store_with("ingest/obj", &data).await;
        let cache = cache(store, 1 << 20, 16).await;
        // A block of the wrong length (as a disk entry of another layout,
        // or a bad peer's, would be).
        cache.main.insert(
            cache.key(&Arc::from("ingest/obj"), 100, 1),
            Bytes::from_static(b"short"),
        );
        let out = read(&cache, "ingest/obj", 100, 0..100, Reading::Tail).await;
        assert_eq!(&out[..], &data[..]);
        assert_eq!(cache.counters().reloaded.load(Ordering::Relaxed), 1);
        // Of the right length but wrong: found by the caller, read again.
        cache.main.insert(
            cache.key(&Arc::from("ingest/obj"), 100, 2),
            Bytes::from(vec![0u8; 16]),
        );
        let mut out = BytesMut::new();
        cache
            .reread_into("ingest/obj", 100, 30..40, &mut out, Reading::Tail)
            .await
            .unwrap();
        assert_eq!(&out[..], &data[30..40]);
    }
}
