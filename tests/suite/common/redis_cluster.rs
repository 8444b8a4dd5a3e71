//! A real Redis Cluster for tests and benchmarks: six `redis-server`s on free loopback ports
//! (`--cluster-enabled yes`, a 1 s node timeout), formed by `redis-cli --cluster create` into
//! three masters and three replicas; and `FleetRedis`, one server or a cluster, for the tests
//! that run on both.
#![allow(dead_code)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::redis_server::RedisServer;

pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    /// The ports the URL names, and its scheme.
    seeds: Vec<u16>,
    scheme: String,
}

/// A node of a cluster, also given `extra`: replicas sync at once (no 5 s wait for more
/// replicas to share a transfer) and may take over however long they were apart from their
/// master.
pub fn node(extra: &[&str]) -> RedisServer {
    RedisServer::start(&node_settings(extra))
}

/// A node as [`node`] starts it, once: `None` when it exits at start (a port taken).
pub fn try_node(extra: &[&str]) -> Option<RedisServer> {
    RedisServer::try_start(&node_settings(extra))
}

fn node_settings<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--cluster-enabled",
        "yes",
        "--cluster-node-timeout",
        "1000",
        "--repl-diskless-sync-delay",
        "0",
        "--cluster-replica-validity-factor",
        "0",
    ];
    args.extend_from_slice(extra);
    args
}

impl RedisCluster {
    /// Starts and forms a cluster, each node also given `extra`; waits until every node says
    /// the cluster is ok.
    pub fn start(extra: &[&str]) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..6).map(|_| node(extra)).collect();
        let ports = nodes.iter().map(|n| n.port).collect();
        RedisCluster::form(nodes, ports, "redis", &[])
    }

    /// A cluster of `nodes` formed over `ports` (theirs, or their TLS ports, with `cli` such as
    /// `--tls --cacert CA` for redis-cli), named by URLs of `scheme`.
    pub fn form(nodes: Vec<RedisServer>, ports: Vec<u16>, scheme: &str, cli: &[&str]) -> Self {
        let mut create = Command::new("redis-cli");
        create.args(cli).args(["--cluster", "create"]);
        for port in &ports {
            create.arg(format!("127.0.0.1:{port}"));
        }
        let out = create
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli (redis-tools, which scripts/bootstrap installs with redis-server)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let seeds = ports[..3].to_vec();
        let cluster = RedisCluster {
            nodes,
            seeds,
            scheme: scheme.into(),
        };
        cluster.wait_ok(Duration::from_secs(30));
        cluster.wait_replicas_synced(Duration::from_secs(30));
        cluster
    }

    /// Waits until every replica's link to its master is up (its first sync done): a replica
    /// killed mid-sync has nothing to take over with.
    fn wait_replicas_synced(&self, limit: Duration) {
        let start = Instant::now();
        let synced = |n: &RedisServer| {
            n.connection().is_ok_and(|mut c| {
                let info: String = redis::cmd("INFO").arg("replication").query(&mut c).unwrap();
                info.contains("role:master") || info.contains("master_link_status:up")
            })
        };
        while start.elapsed() < limit {
            if self.nodes.iter().all(synced) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the cluster's replicas did not sync within {limit:?}");
    }

    /// The seed URL: the first three nodes.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = (self.seeds.iter())
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        format!("{}+cluster://{}", self.scheme, seeds.join(","))
    }

    /// Waits until every live node reports `cluster_state:ok` with all slots served.
    pub fn wait_ok(&self, limit: Duration) -> Duration {
        let start = Instant::now();
        while start.elapsed() < limit {
            if self.nodes.iter().filter(|n| n.is_running()).all(|n| {
                n.connection().is_ok_and(|mut c| {
                    redis::cmd("CLUSTER")
                        .arg("INFO")
                        .query::<String>(&mut c)
                        .is_ok_and(|i| {
                            i.contains("cluster_state:ok") && i.contains("cluster_slots_ok:16384")
                        })
                })
            }) {
                return start.elapsed();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the cluster did not become ok within {limit:?}");
    }

    /// A cluster connection, for setting up and inspecting what the runtime wrote.
    pub fn connection(&self) -> redis::RedisResult<redis::cluster::ClusterConnection> {
        let seeds: Vec<String> = (self.nodes.iter())
            .filter(|n| n.is_running())
            .map(|n| n.url())
            .collect();
        redis::cluster::ClusterClient::builder(seeds)
            .connection_timeout(Duration::from_secs(1))
            .response_timeout(Duration::from_secs(1))
            .build()?
            .get_connection()
    }

    /// The index in `nodes` of the master now serving `key`'s slot.
    pub fn master_of(&self, key: &str) -> usize {
        self.try_master_of(key)
            .unwrap_or_else(|| panic!("no master serves {key:?}'s slot"))
    }

    /// How long until a node other than `killed` serves `key`'s slot, with the cluster ok.
    pub fn wait_failover(&self, key: &str, killed: usize, limit: Duration) -> Duration {
        let start = Instant::now();
        while start.elapsed() < limit {
            if self.try_master_of(key).is_some_and(|m| m != killed) {
                self.wait_ok(limit);
                return start.elapsed();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("no replica took over from node {killed} within {limit:?}");
    }

    /// The master serving `key`'s slot, as a live node sees the cluster; `None` while no
    /// master that is not failing serves it.
    pub fn try_master_of(&self, key: &str) -> Option<usize> {
        let live = self.nodes.iter().find(|n| n.is_running()).unwrap();
        let mut c = live.connection().unwrap();
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut c)
            .unwrap();
        let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut c).unwrap();
        let master = (pjrt_actors_core::fleet::target::masters_in(&nodes).into_iter())
            .find(|m| m.serves(slot))?;
        self.nodes.iter().position(|n| n.port == master.port)
    }
}

/// The Redis a fleet test runs on: one server, or a cluster.
pub enum FleetRedis {
    One(RedisServer),
    Cluster(RedisCluster),
}

/// Which kind a test asks for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    One,
    Cluster,
}

