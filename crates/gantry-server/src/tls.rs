//! HTTPS for the controller. Without an operator's certificate, the first start creates a
//! private CA in the data directory (`ca.pem`, `ca.key`); every start issues a fresh server
//! certificate from it for this machine's names, so clients that trust `ca.pem` (the CLI and
//! agents, `--ca`) verify the controller without anything else to manage. The same CA signs
//! agents' client certificates (`gantry cert agent NODE`): an agent that presents one is bound
//! to the node it names (mutual TLS, [`PeerCert`]).
//!
//! A plain HTTP request to the TLS port gets a plain HTTP 400 saying to use `https://`,
//! instead of a connection that just closes.

use crate::error::ServeError;
use axum::Router;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Whether agents must present a client certificate from the CA.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentCerts {
    /// An agent may present one; if it does, it must name the agent's node.
    #[default]
    Optional,
    /// Agent calls without a client certificate for their node are refused (401).
    Required,
}

/// The controller's TLS material.
#[derive(Clone, Debug)]
pub struct TlsSetup {
    /// PEM certificate chain of the server.
    pub cert: PathBuf,
    /// Its PEM private key.
    pub key: PathBuf,
    /// The CA that signs agents' client certificates (`None`: no client certificates).
    pub client_ca: Option<PathBuf>,
    pub agent_certs: AgentCerts,
}

/// The verified client certificate of a connection, if it presented one (an agent's).
#[derive(Clone, Debug)]
pub struct PeerCert(pub Option<CertificateDer<'static>>);

impl PeerCert {
    /// Is this certificate valid for node `name` (its DNS subject name)?
    pub fn names(&self, node: &str) -> bool {
        let Some(der) = &self.0 else { return false };
        let Ok(cert) = webpki::EndEntityCert::try_from(der) else { return false };
        let Ok(name) = rustls::pki_types::ServerName::try_from(node) else { return false };
        cert.verify_is_valid_for_subject_name(&name).is_ok()
    }
}

/// The data directory's CA: certificate, key.
pub const CA_CERT: &str = gantry_api::connection::CA_FILE;
const CA_KEY: &str = "ca.key";
const SERVER_CERT: &str = "server.pem";
const SERVER_KEY: &str = "server.key";

/// How long certificates made here are valid: the CA ten years; a server certificate one year
/// (a new one is issued at every start); an agent's two years.
const CA_DAYS: i64 = 3650;
const SERVER_DAYS: i64 = 365;
const AGENT_DAYS: i64 = 730;

/// How long a connection may take to send its first byte and finish the handshake: a client
/// that opens connections and says nothing must not hold them.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

fn tls_error(what: &str) -> impl Fn(rcgen::Error) -> ServeError + '_ {
    move |e| ServeError::Config(format!("{what}: {e}"))
}

fn pem_error(path: &Path) -> impl Fn(rustls::pki_types::pem::Error) -> ServeError + '_ {
    move |e| ServeError::Config(format!("{}: {e}", path.display()))
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> ServeError + '_ {
    move |e| ServeError::Io(format!("{}: {e}", path.display()))
}

/// The CA's fixed parameters: an issuer is rebuilt from them and the stored key.
fn ca_params() -> rcgen::CertificateParams {
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name.push(rcgen::DnType::CommonName, "gantry controller CA");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
    params
}

fn valid_for(params: &mut rcgen::CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(days);
}

/// Write a file only its owner may read (keys) or anyone may (certificates).
fn write(path: &Path, text: &str, private: bool) -> Result<(), ServeError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mode = if private { 0o600 } else { 0o644 };
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file =
        std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp).map_err(io_error(&tmp))?;
    std::io::Write::write_all(&mut file, text.as_bytes()).map_err(io_error(&tmp))?;
    file.set_permissions(std::fs::Permissions::from_mode(mode)).map_err(io_error(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io_error(path))
}

/// What [`local_ca`] did.
#[derive(Debug)]
pub struct LocalCa {
    pub setup: TlsSetup,
    /// `ca.pem`: what clients verify the controller with.
    pub ca_file: PathBuf,
    /// SHA-256 of the CA certificate (hex pairs), to compare out of band.
    pub fingerprint: String,
    /// This start created the CA.
    pub created: bool,
}

/// The data directory's CA (created if absent) and a fresh server certificate for `names`
/// (host names and IP addresses clients use to reach this controller).
pub fn local_ca(data_dir: &Path, names: &[String], agent_certs: AgentCerts) -> Result<LocalCa, ServeError> {
    let (ca_file, key_file) = (data_dir.join(CA_CERT), data_dir.join(CA_KEY));
    let created = !ca_file.exists() || !key_file.exists();
    if created {
        let key = rcgen::KeyPair::generate().map_err(tls_error("generating the CA key"))?;
        let mut params = ca_params();
        valid_for(&mut params, CA_DAYS);
        let cert = params.self_signed(&key).map_err(tls_error("creating the CA"))?;
        write(&key_file, &key.serialize_pem(), true)?;
        write(&ca_file, &cert.pem(), false)?;
    }
    let (cert_pem, key_pem) = issue(data_dir, names, SERVER_DAYS, "gantry controller", Purpose::Server)?;
    let (cert, key) = (data_dir.join(SERVER_CERT), data_dir.join(SERVER_KEY));
    write(&key, &key_pem, true)?;
    write(&cert, &cert_pem, false)?;
    let fingerprint = fingerprint(&ca_file)?;
    let setup = TlsSetup { cert, key, client_ca: Some(ca_file.clone()), agent_certs };
    Ok(LocalCa { setup, ca_file, fingerprint, created })
}

