//! Every compile path against every cache tier, each hit executed and its result checked
//! (issue 22, A1): {in this process, in a compile worker} × {memory, disk, Redis} × {the
//! same process, a second process}. A worker's executable once reached the caches as a
//! re-serialization without its kernels, which loaded everywhere and failed at execute.
//! The memory tier is a client's own, so it has no second-process row. And all of it again with
//! a fleet key, every entry signed and verified (issue 53).

use pjrt_actors::{CacheKeys, Client, ClientBuilder, CompileOptions, LoadedExecutable};

use crate::common::redis_server::RedisServer;
use crate::common::scratch_dir;

/// Where the second process is told which tier and which compile path to read with.
const CHILD_ENV: &str = "PJRT_ACTORS_TEST_MATRIX_CHILD";

/// The issue's own program: `a + a`.
const ADD_SELF: &str = "func.func public @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n %0 = stablehlo.add %a, %a : tensor<4xf32>\n return %0 : tensor<4xf32>\n}\n";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Path {
    InProcess,
    Worker,
}

#[derive(Clone, Debug)]
enum Tier {
    Disk(std::path::PathBuf),
    Redis(String),
}

impl Tier {
    /// The text form the child reads back from its environment.
    fn encode(&self, path: Path) -> String {
        let path = if path == Path::Worker { "worker" } else { "in" };
        match self {
            Tier::Disk(dir) => format!("{path};disk;{}", dir.display()),
            Tier::Redis(url) => format!("{path};redis;{url}"),
        }
    }

    fn decode(text: &str) -> (Path, Tier) {
        let mut parts = text.splitn(3, ';');
        let (path, kind, place) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        let path = if path == "worker" {
            Path::Worker
        } else {
            Path::InProcess
        };
        match kind {
            "disk" => (path, Tier::Disk(place.into())),
            _ => (path, Tier::Redis(place.into())),
        }
    }
}

fn builder(path: Path) -> ClientBuilder {
    let b = Client::builder().memory_cache_entries(0);
    match path {
        Path::InProcess => b,
        Path::Worker => b.compile_in_worker(crate::isolation::worker()),
    }
}

/// A client on `tier`; with `keys`, signing and verifying its entries (a second process takes
/// them from `PJRT_ACTORS_CACHE_KEY_FILE`).
fn open(path: Path, tier: &Tier, keys: Option<&CacheKeys>) -> Client {
    let b = match keys {
        Some(keys) => builder(path).compile_cache_keys(keys.clone()),
        None => builder(path),
    };
    match tier {
        Tier::Disk(dir) => b.compile_cache_dir(dir),
        Tier::Redis(url) => {
            let mut config = pjrt_actors::RedisCacheConfig::new(url);
            config.namespace = "matrix".into();
            b.compile_cache_redis_config(config)
        }
    }
    .open()
    .unwrap()
}

/// Runs `a + a` and checks it: a kernel-less executable fails right here.
fn runs(client: &Client, exe: &LoadedExecutable, what: &str) {
    let x = client.devices()[0].put(&[1f32, 2., 3., 4.], &[4]).unwrap();
    let y = exe.execute(&[&x]).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(y[0].to_vec::<f32>().unwrap(), [2., 4., 6., 8.], "{what}");
}

/// Compiles through `client` and says which tier answered.
fn compile_and_run(client: &Client, what: &str) -> (u64, u64, u64) {
    let exe = client
        .compile_and_load(ADD_SELF, &CompileOptions::default())
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    runs(client, &exe, what);
    let s = client.compile_cache_stats();
    assert_eq!(
        (s.corrupt_entries, s.unsigned_entries),
        (0, 0),
        "{what}: {s:?}"
    );
    (s.compiles, s.disk_hits, s.redis_hits)
}

fn hit(tier: &Tier) -> (u64, u64, u64) {
    match tier {
        Tier::Disk(_) => (0, 1, 0),
        Tier::Redis(_) => (0, 0, 1),
    }
}

