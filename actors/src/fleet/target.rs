//! Where a Redis URL points: one server (`redis://`, `rediss://`) or a cluster given by seed
//! nodes (`redis+cluster://HOST:PORT[,HOST:PORT…]`, `rediss+cluster://` with TLS), and the one
//! connection type the compile cache's tier and the key-value store speak to either through.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// A Redis deployment to connect to.
#[derive(Clone)]
pub enum RedisTarget {
    /// One server.
    Single(redis::Client),
    /// A cluster: the client for commands (it follows `MOVED` and fails over), and a plain
    /// client per seed for what a cluster connection does not carry (pattern subscriptions,
    /// which any node relays cluster-wide).
    Cluster {
        client: Box<ClusterClient>,
        seeds: Vec<redis::Client>,
        /// A node's URL up to its address (`rediss://user:password@`).
        node_prefix: String,
    },
}

/// A connection to either kind; cheap to clone (both kinds multiplex one socket per node).
#[derive(Clone)]
pub enum RedisConnection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

/// The URLs of each seed node of a cluster URL (`None` for a URL of one server): the scheme
/// without `+cluster`, the user and password given to every node, at most database 0.
pub fn cluster_seeds(url: &str) -> Result<Option<Vec<String>>, String> {
    let (scheme, rest) = match url.split_once("://") {
        Some(("redis+cluster", rest)) => ("redis", rest),
        Some(("rediss+cluster", rest)) => ("rediss", rest),
        _ => return Ok(None),
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    if !matches!(path, "" | "/" | "/0") {
        return Err(format!(
            "a cluster URL names no database or options (a cluster has only database 0), got {path:?}"
        ));
    }
    let (user, hosts) = match authority.rsplit_once('@') {
        Some((user, hosts)) => (format!("{user}@"), hosts),
        None => (String::new(), authority),
    };
    let seeds: Vec<String> = hosts
        .split(',')
        .map(|host| match host {
            "" => {
                Err("a cluster URL has an empty seed node (two commas, or a trailing one)".into())
            }
            host => Ok(format!("{scheme}://{user}{host}")),
        })
        .collect::<Result<_, String>>()?;
    Ok(Some(seeds))
}

impl RedisTarget {
    /// The target `url` names, with `timeout` for connecting and for each answer.
    pub fn open(url: &str, timeout: Duration) -> Result<RedisTarget, String> {
        let Some(seeds) = cluster_seeds(url)? else {
            return redis::Client::open(url)
                .map(RedisTarget::Single)
                .map_err(|e| e.to_string());
        };
        let client = ClusterClient::builder(seeds.iter().map(String::as_str))
            .connection_timeout(timeout)
            .response_timeout(timeout)
            .retries(2)
            .build()
            .map_err(|e| e.to_string())?;
        let node_prefix = match seeds[0].rsplit_once('@') {
            Some((prefix, _)) => format!("{prefix}@"),
            None => format!("{}://", seeds[0].split_once("://").map_or("redis", |s| s.0)),
        };
        let seeds = (seeds.iter().map(|s| redis::Client::open(s.as_str())))
            .collect::<redis::RedisResult<_>>()
            .map_err(|e| e.to_string())?;
        Ok(RedisTarget::Cluster {
            client: Box::new(client),
            seeds,
            node_prefix,
        })
    }

    /// A plain client for one node of a cluster (same scheme, user and password), for what
    /// must reach that very node: a SCAN routed through the cluster connection errs when its
    /// link to the node is still being made, and would not be told if sent elsewhere.
    pub fn node(&self, host: &str, port: u16) -> redis::RedisResult<redis::Client> {
        let prefix = match self {
            RedisTarget::Single(_) => "redis://",
            RedisTarget::Cluster { node_prefix, .. } => node_prefix,
        };
        match host.contains(':') {
            true => redis::Client::open(format!("{prefix}[{host}]:{port}")),
            false => redis::Client::open(format!("{prefix}{host}:{port}")),
        }
    }

    /// The clients a pattern subscription can be made on, tried in turn.
    pub fn subscribers(&self) -> Vec<redis::Client> {
        match self {
            RedisTarget::Single(client) => vec![client.clone()],
            RedisTarget::Cluster { seeds, .. } => seeds.clone(),
        }
    }

    /// An async connection, reconnecting by itself after (the cluster one also follows slot
    /// moves and failovers).
    pub async fn connect(&self, timeout: Duration) -> redis::RedisResult<RedisConnection> {
        match self {
            RedisTarget::Single(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_number_of_retries(1);
                ConnectionManager::new_with_config(client.clone(), config)
                    .await
                    .map(RedisConnection::Single)
            }
            RedisTarget::Cluster { client, .. } => client
                .get_async_connection()
                .await
                .map(RedisConnection::Cluster),
        }
    }

    /// A blocking connection with `timeout` on each read and write.
    pub fn connect_blocking(
        &self,
        timeout: Duration,
    ) -> redis::RedisResult<Box<dyn redis::ConnectionLike + Send>> {
        match self {
            RedisTarget::Single(client) => {
                let conn = client.get_connection_with_timeout(timeout)?;
                conn.set_read_timeout(Some(timeout))?;
                conn.set_write_timeout(Some(timeout))?;
                Ok(Box::new(conn))
            }
            RedisTarget::Cluster { client, .. } => Ok(Box::new(client.get_connection()?)),
        }
    }
}

impl RedisConnection {
    /// A cluster's masters that are up and the slots each serves (none for a single server).
    pub async fn slot_map(&mut self) -> redis::RedisResult<Vec<Master>> {
        let RedisConnection::Cluster(conn) = self else {
            return Ok(Vec::new());
        };
        let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(conn).await?;
        Ok(masters_in(&nodes))
    }
}

/// A master of a cluster and the slot ranges it serves.
#[derive(Debug, Clone, PartialEq)]
pub struct Master {
    pub host: String,
    pub port: u16,
    pub slots: Vec<(u16, u16)>,
}

impl Master {
    /// Whether it serves `slot`.
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| (a..=b).contains(&slot))
    }
}

