//! Who may talk to a metastore node: with a cluster secret configured, every
//! connection (an agent's, a tool's, another node's Raft messages) begins
//! with a mutual challenge, and a peer that cannot answer it is refused
//! before a single request is read.
//!
//! The exchange, in frames of the metastore's codec:
//! 1. the client sends [`HELLO`] and 32 random bytes (its nonce);
//! 2. the server answers its own 32 random bytes and
//!    `HMAC-SHA256(secret, "floe-metastore server" | client nonce | server nonce)`;
//! 3. the client checks that (so it knows the node holds the secret too) and
//!    sends `HMAC-SHA256(secret, "floe-metastore client" | client nonce | server nonce)`;
//! 4. the server checks it, answers [`WELCOME`], and requests follow.
//!
//! Fresh nonces on both sides keep a recorded exchange from being replayed.
//! This authenticates; it does not encrypt or protect the frames that
//! follow from someone on the path: keep the metastore's network private.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use ring::hmac;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

/// A client's first frame begins with this (a tag no request frame uses).
pub const HELLO: u8 = 40;
/// The server's last word of a good exchange.
pub const WELCOME: &[u8] = b"floe-metastore welcome";
/// How long the exchange may take.
pub const HANDSHAKE_WITHIN: Duration = Duration::from_secs(5);
/// Fewest bytes a secret may have.
pub const MIN_SECRET_BYTES: usize = 16;

const NONCE: usize = 32;

/// The secret every metastore node and client of a cluster shares.
#[derive(Clone)]
pub struct ClusterSecret(Arc<hmac::Key>);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

impl ClusterSecret {
    pub fn new(secret: &[u8]) -> Result<ClusterSecret, String> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "a cluster secret needs at least {MIN_SECRET_BYTES} bytes"
            ));
        }
        Ok(ClusterSecret(Arc::new(hmac::Key::new(
            hmac::HMAC_SHA256,
            secret,
        ))))
    }

    /// The secret in a file (its bytes, less a trailing newline).
    pub fn load(path: &Path) -> Result<ClusterSecret, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let trimmed = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
        let trimmed = trimmed.strip_suffix(b"\r").unwrap_or(trimmed);
        ClusterSecret::new(trimmed).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// An HMAC of `message` for the purpose named by `context` (a context
    /// per use, so a signature made for one is worth nothing for another).
    pub fn sign(&self, context: &[u8], message: &[u8]) -> Vec<u8> {
        self.tag(context, message, &[]).as_ref().to_vec()
    }

    /// Whether `tag` is [`ClusterSecret::sign`]'s for `context` and `message`.
    pub fn verify_signed(&self, context: &[u8], message: &[u8], tag: &[u8]) -> bool {
        self.verify(context, message, &[], tag)
    }

    fn tag(&self, role: &[u8], client: &[u8], server: &[u8]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.0);
        for part in [role, client, server] {
            ctx.update(part);
        }
        ctx.sign()
    }

    fn verify(&self, role: &[u8], client: &[u8], server: &[u8], tag: &[u8]) -> bool {
        let mut message = Vec::with_capacity(role.len() + client.len() + server.len());
        for part in [role, client, server] {
            message.extend_from_slice(part);
        }
        hmac::verify(&self.0, &message, tag).is_ok()
    }
}

const SERVER_ROLE: &[u8] = b"floe-metastore server";
const CLIENT_ROLE: &[u8] = b"floe-metastore client";

fn nonce() -> [u8; NONCE] {
    let mut n = [0; NONCE];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut n)
        .expect("the system's random generator works");
    n
}

async fn next<T: AsyncRead + AsyncWrite + Unpin>(
    framed: &mut Framed<T, LengthDelimitedCodec>,
) -> Result<Bytes, String> {
    match framed.next().await {
        Some(Ok(frame)) => Ok(frame.freeze()),
        Some(Err(e)) => Err(e.to_string()),
        None => Err("connection closed during the handshake".into()),
    }
}

