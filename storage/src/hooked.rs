//! An object store wrapper that calls hooks around every request: the one
//! place that knows how to delegate `ObjectStore`, shared by fault injection
//! ([`crate::faults`]) and metrics.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{StreamExt, future};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result,
};

/// The kinds of object-store request (what S3 bills by).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Put,
    PutMultipart,
    Get,
    Delete,
    List,
    Copy,
    Rename,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::PutMultipart => "put_multipart",
            Op::Get => "get",
            Op::Delete => "delete",
            Op::List => "list",
            Op::Copy => "copy",
            Op::Rename => "rename",
        }
    }
}

/// What to do around each request. A listing or a bulk delete is one request:
/// `before` runs once, when the stream is first polled.
#[async_trait]
pub trait Hooks: Send + Sync + 'static {
    /// Before the request; an error fails it without reaching the store.
    async fn before(&self, _op: Op) -> Result<()> {
        Ok(())
    }
    /// After the request, with the bytes it moved; an error replaces a success.
    fn after(&self, _op: Op, _bytes: u64, _ok: bool) -> Result<()> {
        Ok(())
    }
    /// How long the store took to answer a request (a GET: until its body
    /// begins; listings and bulk deletes are not timed).
    fn answered(&self, _op: Op, _took: std::time::Duration) {}
    /// After a successful put of `location`, before it is reported done; an
    /// error fails the put (e.g. the object could not be made durable).
    async fn after_put(&self, _location: &Path) -> Result<()> {
        Ok(())
    }
    /// Each entry of a listing as it is handed on: changed, or an error
    /// (a page that failed), after which the listing ends.
    fn listed(&self, entry: ObjectMeta) -> Result<ObjectMeta> {
        Ok(entry)
    }
    /// A GET answered here instead of by the store (a cache in front of
    /// it); `None` sends it on. An answered GET runs no other hook: it is
    /// no request to the store.
    async fn serve_get(&self, _location: &Path, _options: &GetOptions) -> Option<GetResult> {
        None
    }
}

pub struct HookedStore<H> {
    inner: Arc<dyn ObjectStore>,
    hooks: Arc<H>,
}

impl<H: Hooks> HookedStore<H> {
    pub fn new(inner: Arc<dyn ObjectStore>, hooks: H) -> Self {
        HookedStore {
            inner,
            hooks: Arc::new(hooks),
        }
    }

    async fn around<T>(
        &self,
        op: Op,
        bytes: impl FnOnce(&T) -> u64,
        request: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        self.hooks.before(op).await?;
        let started = tokio::time::Instant::now();
        let result = request.await;
        self.hooks.answered(op, started.elapsed());
        let moved = result.as_ref().map_or(0, bytes);
        self.hooks.after(op, moved, result.is_ok())?;
        result
    }
}

impl<H: Hooks> HookedStore<H> {
    /// A listing that starts once `before` allows it: the store lists what
    /// it holds then, not when the caller asked.
    fn listing(
        &self,
        list: impl FnOnce(&dyn ObjectStore) -> BoxStream<'static, Result<ObjectMeta>> + Send + 'static,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let (hooks, inner) = (self.hooks.clone(), self.inner.clone());
        let each = self.hooks.clone();
        stream::once(async move {
            let listed = hooks
                .before(Op::List)
                .await
                .and_then(|()| hooks.after(Op::List, 0, true));
            match listed {
                Ok(()) => list(inner.as_ref()),
                Err(e) => stream::once(future::ready(Err(e))).boxed(),
            }
        })
        .flatten()
        .map(move |entry| entry.and_then(|e| each.listed(e)))
        // Nothing after an error: a listing that failed is over.
        .scan(false, |failed, entry| {
            let next = (!*failed).then(|| {
                *failed = entry.is_err();
                entry
            });
            future::ready(next)
        })
        .boxed()
    }
}

impl<H> fmt::Display for HookedStore<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hooked({})", self.inner)
    }
}

impl<H> fmt::Debug for HookedStore<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[async_trait]
impl<H: Hooks> ObjectStore for HookedStore<H> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let size = payload.content_length() as u64;
        let put = self
            .around(
                Op::Put,
                |_| size,
                self.inner.put_opts(location, payload, opts),
            )
            .await?;
        self.hooks.after_put(location).await?;
        Ok(put)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.around(
            Op::PutMultipart,
            |_| 0,
            self.inner.put_multipart_opts(location, opts),
        )
        .await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        if let Some(answer) = self.hooks.serve_get(location, &options).await {
            return Ok(answer);
        }
        self.around(
            Op::Get,
            |r: &GetResult| r.range.end - r.range.start,
            self.inner.get_opts(location, options),
        )
        .await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.around(
            Op::Get,
            |r: &Vec<Bytes>| r.iter().map(|b| b.len() as u64).sum(),
            self.inner.get_ranges(location, ranges),
        )
        .await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let (hooks, inner) = (self.hooks.clone(), self.inner.clone());
        // `before` once per stream (a bulk delete is one request to S3);
        // `after` once per key, as each may fail on its own.
        stream::once(async move {
            if let Err(e) = hooks.before(Op::Delete).await {
                return stream::once(future::ready(Err(e))).boxed();
            }
            inner
                .delete_stream(locations)
                .map(move |r| {
                    hooks.after(Op::Delete, 0, r.is_ok())?;
                    r
                })
                .boxed()
        })
        .flatten()
        .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let prefix = prefix.cloned();
        self.listing(move |inner| inner.list(prefix.as_ref()))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let (prefix, offset) = (prefix.cloned(), offset.clone());
        self.listing(move |inner| inner.list_with_offset(prefix.as_ref(), &offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.around(Op::List, |_| 0, self.inner.list_with_delimiter(prefix))
            .await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.around(Op::Copy, |_| 0, self.inner.copy_opts(from, to, options))
            .await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.around(Op::Rename, |_| 0, self.inner.rename_opts(from, to, options))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::TryStreamExt;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    use super::*;

    /// Fails the listing at its second entry.
    struct SecondPageFails(AtomicUsize);

    impl Hooks for SecondPageFails {
        fn listed(&self, entry: ObjectMeta) -> Result<ObjectMeta> {
            match self.0.fetch_add(1, Ordering::SeqCst) {
                1 => Err(object_store::Error::Generic {
                    store: "test",
                    source: "a page failed".into(),
                }),
                _ => Ok(entry),
            }
        }
    }

    #[tokio::test]
    async fn a_listing_ends_at_its_first_failed_entry() {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        for key in ["a", "b", "c", "d"] {
            inner
                .put(&Path::from(key), PutPayload::from_static(b"x"))
                .await
                .unwrap();
        }
        let store = HookedStore::new(inner, SecondPageFails(AtomicUsize::new(0)));
        let listed: Vec<Result<ObjectMeta>> = store.list(None).collect().await;
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert!(listed[0].is_ok() && listed[1].is_err());
        assert!(store.list(None).try_collect::<Vec<_>>().await.is_ok());
    }
}
