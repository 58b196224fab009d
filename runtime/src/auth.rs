//! Shared-secret authentication of every RPC between a cluster's tasks.
//!
//! The cluster file names a secret (`auth: { secret_file: PATH }`); every
//! task and master of the cluster reads the same file. A request carries
//! `authorization: Bearer <token>`, the token a BLAKE3 key derived from
//! the secret (the secret itself never goes on the wire). A task checks it
//! before it reads anything else of the request, in constant time, and
//! refuses a missing or wrong one with `UNAUTHENTICATED` and a message that
//! names nothing of the cluster.
//!
//! What it covers: a peer that can reach a task's port but does not hold
//! the secret can neither drive the task (register or run graphs, abort
//! steps) nor read its tensors or status. What it does not: the traffic is
//! not encrypted, so whoever can read it on the network sees tensors and
//! the token, and can replay the token; run clusters on a network only the
//! cluster's hosts share (docs/src/security.md). Graphs are code: a holder of
//! the secret runs what it likes on every task.

use std::path::{Path, PathBuf};
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::{Service, http};
use tonic::transport::Channel;

use crate::error::{Result, RuntimeError};

/// The fewest bytes a secret may have: 16 bytes of a random hex string
/// carry 64 bits, which no one guesses over the network.
pub const MIN_SECRET_BYTES: usize = 16;

/// Separates this use of the secret from any other (BLAKE3's key derivation
/// context).
const CONTEXT: &str = "flowlab 2026-12 task RPC authentication";

/// A cluster's secret, as the token its requests carry.
#[derive(Clone)]
pub struct Auth {
    secret_file: PathBuf,
    token: blake3::Hash,
    /// `Bearer <token hex>`, what a client sends.
    header: http::HeaderValue,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Auth {{ secret_file: {:?} }}", self.secret_file)
    }
}

impl PartialEq for Auth {
    fn eq(&self, other: &Auth) -> bool {
        self.token == other.token
    }
}

impl Eq for Auth {}

impl Auth {
    /// Reads the secret in `path` (surrounding whitespace ignored). Refused,
    /// naming the file: an unreadable or short secret, and (Unix) a file
    /// that other users may read, as ssh refuses a readable private key.
    pub fn from_file(path: &Path) -> Result<Auth> {
        let bad = |message: String| RuntimeError::Spec { path: path.into(), message };
        let bytes = std::fs::read(path).map_err(|source| RuntimeError::Io { path: path.into(), source })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path).map_err(|source| RuntimeError::Io { path: path.into(), source })?.permissions().mode();
            if mode & 0o077 != 0 {
                return Err(bad(format!("the secret file may be read by other users (mode {:o}): run chmod 600 on it", mode & 0o777)));
            }
        }
        let secret = bytes.trim_ascii();
        if secret.len() < MIN_SECRET_BYTES {
            return Err(bad(format!("the secret has {} bytes; a secret has at least {MIN_SECRET_BYTES} (e.g. `openssl rand -hex 32`)", secret.len())));
        }
        let token = blake3::Hash::from(blake3::derive_key(CONTEXT, secret));
        let header = http::HeaderValue::from_str(&format!("Bearer {}", token.to_hex())).map_err(|e| bad(format!("token: {e}")))?;
        Ok(Auth { secret_file: path.into(), token, header })
    }

    /// Writes a fresh random secret to `path`, readable by its owner only,
    /// and reads it back (a local cluster's secret, new every run).
    pub fn create(path: &Path) -> Result<Auth> {
        use rand::RngCore;
        // the thread's generator is ChaCha12 seeded from the OS
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut secret);
        let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let io = |source| RuntimeError::Io { path: path.into(), source };
        std::io::Write::write_all(&mut options.open(path).map_err(io)?, hex.as_bytes()).map_err(io)?;
        Auth::from_file(path)
    }

    /// The file the secret was read from.
    pub fn secret_file(&self) -> &Path {
        &self.secret_file
    }

    /// Whether a request with these headers holds the secret's token
    /// (compared in constant time).
    pub(crate) fn admits(&self, headers: &http::HeaderMap) -> bool {
        let Some(token) = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer ")) else {
            return false;
        };
        blake3::Hash::from_hex(token).is_ok_and(|t| t == self.token)
    }
}

