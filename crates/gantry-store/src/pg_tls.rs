//! TLS to PostgreSQL with libpq's `sslmode` rules, on the workspace's rustls.
//!
//! The `postgres` driver knows `sslmode=disable|prefer|require` and no certificate checks;
//! operators write libpq URLs (`?sslmode=verify-full&sslrootcert=/etc/gantry/pg-ca.pem`). So
//! the URL's TLS options are taken out here ([`TlsOptions::split`]) before the driver parses
//! the rest, and the connector applies them:
//!
//! | `sslmode`     | TLS                      | the server's certificate                         |
//! |---------------|--------------------------|--------------------------------------------------|
//! | `disable`     | never                    | —                                                |
//! | `prefer` (default) | when the server offers it | checked against `sslrootcert` when given, else not |
//! | `require`     | always                   | checked against `sslrootcert` when given, else not |
//! | `verify-ca`   | always                   | signed by `sslrootcert`                          |
//! | `verify-full` | always                   | signed by `sslrootcert` *and* naming the host    |
//!
//! Only `verify-full` stops a machine in the middle that holds a certificate from the same CA
//! for another name; only `verify-ca` and `verify-full` stop one without any. No channel
//! binding is offered (SCRAM still authenticates the password both ways).

use crate::StoreError;
use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How much the URL asks of the connection's security.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// The TLS options a PostgreSQL URL carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsOptions {
    pub mode: SslMode,
    /// The CA certificate(s), PEM, that sign the server's certificate.
    pub root: Option<PathBuf>,
}

/// Longest CA file read: a bundle of a few hundred certificates.
const ROOT_FILE_MAX: u64 = 1 << 20;

impl TlsOptions {
    /// Take `sslmode` and `sslrootcert` out of `url` (a `postgres://` URL's query, or a
    /// key=value string): the options, and the URL the driver parses.
    pub fn split(url: &str) -> Result<(TlsOptions, String), StoreError> {
        let mut options = TlsOptions { mode: SslMode::Prefer, root: None };
        let rest = if url.contains("://") {
            let (base, query) = url.split_once('?').unwrap_or((url, ""));
            let mut kept = Vec::new();
            for pair in query.split('&').filter(|p| !p.is_empty()) {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                if !options.take(key, &percent_decode(value)?)? {
                    kept.push(pair);
                }
            }
            if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) }
        } else {
            let mut kept = Vec::new();
            for part in url.split_whitespace() {
                let (key, value) = part.split_once('=').unwrap_or((part, ""));
                if !options.take(key.trim(), value.trim_matches('\''))? {
                    kept.push(part);
                }
            }
            kept.join(" ")
        };
        if matches!(options.mode, SslMode::VerifyCa | SslMode::VerifyFull) && options.root.is_none() {
            return Err(StoreError::Backend(
                "sslmode=verify-ca and verify-full need the CA that signs the server's certificate: add sslrootcert=FILE (PEM) to the store URL".into(),
            ));
        }
        Ok((options, rest))
    }

    /// Take `key=value` if it is a TLS option (true), refusing values libpq would refuse.
    fn take(&mut self, key: &str, value: &str) -> Result<bool, StoreError> {
        match key {
            "sslmode" => {
                self.mode = match value {
                    "disable" => SslMode::Disable,
                    "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    "verify-ca" => SslMode::VerifyCa,
                    "verify-full" => SslMode::VerifyFull,
                    other => {
                        return Err(StoreError::Backend(format!(
                            "sslmode={other:?} is not one gantry knows: use disable, prefer, require, verify-ca or verify-full"
                        )));
                    }
                };
                Ok(true)
            }
            "sslrootcert" => {
                if value == "system" {
                    return Err(StoreError::Backend(
                        "sslrootcert=system is not supported: name the PEM file of the CA that signs the server's certificate".into(),
                    ));
                }
                self.root = Some(PathBuf::from(value));
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// The connector for these options (`None`: plain TCP, `sslmode=disable`).
    pub fn connector(&self) -> Result<Option<RustlsConnector>, StoreError> {
        if self.mode == SslMode::Disable {
            return Ok(None);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = self.root.as_ref().map(|path| read_roots(path)).transpose()?;
        let webpki = roots
            .map(|roots| {
                rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| StoreError::Backend(format!("the CA in sslrootcert cannot verify anything: {e}")))
            })
            .transpose()?;
        let verifier: Arc<dyn ServerCertVerifier> = match (webpki, self.mode) {
            (Some(webpki), SslMode::VerifyFull) => webpki,
            (chain, _) => Arc::new(NameNotChecked { chain, provider: provider.clone() }),
        };
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| StoreError::Backend(format!("TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Some(RustlsConnector(tokio_rustls::TlsConnector::from(Arc::new(config)))))
    }

    /// The driver's own mode: it asks the server for TLS unless disabled, and insists unless
    /// `prefer`.
    pub fn driver_mode(&self) -> postgres::config::SslMode {
        match self.mode {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            _ => postgres::config::SslMode::Require,
        }
    }
}

fn percent_decode(text: &str) -> Result<String, StoreError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok());
            let byte = hex.ok_or_else(|| StoreError::Backend(format!("bad percent-encoding in {text:?}")))?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| StoreError::Backend(format!("{text:?} is not UTF-8 once decoded")))
}

fn read_roots(path: &std::path::Path) -> Result<rustls::RootCertStore, StoreError> {
    use rustls::pki_types::pem::PemObject;
    use std::io::Read;
    let shown = path.display();
    let mut text = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(ROOT_FILE_MAX + 1).read_to_end(&mut text))
        .map_err(|e| StoreError::Backend(format!("sslrootcert {shown}: {e}")))?;
    if text.len() as u64 > ROOT_FILE_MAX {
        return Err(StoreError::Backend(format!("sslrootcert {shown}: larger than {ROOT_FILE_MAX} bytes")));
    }
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&text) {
        let cert = cert.map_err(|e| StoreError::Backend(format!("sslrootcert {shown}: not PEM certificates: {e}")))?;
        roots.add(cert).map_err(|e| StoreError::Backend(format!("sslrootcert {shown}: {e}")))?;
    }
    if roots.is_empty() {
        return Err(StoreError::Backend(format!("sslrootcert {shown}: no certificate in it")));
    }
    Ok(roots)
}

