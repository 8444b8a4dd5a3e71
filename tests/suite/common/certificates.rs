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

/// A CA (`NAME-ca.pem`) and a server certificate for 127.0.0.1 it signed (`NAME.pem`,
/// `NAME.key`), good for clients too: Redis nodes present it to each other.
pub fn certificates(dir: &Path, name: &str) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let (ca_key, ca, key, csr) = (
        format!("{name}-ca.key"),
        format!("{name}-ca.pem"),
        format!("{name}.key"),
        format!("{name}.csr"),
    );
    let subject = format!("/CN=pjrt-actors test CA {name}");
    let mut args = vec!["req", "-x509"];
    args.extend(ec);
    args.extend([
        "-keyout", &ca_key, "-out", &ca, "-days", "2", "-subj", &subject,
    ]);
    openssl(dir, &args);
    let mut args = vec!["req"];
    args.extend(ec);
    args.extend(["-keyout", &key, "-out", &csr, "-subj", "/CN=127.0.0.1"]);
    openssl(dir, &args);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    let pem = format!("{name}.pem");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
}

/// A client certificate `CLIENT.pem` / `CLIENT.key` signed by `CA`'s authority (made by
/// `certificates(dir, CA)`), for mutual TLS.
pub fn client_certificate(dir: &Path, ca: &str, client: &str) {
    let (key, csr, pem) = (
        format!("{client}.key"),
        format!("{client}.csr"),
        format!("{client}.pem"),
    );
    let subject = format!("/CN=pjrt-actors test client {client}");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &subject,
        ],
    );
    let ext = format!("{client}-ext.cnf");
    std::fs::write(
        dir.join(&ext),
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
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
