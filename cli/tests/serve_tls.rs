//! `serve --tls-cert/--tls-key/--tls-client-ca` (issue 53) with real clients: curl and
//! tritonclient's HTTP and gRPC clients over TLS with certificates this test makes with openssl;
//! clients that trust another CA, speak plaintext or (with mutual TLS) bring no certificate or
//! another CA's are refused; and a handshake that never completes is cut off at the idle time,
//! its connection slot given back.

#[path = "../../tests/suite/common/certificates.rs"]
mod certificates;
mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::server::{Server, triton_script};

fn exported() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported")
}

/// A folder of certificates for `test`: CAs `srv` and `other`, the server's for 127.0.0.1 (`srv.pem`),
/// and clients `alice` (signed by srv's CA) and `mallory` (by other's).
fn certificates(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pjrt-actors-tls-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    certificates::certificates(&dir, "srv");
    certificates::certificates(&dir, "other");
    certificates::client_certificate(&dir, "srv", "alice");
    certificates::client_certificate(&dir, "other", "mallory");
    dir
}

fn at(dir: &Path, file: &str) -> String {
    dir.join(file).display().to_string()
}

fn serve(dir: &Path, extra: &[&str]) -> Server {
    let data = exported().join("serve");
    let mut args = vec![
        "--model".to_string(),
        format!("lm={}", data.join("transformer.exported").display()),
        "--params".into(),
        format!("lm={}", data.join("transformer.safetensors").display()),
        "--tls-cert".into(),
        at(dir, "srv.pem"),
        "--tls-key".into(),
        at(dir, "srv.key"),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    Server::start(&args).unwrap_or_else(|e| panic!("serve: {e}"))
}

/// What tls_clients.py saw of `server` (tritonclient trusting srv's CA, and other's), with
/// `client`'s certificate when given.
fn tls_clients(server: &Server, dir: &Path, client: Option<&str>) -> serde_json::Value {
    let npz = exported().join("serve/requests.npz").display().to_string();
    let mut args = vec![
        server.http.to_string(),
        server.grpc.to_string(),
        npz,
        at(dir, "srv-ca.pem"),
        at(dir, "other-ca.pem"),
    ];
    if let Some(client) = client {
        args.extend([
            at(dir, &format!("{client}.pem")),
            at(dir, &format!("{client}.key")),
        ]);
    }
    triton_script("tls_clients.py", &args)
}

/// curl's exit code and HTTP status (0 when none came) for `url`, with `args`.
fn curl(url: &str, args: &[&str]) -> (i32, u16) {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
        ])
        .args(args)
        .arg(url)
        .output()
        .unwrap();
    let code = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    (out.status.code().unwrap_or(-1), code)
}

#[test]
fn https_and_grpc_over_tls_answer_clients_that_trust_the_ca_and_no_others() {
    let dir = certificates("https");
    let server = serve(&dir, &["--max-body-bytes", "65536"]);
    let ready = format!("https://127.0.0.1:{}/v2/health/ready", server.http);
    let ca = at(&dir, "srv-ca.pem");
    assert_eq!(curl(&ready, &["--cacert", &ca]), (0, 200));
    // The body bound holds over TLS as over plaintext.
    let big = dir.join("big.json");
    std::fs::write(&big, vec![b' '; 100_000]).unwrap();
    let infer_big = format!("https://127.0.0.1:{}/v2/models/lm/infer", server.http);
    let data = format!("@{}", big.display());
    assert_eq!(
        curl(&infer_big, &["--cacert", &ca, "--data-binary", &data]).1,
        413
    );
    let infer = format!("https://127.0.0.1:{}/v2/models/lm/infer", server.http);
    let body = r#"{"inputs":[{"name":"tokens","datatype":"INT32","shape":[1,8],"data":[1,2,3,4,5,6,7,8]}]}"#;
    assert_eq!(curl(&infer, &["--cacert", &ca, "-d", body]), (0, 200));
    // curl's 60: the peer's certificate could not be verified.
    assert_eq!(curl(&ready, &[]).0, 60, "a client without the CA");
    assert_eq!(curl(&ready, &["--cacert", &at(&dir, "other-ca.pem")]).0, 60);
    let plain = curl(
        &format!("http://127.0.0.1:{}/v2/health/ready", server.http),
        &[],
    );
    assert_ne!(plain.1, 200, "plaintext to a TLS port: {plain:?}");
    let seen = tls_clients(&server, &dir, None);
    assert_eq!(seen["checked"]["https infer"], 1, "{seen}");
    assert_eq!(seen["checked"]["grpc over TLS infer"], 1, "{seen}");
}

#[test]
fn mutual_tls_needs_a_client_certificate_from_the_named_ca() {
    let dir = certificates("mutual");
    let server = serve(&dir, &["--tls-client-ca", &at(&dir, "srv-ca.pem")]);
    let ready = format!("https://127.0.0.1:{}/v2/health/ready", server.http);
    let ca = at(&dir, "srv-ca.pem");
    let with = |client: &str| {
        let (pem, key) = (
            at(&dir, &format!("{client}.pem")),
            at(&dir, &format!("{client}.key")),
        );
        curl(&ready, &["--cacert", &ca, "--cert", &pem, "--key", &key])
    };
    assert_eq!(with("alice"), (0, 200));
    assert_ne!(with("mallory").1, 200, "another CA's client");
    assert_ne!(
        curl(&ready, &["--cacert", &ca]).1,
        200,
        "no client certificate"
    );
    let seen = tls_clients(&server, &dir, Some("alice"));
    assert_eq!(seen["checked"]["grpc over TLS infer"], 1, "{seen}");
    assert_eq!(
        seen["checked"]["grpc without a client certificate refused"], 1,
        "{seen}"
    );
}

#[test]
fn a_handshake_never_finished_is_cut_off_at_the_idle_time_and_its_slot_given_back() {
    let dir = certificates("handshake");
    let server = serve(&dir, &["--idle-timeout", "1", "--max-connections", "1"]);
    // The start of a ClientHello, and then nothing.
    let mut stalled = TcpStream::connect(("127.0.0.1", server.http)).unwrap();
    stalled
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .unwrap();
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 64];
    let read = stalled.read(&mut buf);
    let took = start.elapsed();
    assert!(
        matches!(read, Ok(0)) || read.is_err(),
        "closed, not answered: {read:?}"
    );
    assert!(took < Duration::from_secs(4), "cut off after {took:?}");
    // The one slot is free again: a real client gets in.
    let ready = format!("https://127.0.0.1:{}/v2/health/ready", server.http);
    assert_eq!(
        curl(&ready, &["--cacert", &at(&dir, "srv-ca.pem")]),
        (0, 200)
    );
}

#[test]
fn tls_flags_that_do_not_go_together_or_do_not_parse_are_refused_at_start() {
    let dir = certificates("flags");
    let model = format!(
        "lm={}",
        exported().join("serve/transformer.exported").display()
    );
    for (args, said) in [
        (
            vec!["--tls-cert", "x.pem"],
            "--tls-cert and --tls-key go together",
        ),
        (
            vec!["--tls-client-ca", "x.pem"],
            "--tls-client-ca needs --tls-cert",
        ),
        (
            vec![
                "--tls-cert",
                &at(&dir, "srv.key"),
                "--tls-key",
                &at(&dir, "srv.key"),
            ],
            "it holds no certificate",
        ),
    ] {
        let mut all = vec!["--model".to_string(), model.clone()];
        all.extend(args.iter().map(|s| s.to_string()));
        let err = Server::start(&all).err().unwrap();
        assert!(err.contains(said), "{args:?}: {err}");
    }
}
