//! The compile cache's Redis tier over TLS (`rediss://`, the default `tls` feature: native-tls)
//! against real `redis-server`s speaking it with certificates this test makes with openssl: a
//! fleet shares compiles through a server whose certificate our CA signed; one signed by
//! another CA is refused, counted, and compiles go on locally; and a cluster speaking only TLS
//! among its nodes and to clients (`rediss+cluster://`). Alone in its binary: it names the
//! trusted CA in the environment (`SSL_CERT_FILE`, which OpenSSL reads).

#[path = "suite/common/certificates.rs"]
mod certificates;
#[path = "suite/common/fleet.rs"]
mod fleet;
#[path = "suite/common/redis_cluster.rs"]
mod redis_cluster;
#[path = "suite/common/redis_server.rs"]
mod redis_server;

use std::path::{Path, PathBuf};
use std::time::Duration;

use certificates::certificates;
use fleet::compile_and_check as compile;
use pjrt_actors::Client;
use redis::Commands;
use redis_server::{RedisServer, START_TRIES, free_port};

/// A server with a plain port (for the test's own look) and a TLS one with `name`'s certificate.
fn tls_server(dir: &Path, name: &str) -> (RedisServer, u16) {
    on_a_free_tls_port(|tls_port| {
        let settings = tls_settings(dir, name, tls_port, &[]);
        RedisServer::try_start(&settings.iter().map(String::as_str).collect::<Vec<_>>())
    })
}

/// What `start` starts on a free TLS port, with that port; on another when it exits at start
/// (the port taken meanwhile).
fn on_a_free_tls_port(start: impl Fn(u16) -> Option<RedisServer>) -> (RedisServer, u16) {
    (0..START_TRIES)
        .find_map(|_| {
            let tls_port = free_port();
            start(tls_port).map(|server| (server, tls_port))
        })
        .expect("redis-server exited at start on every TLS port tried")
}

/// The settings for a TLS port with `name`'s certificate, and `extra`.
fn tls_settings(dir: &Path, name: &str, tls_port: u16, extra: &[&str]) -> Vec<String> {
    let file = |f: String| dir.join(f).to_string_lossy().into_owned();
    let mut args = vec![
        "--tls-port".to_string(),
        tls_port.to_string(),
        "--tls-cert-file".into(),
        file(format!("{name}.pem")),
        "--tls-key-file".into(),
        file(format!("{name}.key")),
        "--tls-ca-cert-file".into(),
        file(format!("{name}-ca.pem")),
        "--tls-auth-clients".into(),
        "no".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Six cluster nodes speaking TLS to clients, to replicas and on the cluster bus, formed over
/// their TLS ports (each keeps a plain port only for the fixture's own checks).
fn tls_cluster(dir: &Path) -> redis_cluster::RedisCluster {
    let all_tls = ["--tls-cluster", "yes", "--tls-replication", "yes"];
    let (nodes, tls_ports): (Vec<RedisServer>, Vec<u16>) = (0..6)
        .map(|_| {
            on_a_free_tls_port(|p| {
                let settings = tls_settings(dir, "ours", p, &all_tls);
                redis_cluster::try_node(&settings.iter().map(String::as_str).collect::<Vec<_>>())
            })
        })
        .unzip();
    let ca = dir.join("ours-ca.pem").to_string_lossy().into_owned();
    redis_cluster::RedisCluster::form(nodes, tls_ports, "rediss", &["--tls", "--cacert", &ca])
}

fn client(url: &str) -> Client {
    fleet::client(fleet::config(url, "tls", Duration::from_millis(1000)))
}

#[test]
fn a_fleet_shares_compiles_over_tls_and_a_certificate_from_another_ca_is_refused() {
    let dir: PathBuf = std::env::temp_dir().join(format!("pjrt-actors-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    certificates(&dir, "ours");
    certificates(&dir, "theirs");
    // SAFETY of set_var: this binary runs this one test, and nothing else has started yet.
    unsafe { std::env::set_var("SSL_CERT_FILE", dir.join("ours-ca.pem")) };

    let (server, tls_port) = tls_server(&dir, "ours");
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let a = client(&url);
    compile(&a, 2);
    let s = a.compile_cache_stats();
    assert_eq!(
        (s.compiles, s.redis_stores, s.redis_errors),
        (1, 1, 0),
        "{s:?}"
    );
    let b = client(&url);
    compile(&b, 2);
    let s = b.compile_cache_stats();
    assert_eq!(
        (s.compiles, s.redis_hits, s.redis_errors),
        (0, 1, 0),
        "{s:?}"
    );
    let keys: Vec<String> = server.connection().unwrap().keys("tls:exe:*").unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");

    // A server whose certificate another CA signed: the handshake fails, the tier counts it,
    // and the compile goes on here.
    let (other, other_port) = tls_server(&dir, "theirs");
    let c = client(&format!("rediss://127.0.0.1:{other_port}"));
    compile(&c, 3);
    let s = c.compile_cache_stats();
    assert_eq!(
        (s.compiles, s.redis_stores, s.redis_hits),
        (1, 0, 0),
        "{s:?}"
    );
    assert!(s.redis_errors >= 1, "{s:?}");
    let keys: Vec<String> = other.connection().unwrap().keys("tls:*").unwrap();
    assert!(keys.is_empty(), "{keys:?}");

    // A cluster that speaks only TLS: a fleet shares compiles through `rediss+cluster://`.
    let cluster = tls_cluster(&dir);
    let url = cluster.url();
    assert!(url.starts_with("rediss+cluster://"), "{url}");
    let a = client(&url);
    let b = client(&url);
    for n in 10..16 {
        compile(&a, n);
        compile(&b, n);
    }
    let (sa, sb) = (a.compile_cache_stats(), b.compile_cache_stats());
    assert_eq!(
        (sa.compiles, sa.redis_stores, sb.compiles, sb.redis_hits),
        (6, 6, 0, 6),
        "{sa:?} {sb:?}"
    );
    assert_eq!(sa.redis_errors + sb.redis_errors, 0);
    // Six entries, on more than one master (looked at through each node's plain port).
    let per_node: Vec<usize> = (cluster.nodes.iter())
        .map(|n| {
            let mut c = n.connection().unwrap();
            let role: String = redis::cmd("INFO").arg("replication").query(&mut c).unwrap();
            match role.contains("role:master") {
                true => c.keys::<_, Vec<String>>("tls:exe:*").unwrap().len(),
                false => 0,
            }
        })
        .collect();
    assert_eq!(per_node.iter().sum::<usize>(), 6, "{per_node:?}");
    assert!(
        per_node.iter().filter(|&&k| k > 0).count() > 1,
        "{per_node:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