/// What a certificate is for: it says so (extended key usage), and is good for nothing else —
/// an agent's client certificate is not a server certificate for its node's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Purpose {
    Server,
    Client,
}

/// A certificate and key signed by the data directory's CA, valid for `names`, for `purpose`.
fn issue(
    data_dir: &Path,
    names: &[String],
    days: i64,
    common_name: &str,
    purpose: Purpose,
) -> Result<(String, String), ServeError> {
    let key_file = data_dir.join(CA_KEY);
    let ca_key_pem = std::fs::read_to_string(&key_file).map_err(io_error(&key_file))?;
    let ca_key = rcgen::KeyPair::from_pem(&ca_key_pem).map_err(tls_error("reading the CA key"))?;
    let issuer = rcgen::Issuer::new(ca_params(), ca_key);
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(tls_error("certificate names"))?;
    params.distinguished_name.push(rcgen::DnType::CommonName, common_name);
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature, rcgen::KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![match purpose {
        Purpose::Server => rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        Purpose::Client => rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    }];
    valid_for(&mut params, days);
    let key = rcgen::KeyPair::generate().map_err(tls_error("generating a key"))?;
    let cert = params.signed_by(&key, &issuer).map_err(tls_error("signing a certificate"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// An agent's client certificate for node `node`, from the data directory's CA: PEM
/// certificate and key (`gantry cert agent NODE`).
pub fn issue_agent_cert(data_dir: &Path, node: &str) -> Result<(String, String), ServeError> {
    if rustls::pki_types::ServerName::try_from(node).is_err() || node.parse::<std::net::IpAddr>().is_ok() {
        return Err(ServeError::Config(format!(
            "node {node:?} is not a DNS name: an agent certificate names its node as one"
        )));
    }
    if !data_dir.join(CA_KEY).exists() {
        return Err(ServeError::Config(format!(
            "no CA in {} (its ca.key is created by the first `gantry serve` with TLS there)",
            data_dir.display()
        )));
    }
    issue(data_dir, &[node.to_string()], AGENT_DAYS, &format!("gantry agent {node}"), Purpose::Client)
}

/// SHA-256 of the first certificate of a PEM file, as `AB:CD:…`.
pub fn fingerprint(pem_file: &Path) -> Result<String, ServeError> {
    use sha2::Digest;
    let der = CertificateDer::from_pem_file(pem_file)
        .map_err(|e| ServeError::Config(format!("{}: {e}", pem_file.display())))?;
    let digest = sha2::Sha256::digest(der.as_ref());
    Ok(digest.iter().map(|b| format!("{b:02X}")).collect::<Vec<_>>().join(":"))
}

/// The names a server certificate made here is for: localhost, loopback, this machine's
/// name, the listen address when it is a specific one, and any given.
pub fn server_names(listen: std::net::SocketAddr, hostname: &str, extra: &[String]) -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
    if !hostname.is_empty() {
        names.push(hostname.to_string());
    }
    if !listen.ip().is_unspecified() {
        names.push(listen.ip().to_string());
    }
    names.extend(extra.iter().cloned());
    names.sort();
    names.dedup();
    names
}

/// The rustls configuration of `setup`: the server's certificate; client certificates from
/// `client_ca` accepted (verified) but not demanded at the handshake — the API decides who
/// needs one.
pub fn server_config(setup: &TlsSetup) -> Result<Arc<rustls::ServerConfig>, ServeError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&setup.cert)
        .map_err(pem_error(&setup.cert))?
        .collect::<Result<_, _>>()
        .map_err(pem_error(&setup.cert))?;
    if certs.is_empty() {
        return Err(ServeError::Config(format!("{}: no PEM certificate in it", setup.cert.display())));
    }
    let key = PrivateKeyDer::from_pem_file(&setup.key).map_err(pem_error(&setup.key))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ServeError::Config(format!("TLS: {e}")))?;
    let builder = match &setup.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca).map_err(pem_error(ca))? {
                roots
                    .add(cert.map_err(pem_error(ca))?)
                    .map_err(|e| ServeError::Config(format!("{}: {e}", ca.display())))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| ServeError::Config(format!("client CA {}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
        None if setup.agent_certs == AgentCerts::Required => {
            return Err(ServeError::Config("agent certificates are required but no client CA is given".into()));
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| ServeError::Config(format!("{} and {}: {e}", setup.cert.display(), setup.key.display())))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serve `app` on `listener` until `shutdown` fires: over TLS with `config`, else plain HTTP
/// (`--insecure-http`). Either way every connection answers at once ([`no_delay`]).
pub async fn serve_either(
    listener: tokio::net::TcpListener,
    config: Option<Arc<rustls::ServerConfig>>,
    app: Router,
    shutdown: tokio::sync::oneshot::Receiver<()>,
) -> std::io::Result<()> {
    match config {
        Some(config) => serve(listener, Some(config), app, shutdown).await,
        None => serve(listener, None, app, shutdown).await,
    }
}

/// How long a client may take to send a request's head (its line and headers), on each
/// request of a connection: a client that trickles them is dropped (hyper closes the
/// connection) instead of holding it open for ever.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP/1.1 over `io`, each request carrying `peer` (the connection's client certificate),
/// with [`HEADER_READ_TIMEOUT`] on every request's head.
async fn http1<I>(io: I, peer: PeerCert, app: Router)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
        request.extensions_mut().insert(peer.clone());
        tower::ServiceExt::oneshot(app.clone(), request)
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(hyper_util::rt::TokioIo::new(crate::json_errors::JsonErrors::new(io)), service)
        .await;
    if let Err(e) = served {
        tracing::debug!(error = %e, "a connection ended with an error");
    }
}

/// Serve `app` on `listener` until `shutdown` fires: over TLS with `config`, else plain HTTP.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: Option<Arc<rustls::ServerConfig>>,
    app: Router,
    mut shutdown: tokio::sync::oneshot::Receiver<()>,
) -> std::io::Result<()> {
    let acceptor = config.map(tokio_rustls::TlsAcceptor::from);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, say: wait a little rather than spin.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => return Ok(()),
        };
        no_delay(&stream);
        match &acceptor {
            Some(acceptor) => tokio::spawn(connection(stream, acceptor.clone(), app.clone())),
            None => tokio::spawn(http1(stream, PeerCert(None), app.clone())),
        };
    }
}

