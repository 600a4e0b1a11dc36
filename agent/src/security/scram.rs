//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): the server's side
//! of the exchange, as Kafka's `ScramSaslServer` runs it, and the keys a
//! credential keeps (as `ScramFormatter` derives them).
//!
//! Two SaslAuthenticate rounds: the client's first message names the user
//! and a nonce; the server answers with its nonce, the user's salt and
//! iteration count; the client proves it knows the salted password; the
//! server checks the proof against the stored key and signs the exchange
//! with the server key, so the client knows the server held the credential.
//! An unknown user gets a made-up salt and fails at the proof, exactly as a
//! wrong password does, so the exchange does not tell who has an account.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use floe_metastore::scram::{MIN_ITERATIONS, ScramCredential, ScramMechanism};
use ring::{digest, hmac, pbkdf2};

/// Kafka's message for any failed SCRAM authentication.
pub const INVALID_CREDENTIALS: &str = "Authentication failed: Invalid user credentials";

/// Longest client message taken (a user name, a nonce, a proof; Kafka
/// bounds the whole frame, see `sasl::MAX_UNAUTHENTICATED_FRAME`).
const MAX_MESSAGE: usize = 8 * 1024;

fn hmac_alg(m: ScramMechanism) -> hmac::Algorithm {
    match m {
        ScramMechanism::Sha256 => hmac::HMAC_SHA256,
        ScramMechanism::Sha512 => hmac::HMAC_SHA512,
    }
}

fn hmac(m: ScramMechanism, key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac_alg(m), key), data)
        .as_ref()
        .to_vec()
}

fn hash(m: ScramMechanism, data: &[u8]) -> Vec<u8> {
    let alg = match m {
        ScramMechanism::Sha256 => &digest::SHA256,
        ScramMechanism::Sha512 => &digest::SHA512,
    };
    digest::digest(alg, data).as_ref().to_vec()
}

/// `Hi(password, salt, i)`: what an admin client sends in an upsertion.
pub fn salted_password(
    m: ScramMechanism,
    password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Vec<u8> {
    let (alg, len) = match m {
        ScramMechanism::Sha256 => (pbkdf2::PBKDF2_HMAC_SHA256, 32),
        ScramMechanism::Sha512 => (pbkdf2::PBKDF2_HMAC_SHA512, 64),
    };
    let mut out = vec![0; len];
    let iterations = std::num::NonZeroU32::new(iterations.max(1)).expect("at least 1");
    pbkdf2::derive(alg, iterations, salt, password, &mut out);
    out
}

/// The credential a server keeps for a salted password (Kafka's
/// `ScramControlManager.finishUpsertion`).
pub fn credential(
    m: ScramMechanism,
    salt: Vec<u8>,
    salted_password: &[u8],
    iterations: i32,
) -> ScramCredential {
    let client_key = hmac(m, salted_password, b"Client Key");
    ScramCredential {
        salt,
        stored_key: hash(m, &client_key),
        server_key: hmac(m, salted_password, b"Server Key"),
        iterations,
    }
}

/// `n` random bytes from the system's generator.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut out = vec![0; n];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut out)
        .expect("the system's random generator works");
    out
}