/// The second-process side of `every_path_and_tier_hits_and_runs`: a fresh process hits what
/// the parent stored, through both compile paths, and runs it.
#[test]
#[ignore = "a child process of every_path_and_tier_hits_and_runs, which runs it"]
fn cache_matrix_child() {
    let text = std::env::var(CHILD_ENV).expect("run by every_path_and_tier_hits_and_runs");
    let (_, tier) = Tier::decode(&text);
    for path in [Path::Worker, Path::InProcess] {
        let what = format!("second process, reading with {path:?}, {tier:?}");
        assert_eq!(
            compile_and_run(&open(path, &tier, None), &what),
            hit(&tier),
            "{what}"
        );
    }
}

/// A second process reading `tier` with both compile paths; keyed by `key_file` when given.
fn second_process(path: Path, tier: &Tier, key_file: Option<&std::path::Path>) {
    let mut env = vec![(CHILD_ENV, tier.encode(path))];
    env.extend(key_file.map(|f| (pjrt_actors::CACHE_KEY_FILE_ENV, f.display().to_string())));
    crate::common::run_child_test(
        "cache_matrix::cache_matrix_child",
        &env,
        std::time::Duration::from_secs(120),
    );
}

#[test]
fn every_path_and_tier_hits_and_runs() {
    matrix("cache-matrix", None);
}

#[test]
fn every_path_and_tier_hits_and_runs_with_a_fleet_key() {
    use std::os::unix::fs::PermissionsExt;
    let file = scratch_dir("cache-matrix-key").join("fleet.key");
    std::fs::write(&file, "3c".repeat(32)).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    matrix("cache-matrix-keyed", Some(&file));
}

/// Every compile path against every tier, in this process and a second one; keyed by
/// `key_file` when given (a hit then proves its entry signed: an unsigned one is refused).
fn matrix(name: &str, key_file: Option<&std::path::Path>) {
    let keys = key_file.map(|f| CacheKeys::from_file(f).unwrap());
    let server = RedisServer::start(&[]);
    for path in [Path::InProcess, Path::Worker] {
        let dir = scratch_dir(&format!("{name}-{path:?}"));
        let _ = std::fs::remove_dir_all(&dir);
        let tiers = [Tier::Disk(dir), Tier::Redis(server.url())];
        for tier in tiers {
            if let Tier::Redis(_) = tier {
                let _: () = redis::cmd("FLUSHALL")
                    .query(&mut server.connection().unwrap())
                    .unwrap();
            }
            let what = format!("{path:?} {tier:?}");
            // The compile that stores, then a fresh client of this process that hits it.
            assert_eq!(
                compile_and_run(&open(path, &tier, keys.as_ref()), &what),
                (1, 0, 0),
                "{what}"
            );
            for reader in [path, Path::InProcess, Path::Worker] {
                let what = format!("same process, reading with {reader:?}, {what}");
                assert_eq!(
                    compile_and_run(&open(reader, &tier, keys.as_ref()), &what),
                    hit(&tier),
                    "{what}"
                );
            }
            second_process(path, &tier, key_file);
        }
        // The memory tier: the same client asked twice answers from memory, and runs.
        let client = builder(path).memory_cache_entries(8).open().unwrap();
        for round in 0..2 {
            let exe = client
                .compile_and_load(ADD_SELF, &CompileOptions::default())
                .unwrap();
            runs(&client, &exe, &format!("{path:?} memory, round {round}"));
        }
        let s = client.compile_cache_stats();
        assert_eq!((s.compiles, s.memory_hits), (1, 1), "{path:?}: {s:?}");
    }
}

#[test]
fn a_worker_compiled_executable_serializes_whole() {
    // `serialize` of an executable loaded from a worker's bytes returns those bytes, which a
    // client compiling in this process loads and runs.
    let worker = builder(Path::Worker).open().unwrap();
    let exe = worker
        .compile_and_load(ADD_SELF, &CompileOptions::default())
        .unwrap();
    let bytes = exe.serialize().unwrap();
    let here = Client::open().unwrap();
    let loaded = here.deserialize_executable(&bytes, None, &[]).unwrap();
    runs(&here, &loaded, "deserialized from a worker's executable");
    // And once more through a round trip of the loaded copy.
    let again = here
        .deserialize_executable(&loaded.serialize().unwrap(), None, &[])
        .unwrap();
    runs(&here, &again, "deserialized twice");
}
