//! TLS to PostgreSQL against a private server that takes TCP clients over TLS only, its
//! certificate signed by a CA of the test's own and naming `localhost` (not `127.0.0.1`):
//! `verify-full` connects to `localhost` and refuses the same server by its address,
//! `verify-ca` takes either, a certificate from another CA is refused, and what connects is
//! encrypted (the server's own `pg_stat_ssl` says so).

use gantry_store::PostgresStore;
use gantry_store::test_postgres::TestPostgres;

/// A CA, and a server certificate it signs for `names`: (CA PEM, server cert PEM, key PEM).
fn ca_and_server(names: &[&str]) -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::default();
    ca.distinguished_name.push(rcgen::DnType::CommonName, "test PostgreSQL CA");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).expect("CA");
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let mut server =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("names");
    server.distinguished_name.push(rcgen::DnType::CommonName, names[0]);
    server.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = server.signed_by(&key, &issuer).expect("signed");
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

/// How many sessions of database `db` are encrypted, by the server's own account.
fn encrypted_sessions(server: &TestPostgres, db: &str) -> i64 {
    let mut client = postgres::Client::connect(&server.socket_url("postgres"), postgres::NoTls).expect("socket");
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE s.ssl AND a.datname = $1",
            &[&db],
        )
        .expect("pg_stat_ssl")
        .get(0)
}

#[test]
fn tls_to_postgres_verifies_the_server_as_libpq_would() {
    let (ca, cert, key) = ca_and_server(&["localhost"]);
    let server = TestPostgres::start_tls("tls", &cert, &key).expect("a private PostgreSQL serving TLS");
    server.create_database("gantry").expect("a database");
    let dir = std::env::temp_dir().join(format!("gantry-pg-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, &ca).expect("CA");
    let (rogue_ca, _, _) = ca_and_server(&["localhost"]);
    let rogue_file = dir.join("rogue-ca.pem");
    std::fs::write(&rogue_file, &rogue_ca).expect("rogue CA");
    let port = server.port();
    let url = |host: &str, query: &str| format!("postgres://gantry@{host}:{port}/gantry?{query}");
    let root = format!("sslrootcert={}", ca_file.display());

    // verify-full by the name the certificate carries: connects, encrypted.
    let store = PostgresStore::open(&url("localhost", &format!("sslmode=verify-full&{root}"))).expect("verify-full");
    assert!(encrypted_sessions(&server, "gantry") >= 1, "the store's session is encrypted");
    drop(store);

    // The same server by an address its certificate does not name: verify-full refuses,
    // verify-ca (the chain only) takes it.
    let refused = PostgresStore::open(&url("127.0.0.1", &format!("sslmode=verify-full&{root}")))
        .expect_err("verify-full refuses a certificate for another name");
    assert!(refused.to_string().contains("certificate"), "{refused}");
    // Not "unreachable": a standby would wait forever for a certificate that will not change.
    assert!(matches!(refused, gantry_store::StoreError::Backend(_)), "{refused:?}");
    eprintln!("verify-full by address: {refused}");
    PostgresStore::open(&url("127.0.0.1", &format!("sslmode=verify-ca&{root}"))).expect("verify-ca");

    // A CA that did not sign the server's certificate: refused by both.
    for mode in ["verify-full", "verify-ca", "require"] {
        let rogue = format!("sslmode={mode}&sslrootcert={}", rogue_file.display());
        let refused = PostgresStore::open(&url("localhost", &rogue)).expect_err("another CA is refused");
        assert!(refused.to_string().contains("certificate"), "{mode}: {refused}");
    }

    // require without a CA: encrypted, not verified (libpq's rule); disable: the server
    // refuses plain TCP, and the default (prefer) takes TLS when the server offers it.
    PostgresStore::open(&url("127.0.0.1", "sslmode=require")).expect("require");
    let plain = PostgresStore::open(&url("127.0.0.1", "sslmode=disable")).expect_err("plain TCP refused");
    assert!(plain.to_string().contains("no pg_hba.conf entry") || plain.to_string().contains("reject"), "{plain}");
    PostgresStore::open(&format!("postgres://gantry@127.0.0.1:{port}/gantry")).expect("prefer");
    // The CA file missing, or not a certificate: a clear error before any connection.
    let missing = PostgresStore::open(&url("localhost", "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"))
        .expect_err("missing CA");
    assert!(missing.to_string().contains("/nonexistent/ca.pem"), "{missing}");
    let not_pem = dir.join("not.pem");
    std::fs::write(&not_pem, "hello").expect("file");
    let bad = PostgresStore::open(&url("localhost", &format!("sslmode=verify-full&sslrootcert={}", not_pem.display())))
        .expect_err("not a certificate");
    assert!(bad.to_string().contains("no certificate"), "{bad}");
    let _ = std::fs::remove_dir_all(&dir);
}