/// A user name as SCRAM writes it: `=2C` for `,` and `=3D` for `=`; any
/// other `=` is malformed.
fn decode_saslname(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return None,
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// What the client's first message says.
#[derive(Debug, PartialEq, Eq)]
pub struct ClientFirst {
    /// `n,,` or `y,,` (or with `a=...`): echoed in the final message.
    gs2_header: String,
    /// The message without the header, part of what both sides sign.
    bare: String,
    pub user: String,
    nonce: String,
}

impl ClientFirst {
    pub fn parse(message: &[u8]) -> Result<ClientFirst, &'static str> {
        if message.len() > MAX_MESSAGE {
            return Err("client-first-message too long");
        }
        let text = std::str::from_utf8(message).map_err(|_| "not UTF-8")?;
        let mut parts = text.splitn(3, ',');
        let (flag, authzid, bare) = (
            parts.next().ok_or("no gs2 header")?,
            parts.next().ok_or("no gs2 header")?,
            parts.next().ok_or("no client-first-message-bare")?,
        );
        // Channel binding (`p=`) needs TLS's binding data; Kafka refuses it too.
        if flag != "n" && flag != "y" {
            return Err("channel binding is not supported");
        }
        let mut fields = bare.split(',');
        let user = fields
            .next()
            .and_then(|f| f.strip_prefix("n="))
            .and_then(decode_saslname)
            .filter(|u| !u.is_empty())
            .ok_or("no user name")?;
        let nonce = fields
            .next()
            .and_then(|f| f.strip_prefix("r="))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b','))
            .ok_or("no nonce")?;
        // Extensions: Kafka's only one, `tokenauth`, is for delegation
        // tokens, which floe does not issue.
        for extension in fields {
            if extension.starts_with("tokenauth=") {
                return Err("delegation tokens are not supported");
            }
        }
        if !authzid.is_empty() {
            let authzid = authzid
                .strip_prefix("a=")
                .and_then(decode_saslname)
                .ok_or("malformed authorization id")?;
            if authzid != user {
                return Err("an authorization id other than the user");
            }
        }
        Ok(ClientFirst {
            gs2_header: format!("{flag},{authzid},"),
            bare: bare.to_string(),
            user,
            nonce: nonce.to_string(),
        })
    }
}

/// The server between its first message and the client's proof.
pub struct ServerFirst {
    mechanism: ScramMechanism,
    client: ClientFirst,
    /// What the server sent: part of what both sides sign.
    message: String,
    nonce: String,
    credential: ScramCredential,
    /// False for an unknown user (its credential made up): the proof then
    /// fails whatever it is.
    known: bool,
}