/// The masters that `CLUSTER NODES` lists as up:
/// `ID HOST:PORT@BUS[,NAME] FLAGS MASTER PING PONG EPOCH STATE [SLOT|FIRST-LAST|[MIGRATION]]…`.
pub fn masters_in(nodes: &str) -> Vec<Master> {
    (nodes.lines())
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (addr, flags) = (
                fields.get(1)?,
                fields.get(2)?.split(',').collect::<Vec<_>>(),
            );
            if !flags.contains(&"master") || flags.iter().any(|f| f.starts_with("fail")) {
                return None;
            }
            let (host, port) = addr.split(['@', ',']).next()?.rsplit_once(':')?;
            let slots = (fields.iter().skip(8))
                .filter_map(|range| {
                    let (a, b) = range.split_once('-').unwrap_or((range, range));
                    Some((a.parse().ok()?, b.parse().ok()?))
                })
                .collect();
            Some(Master {
                host: host.to_string(),
                port: port.parse().ok()?,
                slots,
            })
        })
        .collect()
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConnection::Single(c) => c.req_packed_command(cmd),
            RedisConnection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConnection::Single(c) => c.req_packed_commands(cmd, offset, count),
            RedisConnection::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConnection::Single(c) => c.get_db(),
            RedisConnection::Cluster(c) => c.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_name_their_seeds_and_single_ones_none() {
        // (url, seeds, or an error containing)
        type Want = Result<Option<Vec<&'static str>>, &'static str>;
        let cases: [(&str, Want); 8] = [
            ("redis://127.0.0.1:6379", Ok(None)),
            ("rediss://u:p@cache:6380/2", Ok(None)),
            (
                "redis+cluster://10.0.0.1:7000,10.0.0.2:7001",
                Ok(Some(vec!["redis://10.0.0.1:7000", "redis://10.0.0.2:7001"])),
            ),
            (
                "rediss+cluster://fleet:s%40cret@a:7000,b:7000/",
                Ok(Some(vec![
                    "rediss://fleet:s%40cret@a:7000",
                    "rediss://fleet:s%40cret@b:7000",
                ])),
            ),
            ("redis+cluster://a:7000/0", Ok(Some(vec!["redis://a:7000"]))),
            ("redis+cluster://a:7000/3", Err("database")),
            ("redis+cluster://a:7000,,b:7000", Err("empty seed")),
            ("redis+cluster://a:7000,", Err("empty seed")),
        ];
        for (url, want) in cases {
            let got = cluster_seeds(url);
            match want {
                Ok(want) => {
                    let want = want.map(|v| v.into_iter().map(String::from).collect());
                    assert_eq!(got, Ok(want), "{url}");
                }
                Err(part) => {
                    let e = got.expect_err(url);
                    assert!(e.contains(part), "{url}: {e}");
                }
            }
        }
    }

    #[test]
    fn a_clusters_nodes_are_reached_with_its_scheme_user_and_password() {
        // (url, host, port, the node's address as redis-rs shows it, user)
        let cases = [
            (
                "redis+cluster://a:7000,b:7001",
                "10.0.0.9",
                7005,
                "10.0.0.9:7005",
                None,
            ),
            (
                "rediss+cluster://fleet:pw@a:7000",
                "10.0.0.9",
                7005,
                "10.0.0.9:7005",
                Some("fleet"),
            ),
            ("redis+cluster://a:7000", "::1", 7005, "::1:7005", None),
        ];
        for (url, host, port, shown, user) in cases {
            let target = RedisTarget::open(url, Duration::from_secs(1)).unwrap();
            let node = target.node(host, port).unwrap();
            let info = node.get_connection_info();
            assert_eq!(info.addr().to_string(), shown, "{url}");
            assert_eq!(info.redis_settings().username(), user, "{url}");
            let tls = matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. });
            assert_eq!(tls, url.starts_with("rediss"), "{url}");
        }
    }

    #[test]
    fn masters_are_read_from_cluster_nodes() {
        let nodes = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@40002,host-b master - 0 1426238316232 2 connected 5461-10922
292f 127.0.0.1:30003@40003 master,fail - 0 1426238318243 3 disconnected 10923-16383
e7d1 ::1:30001@40001 myself,master - 0 0 1 connected 0-5460 7000 [7001->-67ed]
824f 127.0.0.1:30005@40005 master,fail? - 0 0 5 connected
";
        let master = |host: &str, port, slots| Master {
            host: host.into(),
            port,
            slots,
        };
        assert_eq!(
            masters_in(nodes),
            [
                master("127.0.0.1", 30002, vec![(5461, 10922)]),
                master("::1", 30001, vec![(0, 5460), (7000, 7000)]),
            ]
        );
    }
}
