//! Reading request frames within the agent-wide request budget.
//!
//! Every Kafka request is a 4-byte size and that many bytes. Every byte a
//! connection reads is first taken from one budget shared by all connections
//! (Kafka's `queued.max.request.bytes`): with the budget spent, connections
//! stop reading (their clients wait in TCP) until admitted requests give bytes
//! back, and all of them together hold at most the budget.
//!
//! A frame of ordinary size (at most a sixteenth of the budget; Kafka
//! clients send 1 MiB requests by default) takes all its bytes at once when
//! its size arrives, as Kafka's memory pool does: whoever holds budget holds
//! all it needs, so requests never wait on each other's half frames. A larger
//! frame takes its bytes as they arrive, so a client that announces 90 MiB and
//! sends two bytes holds two bytes (and one more while it waits). A frame
//! begun must make progress: one that has not grown for `stall` while being
//! read (its client stopped sending, or, for a large frame, the budget is spent
//! by other large half frames) ends the connection and gives its bytes back.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use floe_protocol::frame;
use futures::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Most bytes a large frame reads per step, taken from the budget first.
const STEP: usize = 64 * 1024;

/// The agent-wide budget for request bytes read and not yet admitted.
#[derive(Clone)]
pub struct RequestBudget {
    bytes: Arc<Semaphore>,
    max: usize,
}

impl RequestBudget {
    pub fn new(max_bytes: usize) -> Self {
        RequestBudget {
            bytes: Arc::new(Semaphore::new(max_bytes)),
            max: max_bytes,
        }
    }

    /// Frames up to this size (with their 4-byte size) take their bytes at once.
    fn whole_frame_max(&self) -> usize {
        (self.max / 16).max(4 + 64 * 1024).min(self.max)
    }

    /// Bytes not taken right now.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }
}

/// `wait`, or a stall (`TimedOut`) if `deadline` passes first.
async fn within<T>(deadline: Option<Instant>, wait: impl Future<Output = T>) -> io::Result<T> {
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, wait).await.map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "a request made no progress within the stall timeout",
            )
        }),
        None => Ok(wait.await),
    }
}

/// A whole request frame (without its size), and the budget its bytes
/// hold: drop it once the request is admitted.
pub struct Frame {
    pub bytes: BytesMut,
    pub held: OwnedSemaphorePermit,
}

/// Splits a connection's bytes into request frames, within the budget.
pub struct FrameReader<R> {
    read: R,
    buf: BytesMut,
    /// The budget taken for the bytes in `buf`.
    held: Option<OwnedSemaphorePermit>,
    budget: RequestBudget,
    max_frame: usize,
    stall: Duration,
    /// When the frame being read last grew (`None` between frames).
    progressed: Option<Instant>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(read: R, budget: RequestBudget, max_frame: usize, stall: Duration) -> Self {
        FrameReader {
            read,
            buf: BytesMut::new(),
            held: None,
            budget,
            max_frame,
            stall,
            progressed: None,
        }
    }

    /// From now on, frames' bytes are taken from `budget`. Only between
    /// frames (nothing of one read and held): a frame begun keeps its own.
    pub fn set_budget(&mut self, budget: RequestBudget) {
        debug_assert!(self.held.is_none() && self.buf.is_empty());
        if self.held.is_none() && self.buf.is_empty() {
            self.budget = budget;
        }
    }

    /// From now on, frames of at most `max_frame` bytes (a connection not
    /// yet authenticated gets a smaller bound than one that is).
    pub fn set_max_frame(&mut self, max_frame: usize) {
        self.max_frame = max_frame;
    }

    /// The next whole frame, or `None` when the client closed between
    /// frames. Cancel-safe: a call dropped while waiting loses nothing read.
    pub async fn next(&mut self) -> Option<io::Result<Frame>> {
        let entered = Instant::now();
        loop {
            let size = match frame::frame_size(&self.buf, self.max_frame) {
                Err(e) => return Some(Err(self.fail(e))),
                Ok(Some(size)) if self.buf.len() >= 4 + size => {
                    return Some(Ok(self.split(size)));
                }
                Ok(size) => size,
            };
            let read = self.read_more(size, entered).await;
            if let Some(end) = self.ended(read) {
                return end;
            }
        }
    }

