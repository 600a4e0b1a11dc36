//! Reading request frames within the agent-wide request budget.
//!
//! Every Kafka request is a 4-byte size and that many bytes. A connection's
//! read buffer grows only as bytes arrive, and every byte in it is first
//! taken from one budget shared by all connections (Kafka's
//! `queued.max.request.bytes`): with the budget spent, connections stop
//! reading (their clients wait in TCP) until admitted requests give bytes
//! back. A client therefore costs what it sent, never what it announced,
//! and all of them together at most the budget.
//!
//! Bytes are taken as they arrive rather than a frame's announced size up
//! front (as Kafka's memory pool does): a client announcing 90 MiB and
//! sending two bytes holds two bytes. A frame begun must make progress:
//! one that has not grown for `stall` (its client stopped sending, or the
//! budget is spent by other half frames) ends the connection, which gives
//! its bytes back, so half frames cannot hold the budget between them.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Most bytes read per step: each step takes its bytes from the budget, and
/// room in the buffer, first. A step is at most as large as what the frame
/// already holds (and at least [`MIN_STEP`]), so a client that announces a
/// large frame and sends a few bytes gets a small buffer.
const STEP: usize = 64 * 1024;
const MIN_STEP: usize = 4 * 1024;

/// The agent-wide budget for request bytes read and not yet admitted.
#[derive(Clone)]
pub struct RequestBudget {
    bytes: Arc<Semaphore>,
}

impl RequestBudget {
    pub fn new(max_bytes: usize) -> Self {
        RequestBudget {
            bytes: Arc::new(Semaphore::new(max_bytes)),
        }
    }

    /// Bytes not taken right now.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
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

    /// The next whole frame, or `None` when the client closed between
    /// frames. Cancel-safe: a call dropped while waiting loses nothing read.
    pub async fn next(&mut self) -> Option<io::Result<Frame>> {
        let entered = Instant::now();
        loop {
            let needed = match self.frame_size() {
                Err(e) => return Some(Err(self.fail(e))),
                Ok(Some(size)) if self.buf.len() >= 4 + size => return Some(Ok(self.split(size))),
                Ok(Some(size)) => 4 + size - self.buf.len(),
                Ok(None) => 4 - self.buf.len(),
            };
            let step = needed.min(STEP).min(self.buf.len().max(MIN_STEP));
            match self.read_step(step, entered).await {
                Ok(0) if self.buf.is_empty() => return None,
                Ok(0) => {
                    return Some(Err(self.fail(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the client closed in the middle of a request",
                    ))));
                }
                Ok(_) => self.progressed = Some(Instant::now()),
                Err(e) => return Some(Err(self.fail(e))),
            }
        }
    }

    /// Gives back what the buffer holds: the connection reads no more.
    fn fail(&mut self, e: io::Error) -> io::Error {
        self.buf = BytesMut::new();
        self.held = None;
        e
    }

    /// The size the frame in the buffer announces, once its 4 bytes are in.
    fn frame_size(&self) -> io::Result<Option<usize>> {
        let Some(head) = self.buf.get(..4) else {
            return Ok(None);
        };
        let size = i32::from_be_bytes(head.try_into().expect("4 bytes"));
        if size < 0 || size as usize > self.max_frame {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "frame of {size} bytes is outside 0..={} (socket.request.max.bytes)",
                    self.max_frame
                ),
            ));
        }
        Ok(Some(size as usize))
    }

    /// Takes `step` bytes of budget, then reads at most that many.
    async fn read_step(&mut self, step: usize, entered: Instant) -> io::Result<usize> {
        // A frame begun must keep growing while it is being read (`entered`:
        // the server may pause reading a busy connection); between frames,
        // waiting is the connection's idle time, which the server bounds.
        let deadline = self.progressed.map(|at| at.max(entered) + self.stall);
        let stalled = || {
            io::Error::new(
                io::ErrorKind::TimedOut,
                "a request made no progress within the stall timeout",
            )
        };
        let take = self.budget.bytes.clone().acquire_many_owned(step as u32);
        let mut permit = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, take)
                .await
                .map_err(|_| stalled())?,
            None => take.await,
        }
        .expect("the budget is never closed");
        self.buf.reserve(step);
        let mut limited = (&mut self.read).take(step as u64);
        let read = limited.read_buf(&mut self.buf);
        let n = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, read)
                .await
                .map_err(|_| stalled())??,
            None => read.await?,
        };
        // Keep what the bytes read hold; the rest goes back now.
        if let Some(kept) = permit.split(n) {
            match &mut self.held {
                Some(held) => held.merge(kept),
                None => self.held = Some(kept),
            }
        }
        drop(permit);
        Ok(n)
    }

    fn split(&mut self, size: usize) -> Frame {
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
        assert_eq!(budget.available(), (1 << 20) - 6);
        assert!(
            reader.buf.capacity() <= 4 * MIN_STEP,
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
}