/// A connection to either kind (for the tests' own inspection).
pub enum AnyConnection {
    One(redis::Connection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl FleetRedis {
    /// Starts one of `kind`, each server given `extra`.
    pub fn start(kind: Kind, extra: &[&str]) -> FleetRedis {
        match kind {
            Kind::One => FleetRedis::One(RedisServer::start(extra)),
            Kind::Cluster => FleetRedis::Cluster(RedisCluster::start(extra)),
        }
    }

    /// The one server (to kill and restart it); a test that asks has started one.
    pub fn server(&mut self) -> &mut RedisServer {
        match self {
            FleetRedis::One(s) => s,
            FleetRedis::Cluster(_) => panic!("a cluster has no one server"),
        }
    }

    pub fn url(&self) -> String {
        match self {
            FleetRedis::One(s) => s.url(),
            FleetRedis::Cluster(c) => c.url(),
        }
    }

    /// The URL with `user:password@` in it.
    pub fn url_as(&self, user_and_password: &str) -> String {
        let url = self.url();
        let (scheme, rest) = url.split_once("://").unwrap();
        format!("{scheme}://{user_and_password}@{rest}")
    }

    pub fn connection(&self) -> redis::RedisResult<AnyConnection> {
        Ok(match self {
            FleetRedis::One(s) => AnyConnection::One(s.connection()?),
            FleetRedis::Cluster(c) => AnyConnection::Cluster(Box::new(c.connection()?)),
        })
    }
}

impl redis::ConnectionLike for AnyConnection {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        match self {
            AnyConnection::One(c) => c.req_packed_command(cmd),
            AnyConnection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        match self {
            AnyConnection::One(c) => c.req_packed_commands(cmd, offset, count),
            AnyConnection::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn req_command(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<redis::Value> {
        match self {
            AnyConnection::One(c) => c.req_command(cmd),
            AnyConnection::Cluster(c) => c.req_command(cmd),
        }
    }

    fn get_db(&self) -> i64 {
        0
    }

    fn check_connection(&mut self) -> bool {
        match self {
            AnyConnection::One(c) => c.check_connection(),
            AnyConnection::Cluster(c) => c.check_connection(),
        }
    }

    fn is_open(&self) -> bool {
        match self {
            AnyConnection::One(c) => c.is_open(),
            AnyConnection::Cluster(c) => c.is_open(),
        }
    }
}

/// `on_one_and_cluster!(name, …)`: for each test function `name(kind: Kind)`, a module `name`
/// with a test `one_server` and a test `cluster` (the calling file has `Kind` in scope).
#[macro_export]
macro_rules! on_one_and_cluster {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::Kind;
            #[test]
            fn one_server() {
                super::$name(Kind::One)
            }
            #[test]
            fn cluster() {
                super::$name(Kind::Cluster)
            }
        }
    )*};
}
