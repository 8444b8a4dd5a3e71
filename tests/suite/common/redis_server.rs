//! A real `redis-server` for tests and benchmarks: started on a free loopback port with a temp
//! dir and no persistence, killed (and restartable on the same port), stopped on drop.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
}

/// A loopback port free now (for a second listener, such as a TLS port), at most 55535: a
/// cluster node's bus listens 10000 above its port, and redis-server exits if it cannot
/// (std's listener asks with SO_REUSEADDR, which Linux answers from the low half of its
/// range, but nothing promises that). Never one this process handed out before, nor one 10000
/// from such a port (a bus): the kernel may hand a released port out again.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let clashes = [Some(port), port.checked_add(10000), port.checked_sub(10000)]
            .into_iter()
            .flatten()
            .any(|p| given.contains(&p));
        if port <= 55535 && !clashes {
            given.insert(port);
            return port;
        }
    }
}

/// How many times a server that exits at start (a port another process took between
/// `free_port` and its bind) is started again on new ports.
pub const START_TRIES: usize = 5;

impl RedisServer {
    /// Starts a server with `extra` settings (`["--maxmemory", "1mb"]`), on another port
    /// when one is taken (`START_TRIES` at most).
    pub fn start(extra: &[&str]) -> RedisServer {
        (0..START_TRIES)
            .find_map(|_| RedisServer::try_start(extra))
            .expect("redis-server exited at start on every port tried")
    }

    /// Starts a server with `extra` settings on a free port: `None` when it exits at start
    /// (its port, or one `extra` names, was taken meanwhile).
    pub fn try_start(extra: &[&str]) -> Option<RedisServer> {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("pjrt-actors-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = RedisServer {
            port,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        match server.launch() {
            Ok(()) => Some(server),
            Err(log) => {
                eprintln!(
                    "redis-server on port {port} exited at start; trying another port:\n{log}"
                );
                None
            }
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the server (again) on its port and waits until it answers.
    pub fn restart(&mut self) {
        if let Err(log) = self.launch() {
            panic!("redis-server on port {} exited at start:\n{log}", self.port);
        }
    }

    /// Starts the server on its port and waits until it answers: `Err` with the tail of its
    /// log when it exits first; a panic when it neither answers nor exits within 10 s.
    fn launch(&mut self) -> Result<(), String> {
        let log = self.dir.join("server.log");
        let out = std::fs::File::create(&log).unwrap();
        let mut child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(out)
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/bootstrap installs it)");
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(status)) = child.try_wait() {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(5).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                return Err(format!("{status}\n{}", tail.join("\n")));
            }
            if self.connection().is_ok() {
                self.child = Some(child);
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "redis-server on port {} did not start within 10 s",
            self.port
        );
    }

    /// Whether the server was started and not killed since.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A plain connection, for setting up and inspecting what the runtime wrote.
    pub fn connection(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        let mut c = client.get_connection_with_timeout(Duration::from_secs(1))?;
        redis::cmd("PING").query::<String>(&mut c)?;
        Ok(c)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