/// Send each answer as soon as it is written. Without this, Nagle's algorithm holds the last
/// small TLS record of an answer until the client acknowledges the one before, and a client
/// that delays its acknowledgements (Linux: up to 40 ms) waits that long: measured as a 44 ms
/// p99 on agents' heartbeats (`cargo bench -p gantry --bench agents`).
pub fn no_delay(stream: &tokio::net::TcpStream) {
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "could not set TCP_NODELAY on a connection");
    }
}

/// One connection: refuse plain HTTP in words, else the handshake and HTTP/1.1 over it, each
/// request carrying the connection's client certificate.
async fn connection(stream: tokio::net::TcpStream, acceptor: tokio_rustls::TlsAcceptor, app: Router) {
    let mut first = [0u8; 1];
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.peek(&mut first)).await {
        Ok(Ok(1)) => {}
        _ => return,
    }
    // Every TLS connection opens with a handshake record (content type 22).
    if first[0] != 0x16 {
        refuse_plain_http(stream).await;
        return;
    }
    let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await else { return };
    let peer = PeerCert(tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.clone().into_owned()));
    http1(tls, peer, app).await;
}

/// Answer a plain HTTP request on the TLS port with a plain 400 that says what to do.
async fn refuse_plain_http(mut stream: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Read what was sent (its head, at most 16 KiB), so closing does not reset the connection
    // before the client reads the answer.
    let mut buf = vec![0u8; 16 << 10];
    let mut got = 0;
    while got < buf.len() {
        match tokio::time::timeout(Duration::from_millis(500), stream.read(&mut buf[got..])).await {
            Ok(Ok(n)) if n > 0 => got += n,
            _ => break,
        }
        if buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let body = r#"{"error":"this gantry controller speaks HTTPS only: use https://HOST:PORT with its CA file (--ca, default the data directory's ca.pem)"}"#;
    let reply = format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The DER of an extended key usage OID: id-kp-serverAuth (…3.1) or id-kp-clientAuth (…3.2).
    fn eku(last: u8) -> [u8; 10] {
        [0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, last]
    }

    fn has(der: &[u8], needle: &[u8]) -> bool {
        der.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn an_agent_certificate_is_for_client_auth_only_and_the_servers_for_server_auth() {
        let dir = std::env::temp_dir().join(format!("gantry-tls-eku-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        crate::runner::private_dir(&dir).expect("dir");
        let ca = local_ca(&dir, &["localhost".into()], AgentCerts::Optional).expect("CA");
        let der = |pem: &str| -> Vec<u8> {
            use rustls::pki_types::pem::PemObject;
            CertificateDer::from_pem_slice(pem.as_bytes()).expect("a certificate").to_vec()
        };
        let (agent, _) = issue_agent_cert(&dir, "gpu01").expect("agent certificate");
        let agent = der(&agent);
        assert!(has(&agent, &eku(2)) && !has(&agent, &eku(1)), "client auth only");
        let server = der(&std::fs::read_to_string(&ca.setup.cert).expect("server certificate"));
        assert!(has(&server, &eku(1)) && !has(&server, &eku(2)), "server auth only");
        let refused = issue_agent_cert(&dir, "not a name").expect_err("not a DNS name").to_string();
        assert!(refused.contains("not a DNS name"), "{refused}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