/// The client's side: proves it holds the secret and checks the node does.
pub async fn client<T: AsyncRead + AsyncWrite + Unpin>(
    framed: &mut Framed<T, LengthDelimitedCodec>,
    secret: &ClusterSecret,
) -> Result<(), String> {
    let exchange = async {
        let mine = nonce();
        let mut hello = vec![HELLO];
        hello.extend_from_slice(&mine);
        framed
            .send(Bytes::from(hello))
            .await
            .map_err(|e| e.to_string())?;
        let answer = next(framed).await?;
        if answer.len() <= NONCE {
            return Err("the node does not know the cluster secret (no challenge)".to_string());
        }
        let (theirs, tag) = answer.split_at(NONCE);
        if !secret.verify(SERVER_ROLE, &mine, theirs, tag) {
            return Err("the node does not hold this cluster secret".to_string());
        }
        let proof = secret.tag(CLIENT_ROLE, &mine, theirs);
        framed
            .send(Bytes::copy_from_slice(proof.as_ref()))
            .await
            .map_err(|e| e.to_string())?;
        match next(framed).await?.as_ref() {
            WELCOME => Ok(()),
            _ => Err("the node refused this cluster secret".to_string()),
        }
    };
    tokio::time::timeout(HANDSHAKE_WITHIN, exchange)
        .await
        .map_err(|_| format!("no handshake within {HANDSHAKE_WITHIN:?}"))?
}

/// The node's side: `Ok` once the peer proved it holds the secret.
pub async fn server<T: AsyncRead + AsyncWrite + Unpin>(
    framed: &mut Framed<T, LengthDelimitedCodec>,
    secret: &ClusterSecret,
) -> Result<(), String> {
    let exchange = async {
        let hello = next(framed).await?;
        let theirs = match hello.split_first() {
            Some((&HELLO, nonce)) if nonce.len() == NONCE => nonce.to_vec(),
            _ => return Err("a peer without the cluster secret (no handshake)".to_string()),
        };
        let mine = nonce();
        let mut answer = mine.to_vec();
        answer.extend_from_slice(secret.tag(SERVER_ROLE, &theirs, &mine).as_ref());
        framed
            .send(Bytes::from(answer))
            .await
            .map_err(|e| e.to_string())?;
        let proof = next(framed).await?;
        if !secret.verify(CLIENT_ROLE, &theirs, &mine, &proof) {
            return Err("a peer with another cluster secret".to_string());
        }
        framed
            .send(Bytes::from_static(WELCOME))
            .await
            .map_err(|e| e.to_string())
    };
    tokio::time::timeout(HANDSHAKE_WITHIN, exchange)
        .await
        .map_err(|_| format!("no handshake within {HANDSHAKE_WITHIN:?}"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run(
        client_secret: Option<&[u8]>,
        server_secret: &[u8],
    ) -> (Result<(), String>, Result<(), String>) {
        let (a, b) = tokio::io::duplex(4096);
        let codec = || LengthDelimitedCodec::builder().new_codec();
        let (mut c, mut s) = (Framed::new(a, codec()), Framed::new(b, codec()));
        let server_secret = ClusterSecret::new(server_secret).unwrap();
        let client_secret = client_secret.map(|c| ClusterSecret::new(c).unwrap());
        let client = async move {
            match &client_secret {
                // The connection is dropped on failure, as a real client's.
                Some(secret) => client(&mut c, secret).await,
                // A client without the secret sends a request straight away.
                None => {
                    c.send(Bytes::from_static(&[33, 4, 0])).await.unwrap();
                    drop(c);
                    Err("sent a request".into())
                }
            }
        };
        tokio::join!(client, server(&mut s, &server_secret))
    }

    #[tokio::test]
    async fn the_same_secret_passes_and_others_are_refused_both_ways() {
        let secret = b"0123456789abcdef-secret";
        let (c, s) = run(Some(secret), secret).await;
        assert_eq!((c, s), (Ok(()), Ok(())));
        let (c, s) = run(Some(b"another secret of 16+"), secret).await;
        assert!(
            c.unwrap_err().contains("does not hold"),
            "the client checks the node first"
        );
        assert!(s.is_err());
        let (_, s) = run(None, secret).await;
        assert!(s.unwrap_err().contains("without the cluster secret"));
        assert!(ClusterSecret::new(b"short").is_err());
    }
}