/// Every mode but `verify-full`: the chain is checked against the CA when there is one
/// (`verify-ca`, or `prefer`/`require` given `sslrootcert`), never the name; without a CA
/// nothing says whose certificate it is (libpq's rule). The handshake's signatures are always
/// checked.
#[derive(Debug)]
struct NameNotChecked {
    chain: Option<Arc<rustls::client::WebPkiServerVerifier>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for NameNotChecked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else { return Ok(ServerCertVerified::assertion()) };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// The driver's TLS connector over rustls.
#[derive(Clone)]
pub struct RustlsConnector(tokio_rustls::TlsConnector);

/// One connection's TLS handshake, for the host the driver names.
pub struct RustlsConnect {
    connector: tokio_rustls::TlsConnector,
    host: ServerName<'static>,
}

impl std::fmt::Debug for RustlsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RustlsConnector")
    }
}

impl std::fmt::Debug for RustlsConnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RustlsConnect").field("host", &self.host).finish_non_exhaustive()
    }
}

impl<S> std::fmt::Debug for RustlsStream<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RustlsStream")
    }
}

impl<S> MakeTlsConnect<S> for RustlsConnector
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = rustls::pki_types::InvalidDnsNameError;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, Self::Error> {
        let host = ServerName::try_from(domain.to_string())?;
        Ok(RustlsConnect { connector: self.0.clone(), host })
    }
}

type Handshake<S> = Pin<Box<dyn Future<Output = std::io::Result<RustlsStream<S>>> + Send>>;

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = std::io::Error;
    type Future = Handshake<S>;

    fn connect(self, stream: S) -> Handshake<S> {
        Box::pin(async move { self.connector.connect(self.host, stream).await.map(RustlsStream) })
    }
}

/// A TLS session to the server.
pub struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_options_leave_the_url_and_keep_the_rest() {
        let (o, rest) = TlsOptions::split(
            "postgres://g:pw@db.example:5432/gantry?sslmode=verify-full&application_name=x&sslrootcert=%2Fetc%2Fca.pem",
        )
        .expect("parses");
        assert_eq!(o, TlsOptions { mode: SslMode::VerifyFull, root: Some("/etc/ca.pem".into()) });
        assert_eq!(rest, "postgres://g:pw@db.example:5432/gantry?application_name=x");
        let (o, rest) = TlsOptions::split("host=db user=g sslmode=require dbname=gantry").expect("parses");
        assert_eq!(o.mode, SslMode::Require);
        assert_eq!(rest, "host=db user=g dbname=gantry");
        let (o, rest) = TlsOptions::split("postgres://g@db/gantry").expect("parses");
        assert_eq!((o.mode, rest.as_str()), (SslMode::Prefer, "postgres://g@db/gantry"));
    }

    #[test]
    fn tls_options_refuse_what_libpq_would_and_what_cannot_verify() {
        for url in [
            "postgres://g@db/x?sslmode=verify-full",
            "postgres://g@db/x?sslmode=verify-ca",
            "postgres://g@db/x?sslmode=allow-ish",
            "postgres://g@db/x?sslmode=verify-full&sslrootcert=system",
            "postgres://g@db/x?sslrootcert=%zz",
        ] {
            assert!(TlsOptions::split(url).is_err(), "{url}");
        }
        let missing = TlsOptions { mode: SslMode::VerifyFull, root: Some("/nonexistent/ca.pem".into()) };
        assert!(missing.connector().is_err());
        // A directory, a file past the bound (a device or a log named by mistake), and
        // certificates that are not PEM: each refused by name before any connection.
        let dir = std::env::temp_dir().join(format!("gantry-pg-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let big = dir.join("big.pem");
        std::fs::write(&big, vec![b'A'; (ROOT_FILE_MAX + 1) as usize]).expect("file");
        let garbage = dir.join("garbage.pem");
        std::fs::write(&garbage, "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
            .expect("file");
        for (root, says) in [(dir.clone(), "Is a directory"), (big, "larger than"), (garbage, "sslrootcert")] {
            let options = TlsOptions { mode: SslMode::VerifyCa, root: Some(root.clone()) };
            let err = options.connector().expect_err("refused").to_string();
            assert!(err.contains(says), "{}: {err}", root.display());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