impl ServerFirst {
    /// The server's first message for `client`, with the user's credential
    /// (`None`: unknown, answered with a salt made up from `fake_seed` and
    /// the name, the same for every attempt, so it looks like a real one).
    pub fn new(
        mechanism: ScramMechanism,
        client: ClientFirst,
        credential: Option<ScramCredential>,
        fake_seed: &[u8],
    ) -> ServerFirst {
        let nonce = format!("{}{}", client.nonce, BASE64.encode(random_bytes(24)));
        let known = credential.is_some();
        // An unknown user gets a credential made up from the seed and the
        // name (the same on every attempt, a salt as long as `floe users`
        // makes), and its proof is checked against it as a real one would
        // be, so neither the answer nor the time taken tells it apart.
        let credential = credential.unwrap_or_else(|| {
            let made_up = |what: &[u8]| {
                let mut key = hmac(mechanism, fake_seed, what);
                key.extend_from_slice(client.user.as_bytes());
                hmac(mechanism, fake_seed, &key)
            };
            ScramCredential {
                salt: made_up(b"salt")[..32].to_vec(),
                stored_key: made_up(b"stored"),
                server_key: made_up(b"server"),
                iterations: MIN_ITERATIONS,
            }
        });
        let message = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credential.salt),
            credential.iterations
        );
        ServerFirst {
            mechanism,
            client,
            message,
            nonce,
            credential,
            known,
        }
    }

    pub fn message(&self) -> &[u8] {
        self.message.as_bytes()
    }

    /// The user the client named.
    pub fn user(&self) -> &str {
        &self.client.user
    }

    /// Checks the client's final message: the server's final message (its
    /// signature) if the proof is right, else why not.
    pub fn finish(self, message: &[u8]) -> Result<Vec<u8>, &'static str> {
        if message.len() > MAX_MESSAGE {
            return Err("client-final-message too long");
        }
        let text = std::str::from_utf8(message).map_err(|_| "not UTF-8")?;
        let (without_proof, proof) = text.rsplit_once(",p=").ok_or("no proof")?;
        let mut fields = without_proof.split(',');
        let binding = fields
            .next()
            .and_then(|f| f.strip_prefix("c="))
            .ok_or("no channel binding")?;
        if BASE64.decode(binding).ok().as_deref() != Some(self.client.gs2_header.as_bytes()) {
            return Err("channel binding does not match the first message");
        }
        // The server's nonce, as RFC 5802 has it; librdkafka sends its own
        // nonce before it (Kafka's server accepts any nonce that ends with
        // the server's; this takes exactly those two).
        let nonce = fields.next().and_then(|f| f.strip_prefix("r="));
        let librdkafka = nonce
            .and_then(|n| n.strip_prefix(self.client.nonce.as_str()))
            .is_some_and(|rest| rest == self.nonce);
        if nonce != Some(self.nonce.as_str()) && !librdkafka {
            return Err("nonce does not match");
        }
        let proof = BASE64.decode(proof).map_err(|_| "proof not base64")?;
        let credential = &self.credential;
        let auth_message = format!("{},{},{}", self.client.bare, self.message, without_proof);
        let m = self.mechanism;
        let signature = hmac(m, &credential.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err(INVALID_CREDENTIALS);
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        let same: bool = subtle::ConstantTimeEq::ct_eq(
            hash(m, &client_key).as_slice(),
            &credential.stored_key[..],
        )
        .into();
        if !same || !self.known {
            return Err(INVALID_CREDENTIALS);
        }
        let server_signature = hmac(m, &credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", BASE64.encode(server_signature)).into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's side of the exchange, as librdkafka runs it.
    struct Client {
        m: ScramMechanism,
        password: Vec<u8>,
        first_bare: String,
        nonce: String,
    }

    impl Client {
        fn first(m: ScramMechanism, user: &str, password: &str) -> (Client, Vec<u8>) {
            let nonce = "fyko+d2lbbFgONRv9qkxdawL".to_string();
            let first_bare = format!("n={user},r={nonce}");
            let client = Client {
                m,
                password: password.as_bytes().to_vec(),
                first_bare: first_bare.clone(),
                nonce,
            };
            (client, format!("n,,{first_bare}").into_bytes())
        }

        /// The final message for the server's first, and the server
        /// signature to expect.
        fn last(&self, server_first: &[u8]) -> (Vec<u8>, Vec<u8>) {
            self.last_with(server_first, "")
        }

        /// With `before` ahead of the nonce (librdkafka puts its own there).
        fn last_with(&self, server_first: &[u8], before: &str) -> (Vec<u8>, Vec<u8>) {
            let text = std::str::from_utf8(server_first).unwrap();
            let mut f = text.split(',');
            let nonce = f.next().unwrap().strip_prefix("r=").unwrap();
            assert!(nonce.starts_with(&self.nonce));
            let salt = BASE64
                .decode(f.next().unwrap().strip_prefix("s=").unwrap())
                .unwrap();
            let i: u32 = f
                .next()
                .unwrap()
                .strip_prefix("i=")
                .unwrap()
                .parse()
                .unwrap();
            let salted = salted_password(self.m, &self.password, &salt, i);
            let without_proof = format!("c={},r={before}{nonce}", BASE64.encode("n,,"));
            let auth = format!("{},{text},{without_proof}", self.first_bare);
            let client_key = hmac(self.m, &salted, b"Client Key");
            let stored = hash(self.m, &client_key);
            let signature = hmac(self.m, &stored, auth.as_bytes());
            let proof: Vec<u8> = client_key
                .iter()
                .zip(&signature)
                .map(|(a, b)| a ^ b)
                .collect();
            let server_key = hmac(self.m, &salted, b"Server Key");
            let expected = format!(
                "v={}",
                BASE64.encode(hmac(self.m, &server_key, auth.as_bytes()))
            );
            (
                format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes(),
                expected.into_bytes(),
            )
        }
    }

    fn stored(m: ScramMechanism, password: &str) -> ScramCredential {
        let salt = b"some salt".to_vec();
        let salted = salted_password(m, password.as_bytes(), &salt, 4096);
        credential(m, salt, &salted, 4096)
    }

    fn run(
        m: ScramMechanism,
        said: &str,
        known: Option<ScramCredential>,
    ) -> Result<(), &'static str> {
        let (client, first) = Client::first(m, "alice", said);
        let server = ServerFirst::new(m, ClientFirst::parse(&first).unwrap(), known, b"seed");
        let (last, expected) = client.last(server.message());
        let answer = server.finish(&last)?;
        assert_eq!(answer, expected, "the server signs the exchange");
        Ok(())
    }

    #[test]
    fn a_right_password_passes_and_a_wrong_one_or_unknown_user_fails_alike() {
        for m in ScramMechanism::ALL {
            assert_eq!(run(m, "pencil", Some(stored(m, "pencil"))), Ok(()));
            assert_eq!(
                run(m, "pen", Some(stored(m, "pencil"))),
                Err(INVALID_CREDENTIALS)
            );
            assert_eq!(run(m, "pencil", None), Err(INVALID_CREDENTIALS));
        }
    }

    /// An unknown user's made-up salt is as long as a real one and the same
    /// on every attempt, so a handshake does not tell who exists.
    #[test]
    fn an_unknown_users_salt_looks_real_and_stays_the_same() {
        let m = ScramMechanism::Sha512;
        let salt_of = |user: &str| {
            let (_, first) = Client::first(m, user, "x");
            let server = ServerFirst::new(m, ClientFirst::parse(&first).unwrap(), None, b"seed");
            let text = String::from_utf8(server.message().to_vec()).unwrap();
            let salt = text
                .split(',')
                .nth(1)
                .unwrap()
                .strip_prefix("s=")
                .unwrap()
                .to_string();
            BASE64.decode(salt).unwrap()
        };
        assert_eq!(salt_of("mallory").len(), 32);
        assert_eq!(salt_of("mallory"), salt_of("mallory"));
        assert_ne!(salt_of("mallory"), salt_of("trudy"));
    }

    /// librdkafka's final message repeats its nonce before the server's, as
    /// Kafka's server allows; nothing else goes before it.
    #[test]
    fn librdkafkas_nonce_is_taken_and_no_other_prefix() {
        let m = ScramMechanism::Sha256;
        for (before, ok) in [("fyko+d2lbbFgONRv9qkxdawL", true), ("other", false)] {
            let (client, first) = Client::first(m, "alice", "pencil");
            let server = ServerFirst::new(
                m,
                ClientFirst::parse(&first).unwrap(),
                Some(stored(m, "pencil")),
                b"seed",
            );
            let (last, _) = client.last_with(server.message(), before);
            assert_eq!(server.finish(&last).is_ok(), ok, "{before}");
        }
    }

    /// RFC 7677's example: SCRAM-SHA-256 with user "user", password "pencil".
    #[test]
    fn rfc_7677_example_keys() {
        let m = ScramMechanism::Sha256;
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = salted_password(m, b"pencil", &salt, 4096);
        let c = credential(m, salt, &salted, 4096);
        // ServerSignature of the RFC's exchange, computed from its AuthMessage.
        let auth = "n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        assert_eq!(
            BASE64.encode(hmac(m, &c.server_key, auth.as_bytes())),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
    }

    #[test]
    fn malformed_first_messages_are_refused() {
        let parse = |s: &str| ClientFirst::parse(s.as_bytes());
        assert_eq!(parse("n,,n=a=3Db=2Cc,r=xyz").unwrap().user, "a=b,c");
        assert!(parse("n,a=alice,n=alice,r=x").is_ok());
        assert!(
            parse("n,a=bob,n=alice,r=x").is_err(),
            "acting as another user"
        );
        assert!(parse("p=tls-unique,,n=alice,r=x").is_err());
        assert!(parse("n,,n=al=ice,r=x").is_err());
        assert!(parse("n,,n=,r=x").is_err());
        assert!(parse("n,,n=alice").is_err());
        assert!(parse("n,,n=alice,r=x,tokenauth=true").is_err());
        assert!(parse("n,,n=alice,r=x,other=1").is_ok());
        assert!(parse("garbage").is_err());
    }
}