    /// The API key of the next frame, read before the rest of it (which
    /// [`FrameReader::next`] then reads): a connection can wait for its
    /// turn to run a request without holding budget for its bytes, as
    /// Kafka reads nothing of a connection while its last request runs.
    /// `Some(Ok(None))` for a frame too short to hold one (the next read
    /// finds it undecodable); `None` when the client closed between frames.
    /// Cancel-safe.
    pub async fn next_api_key(&mut self) -> Option<io::Result<Option<i16>>> {
        const HEAD: usize = 4 + 2;
        let entered = Instant::now();
        loop {
            // Never past this frame: its size first, then its key.
            let want = match frame::frame_size(&self.buf, self.max_frame) {
                Err(e) => return Some(Err(self.fail(e))),
                Ok(Some(size)) if size < 2 => return Some(Ok(None)),
                Ok(Some(_)) if self.buf.len() >= HEAD => {
                    return Some(Ok(Some(i16::from_be_bytes([self.buf[4], self.buf[5]]))));
                }
                Ok(Some(_)) => HEAD,
                Ok(None) => 4,
            };
            let deadline = self.progressed.map(|at| at.max(entered) + self.stall);
            let read = async {
                self.reserve(want, None).await?;
                let len = self.buf.len();
                self.read_up_to(want - len, deadline).await
            };
            let read = read.await;
            if let Some(end) = self.ended(read) {
                return end;
            }
        }
    }

