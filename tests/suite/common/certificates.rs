//! Certificates for the TLS tests, made with the `openssl` command: a CA, a server certificate
//! for 127.0.0.1 it signed, and client certificates it signed (mutual TLS). Shared by the Redis
//! tier's TLS tests (tests/fleet_tls.rs) and the server's (cli/tests/serve_tls.rs).
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

pub fn openssl(dir: &Path, args: &[&str]) {
    let o = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The options that make a new P-256 key, unencrypted.
const NEW_EC_KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// A CA (`NAME-ca.pem`) and a server certificate for 127.0.0.1 it signed (`NAME.pem`,
/// `NAME.key`), good for clients too: Redis nodes present it to each other.
pub fn certificates(dir: &Path, name: &str) {
    let (ca_key, ca) = (format!("{name}-ca.key"), format!("{name}-ca.pem"));
    let subject = format!("/CN=pjrt-actors test CA {name}");
    let mut args = vec!["req", "-x509"];
    args.extend(NEW_EC_KEY);
    args.extend([
        "-keyout", &ca_key, "-out", &ca, "-days", "2", "-subj", &subject,
    ]);
    openssl(dir, &args);
    signed_by(
        dir,
        name,
        name,
        "/CN=127.0.0.1",
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n",
    );
}

/// A client certificate `CLIENT.pem` / `CLIENT.key` signed by `CA`'s authority (made by
/// `certificates(dir, CA)`), for mutual TLS.
pub fn client_certificate(dir: &Path, ca: &str, client: &str) {
    let subject = format!("/CN=pjrt-actors test client {client}");
    let extensions = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";
    signed_by(dir, ca, client, &subject, extensions);
}

/// A new key `NAME.key` and its certificate `NAME.pem` for `subject`, with `extensions`,
/// signed by `CA`'s authority.
fn signed_by(dir: &Path, ca: &str, name: &str, subject: &str, extensions: &str) {
    let (key, csr, pem, ext) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}-ext.cnf"),
    );
    let mut args = vec!["req"];
    args.extend(NEW_EC_KEY);
    args.extend(["-keyout", &key, "-out", &csr, "-subj", subject]);
    openssl(dir, &args);
    std::fs::write(dir.join(&ext), extensions).unwrap();
    let (ca_pem, ca_key) = (format!("{ca}-ca.pem"), format!("{ca}-ca.key"));
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_pem,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &ext,
        ],
    );
}