/// The refusal of a request without valid credentials: nothing in it
/// names the cluster, the task or what the request asked.
pub(crate) fn refusal() -> tonic::Status {
    tonic::Status::unauthenticated("missing or wrong credentials")
}

/// A channel that adds the cluster's credentials to every request (none
/// where the cluster has no secret).
#[derive(Clone, Debug)]
pub(crate) struct AuthChannel {
    inner: Channel,
    header: Option<http::HeaderValue>,
}

impl AuthChannel {
    pub(crate) fn new(inner: Channel, auth: Option<&Auth>) -> AuthChannel {
        AuthChannel { inner, header: auth.map(|a| a.header.clone()) }
    }
}

impl Service<http::Request<Body>> for AuthChannel {
    type Response = <Channel as Service<http::Request<Body>>>::Response;
    type Error = <Channel as Service<http::Request<Body>>>::Error;
    type Future = <Channel as Service<http::Request<Body>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        if let Some(h) = &self.header {
            req.headers_mut().insert(http::header::AUTHORIZATION, h.clone());
        }
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret_file(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        #[cfg(unix)]
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        let _ = mode;
        path
    }

    #[test]
    fn a_request_is_admitted_only_with_the_token_of_the_same_secret() {
        let dir = tempfile::tempdir().unwrap();
        let a = Auth::from_file(&secret_file(dir.path(), "a", "0123456789abcdef0123\n", 0o600)).unwrap();
        let same = Auth::from_file(&secret_file(dir.path(), "b", "  0123456789abcdef0123  ", 0o400)).unwrap();
        let other = Auth::from_file(&secret_file(dir.path(), "c", "0123456789abcdef0124", 0o600)).unwrap();
        assert_eq!(a, same);
        let headers = |v: Option<&str>| {
            let mut h = http::HeaderMap::new();
            if let Some(v) = v {
                h.insert(http::header::AUTHORIZATION, http::HeaderValue::from_str(v).unwrap());
            }
            h
        };
        let sent = a.header.to_str().unwrap().to_string();
        assert!(a.admits(&headers(Some(&sent))));
        assert!(same.admits(&headers(Some(&sent))));
        assert!(!other.admits(&headers(Some(&sent))));
        assert!(!a.admits(&headers(None)));
        assert!(!a.admits(&headers(Some("Bearer 0123456789abcdef0123"))), "the secret itself is not the token");
        assert!(!a.admits(&headers(Some(sent.trim_start_matches("Bearer ")))));
        // the token is not the secret, and the secret is not in the header
        assert!(!sent.contains("0123456789abcdef0123"));
        assert!(!format!("{a:?}").contains("0123456789abcdef0123"));
    }

    #[test]
    fn short_unreadable_and_shared_secrets_are_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let short = secret_file(dir.path(), "short", "abc\n", 0o600);
        let e = Auth::from_file(&short).unwrap_err().to_string();
        assert!(e.contains("short") && e.contains("3 bytes") && e.contains("at least 16"), "{e}");
        let e = Auth::from_file(&dir.path().join("absent")).unwrap_err().to_string();
        assert!(e.contains("absent"), "{e}");
        #[cfg(unix)]
        {
            let open = secret_file(dir.path(), "open", "0123456789abcdef0123", 0o644);
            let e = Auth::from_file(&open).unwrap_err().to_string();
            assert!(e.contains("open") && e.contains("mode 644") && e.contains("chmod 600"), "{e}");
        }
    }

    #[test]
    fn created_secrets_are_private_and_differ() {
        let dir = tempfile::tempdir().unwrap();
        let a = Auth::create(&dir.path().join("a")).unwrap();
        let b = Auth::create(&dir.path().join("b")).unwrap();
        assert_ne!(a, b);
        assert_eq!(std::fs::read_to_string(a.secret_file()).unwrap().len(), 64);
        // never overwritten: a second cluster cannot take the first's file
        assert!(Auth::create(&dir.path().join("a")).is_err());
    }
}