    /// What a read of more bytes ends, if anything: the connection (closed
    /// between requests: `None`; in the middle of one, or failing: an
    /// error). Bytes read are progress.
    fn ended<T>(&mut self, read: io::Result<usize>) -> Option<Option<io::Result<T>>> {
        match read {
            Ok(0) if self.buf.is_empty() => Some(None),
            Ok(0) => Some(Some(Err(self.fail(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the client closed in the middle of a request",
            ))))),
            Ok(_) => {
                self.progressed = Some(Instant::now());
                None
            }
            Err(e) => Some(Some(Err(self.fail(e)))),
        }
    }

    /// Gives back what the buffer holds: the connection reads no more.
    fn fail(&mut self, e: io::Error) -> io::Error {
        self.buf = BytesMut::new();
        self.held = None;
        e
    }

    /// Reads more of the frame whose size is `size` (`None`: its 4-byte
    /// size is not all in yet), holding budget for every byte first.
    async fn read_more(&mut self, size: Option<usize>, entered: Instant) -> io::Result<usize> {
        // A frame begun must keep growing while it is being read (`entered`:
        // the server may pause reading a busy connection); between frames,
        // waiting is the connection's idle time, which the server bounds.
        let deadline = self.progressed.map(|at| at.max(entered) + self.stall);
        let len = self.buf.len();
        match size {
            None => {
                self.reserve(4, None).await?;
                self.read_up_to(4 - len, deadline).await
            }
            Some(size) if 4 + size <= self.budget.whole_frame_max() => {
                // All of it at once; waiting for it is not the client's stall.
                self.reserve(4 + size, None).await?;
                self.read_up_to(4 + size - len, deadline).await
            }
            Some(size) => {
                // One byte's budget while waiting for the client, then what
                // has arrived, up to a step, without waiting again.
                self.reserve(len + 1, deadline).await?;
                let n = self.read_up_to(1, deadline).await?;
                if n == 0 {
                    return Ok(0);
                }
                // A step grows with the frame: a trickle gets a small buffer.
                let step = (4 + size - self.buf.len())
                    .min(STEP)
                    .min(self.buf.len().max(4096));
                self.reserve(self.buf.len() + step, deadline).await?;
                let more = self
                    .read_up_to(step, None)
                    .now_or_never()
                    .transpose()?
                    .unwrap_or(0);
                self.keep_only(self.buf.len());
                Ok(n + more)
            }
        }
    }

    /// Holds budget for `total` bytes (what the buffer holds and will).
    async fn reserve(&mut self, total: usize, deadline: Option<Instant>) -> io::Result<()> {
        let have = self.held.as_ref().map_or(0, |h| h.num_permits());
        if have >= total {
            return Ok(());
        }
        let take = self
            .budget
            .bytes
            .clone()
            .acquire_many_owned((total - have) as u32);
        let taken = within(deadline, take)
            .await?
            .expect("the budget is never closed");
        match &mut self.held {
            Some(held) => held.merge(taken),
            None => self.held = Some(taken),
        }
        Ok(())
    }

    /// Gives back what is held beyond `total` bytes.
    fn keep_only(&mut self, total: usize) {
        if let Some(held) = &mut self.held
            && held.num_permits() > total
        {
            drop(held.split(held.num_permits() - total));
        }
    }

    /// Reads at most `max` bytes into the buffer (budget already held).
    async fn read_up_to(&mut self, max: usize, deadline: Option<Instant>) -> io::Result<usize> {
        self.buf.reserve(max);
        let mut limited = (&mut self.read).take(max as u64);
        within(deadline, limited.read_buf(&mut self.buf)).await?
    }

    fn split(&mut self, size: usize) -> Frame {
        // Reads stop at the frame's end, so the buffer holds this frame only.
        debug_assert_eq!(self.buf.len(), 4 + size);
        let mut held = self.held.take().expect("bytes in the buffer hold budget");
        let frame_held = held.split(4 + size).expect("held covers the buffer");
        if held.num_permits() > 0 {
            self.held = Some(held);
        }
        self.buf.advance(4);
        let bytes = self.buf.split_to(size);
        self.progressed = (!self.buf.is_empty()).then(Instant::now);
        Frame {
            bytes,
            held: frame_held,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    #[tokio::test]
    async fn frames_split_and_hold_their_bytes_until_dropped() {
        let budget = RequestBudget::new(1_000);
        let (mut client, server) = tokio::io::duplex(4096);
        let mut reader = FrameReader::new(server, budget.clone(), 500, Duration::from_secs(5));
        client.write_all(&frame(b"abc")).await.unwrap();
        client.write_all(&frame(b"")).await.unwrap();
        let a = reader.next().await.unwrap().unwrap();
        assert_eq!(&a.bytes[..], b"abc");
        assert_eq!(a.held.num_permits(), 7);
        let b = reader.next().await.unwrap().unwrap();
        assert!(b.bytes.is_empty());
        assert_eq!(budget.available(), 1_000 - 7 - 4);
        drop((a, b));
        assert_eq!(budget.available(), 1_000);
        drop(client);
        assert!(reader.next().await.is_none(), "closed between frames");
    }

    /// A frame's API key is read before the rest of it, never past it.
    #[tokio::test]
    async fn the_api_key_comes_first_and_alone() {
        let budget = RequestBudget::new(1_000);
        let (mut client, server) = tokio::io::duplex(4096);
        let mut reader = FrameReader::new(server, budget.clone(), 500, Duration::from_secs(5));
        client.write_all(&frame(&[0, 9, 1, 2, 3])).await.unwrap();
        client.write_all(&frame(b"x")).await.unwrap();
        client.write_all(&frame(&[0, 1])).await.unwrap();
        assert_eq!(reader.next_api_key().await.unwrap().unwrap(), Some(9));
        assert_eq!(budget.available(), 1_000 - 6, "the size and the key only");
        let first = reader.next().await.unwrap().unwrap();
        assert_eq!(&first.bytes[..], &[0, 9, 1, 2, 3]);
        assert_eq!(
            reader.next_api_key().await.unwrap().unwrap(),
            None,
            "too short"
        );
        assert_eq!(&reader.next().await.unwrap().unwrap().bytes[..], b"x");
        assert_eq!(reader.next_api_key().await.unwrap().unwrap(), Some(1));
        assert_eq!(&reader.next().await.unwrap().unwrap().bytes[..], &[0, 1]);
        drop(client);
        assert!(
            reader.next_api_key().await.is_none(),
            "closed between frames"
        );
    }

    #[tokio::test]
    async fn an_announced_size_costs_only_the_bytes_sent() {
        let budget = RequestBudget::new(1 << 20);
        let (mut client, server) = tokio::io::duplex(4096);
        let mut reader =
            FrameReader::new(server, budget.clone(), 100 << 20, Duration::from_secs(5));
        client
            .write_all(&(90i32 << 20).to_be_bytes())
            .await
            .unwrap();
        client.write_all(b"xy").await.unwrap();
        let waiting = tokio::time::timeout(Duration::from_millis(100), reader.next()).await;
        assert!(waiting.is_err(), "half a frame is not a frame");
        // The six bytes sent, and one for the read waiting for more.
        assert_eq!(budget.available(), (1 << 20) - 7);
        assert!(
            reader.buf.capacity() <= 16 * 1024,
            "{}",
            reader.buf.capacity()
        );
    }

    #[tokio::test]
    async fn a_frame_larger_than_the_limit_is_refused() {
        let (mut client, server) = tokio::io::duplex(4096);
        let mut reader =
            FrameReader::new(server, RequestBudget::new(100), 8, Duration::from_secs(5));
        client.write_all(&frame(b"123456789")).await.unwrap();
        let e = reader.next().await.unwrap().err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    /// The budget spent, connections stop reading until bytes come back;
    /// a half frame that cannot grow ends its connection at the stall
    /// timeout (so half frames cannot hold the budget between them).
    #[tokio::test(start_paused = true)]
    async fn a_spent_budget_pauses_reading_and_a_stalled_half_frame_ends() {
        let budget = RequestBudget::new(10);
        let stall = Duration::from_secs(30);
        let (mut first, server) = tokio::io::duplex(4096);
        let mut one = FrameReader::new(server, budget.clone(), 100, stall);
        first.write_all(&frame(b"123456")).await.unwrap();
        let held = one.next().await.unwrap().unwrap();
        assert_eq!(budget.available(), 0);

        let (mut second, server) = tokio::io::duplex(4096);
        let mut two = FrameReader::new(server, budget.clone(), 100, stall);
        second.write_all(&frame(b"ab")).await.unwrap();
        let paused = tokio::time::timeout(Duration::from_secs(60), two.next()).await;
        assert!(
            paused.is_err(),
            "no bytes read without budget, and no deadline between frames"
        );
        drop(held);
        let got = two.next().await.unwrap().unwrap();
        assert_eq!(&got.bytes[..], b"ab");
        drop(got);

        // A half frame whose client goes quiet ends after the stall timeout.
        second.write_all(&10i32.to_be_bytes()).await.unwrap();
        second.write_all(b"abc").await.unwrap();
        let started = Instant::now();
        let e = two.next().await.unwrap().err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= stall);
    }

    /// Requests of ordinary size take their bytes at once, so two frames
    /// that together need more than the budget do not each hold half of it
    /// and wait for the other forever: the second waits, holding its size.
    #[tokio::test(start_paused = true)]
    async fn frames_that_fit_the_budget_alone_never_wait_on_each_other() {
        let budget = RequestBudget::new(100);
        let stall = Duration::from_secs(30);
        let (mut a, server) = tokio::io::duplex(4096);
        let mut first = FrameReader::new(server, budget.clone(), 100, stall);
        let (mut b, server) = tokio::io::duplex(4096);
        let mut second = FrameReader::new(server, budget.clone(), 100, stall);
        let body = [7u8; 60];
        let whole = frame(&body);
        a.write_all(&whole[..30]).await.unwrap();
        b.write_all(&whole).await.unwrap();
        let one = tokio::time::timeout(Duration::from_secs(1), first.next()).await;
        assert!(one.is_err(), "the first frame is half sent");
        assert_eq!(budget.available(), 36, "it holds all of its 64 bytes");
        let two = tokio::time::timeout(Duration::from_secs(1), second.next()).await;
        assert!(two.is_err(), "the second waits for budget");
        assert_eq!(budget.available(), 32, "holding only its 4-byte size");
        a.write_all(&whole[30..]).await.unwrap();
        let one = first.next().await.unwrap().unwrap();
        assert_eq!(&one.bytes[..], &body[..]);
        drop(one);
        let two = second.next().await.unwrap().unwrap();
        assert_eq!(&two.bytes[..], &body[..]);
    }
}
