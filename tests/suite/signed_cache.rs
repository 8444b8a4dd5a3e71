//! Signed compile-cache entries (issue 53) against the real disk tier and a real
//! `redis-server`: an entry planted by whoever can write the cache (a well-formed envelope for
//! the key, holding another program's executable, unsigned or signed with another key) is never
//! run by a keyed client; keys rotate; keyed clients share compiles as before.

use pjrt_actors::{CacheKeys, Client, CompileOptions, RedisCacheConfig};
use pjrt_actors_core::compile::{envelope, signing};
use redis::Commands;

use crate::common::fleet::{self, module};
use crate::common::redis_server::RedisServer;
use crate::common::{cache_entries, scratch_dir};
use crate::executables::identity_of;

fn keys(seeds: &[u8]) -> CacheKeys {
    CacheKeys::new(seeds.iter().map(|&s| vec![s; 32]).collect()).unwrap()
}

/// Module `n` (x * n + n on 4 floats) run on 1, 2, 3, 4.
fn run(client: &Client, n: u32) -> Vec<f32> {
    let exe = (client.compile_and_load(module(n), &CompileOptions::default())).unwrap();
    let x = client.devices()[0]
        .put(&[1.0f32, 2.0, 3.0, 4.0], &[4])
        .unwrap();
    exe.execute(&[&x]).unwrap()[0].to_vec::<f32>().unwrap()
}

fn expected(n: u32) -> Vec<f32> {
    let n = n as f32;
    vec![2.0 * n, 3.0 * n, 4.0 * n, 5.0 * n]
}

/// What an attacker who can write the cache builds: the victim entry's envelope (identity,
/// options, topology, its key) around the donor's executable, checksum and all, unsigned.
fn plant(victim: &[u8], donor: &[u8]) -> Vec<u8> {
    let open = |bytes: &[u8]| {
        let bytes = signing::unverified(bytes);
        envelope::decode(bytes, &identity_of(bytes)).unwrap()
    };
    let (mut e, donor) = (open(victim), open(donor));
    e.payload = donor.payload;
    envelope::encode(&e)
}

fn disk_client(dir: &std::path::Path, keys: Option<CacheKeys>) -> Client {
    let builder = Client::builder()
        .compile_cache_dir(dir)
        .memory_cache_entries(0);
    match keys {
        Some(k) => builder.compile_cache_keys(k),
        None => builder,
    }
    .open()
    .unwrap()
}

#[test]
fn a_planted_disk_entry_is_never_run_by_a_keyed_client() {
    let dir = scratch_dir("signed-disk");
    let _ = std::fs::remove_dir_all(&dir);
    let writer = disk_client(&dir, Some(keys(&[1])));
    assert_eq!(run(&writer, 11), expected(11));
    let [victim_file] = cache_entries(&dir).try_into().unwrap();
    assert_eq!(run(&writer, 12), expected(12));
    let donor_file = cache_entries(&dir)
        .into_iter()
        .find(|p| *p != victim_file)
        .unwrap();
    drop(writer);
    let (victim, donor) = (
        std::fs::read(&victim_file).unwrap(),
        std::fs::read(&donor_file).unwrap(),
    );
    assert!(
        keys(&[1]).open(&victim).is_ok(),
        "the writer signed its entry"
    );
    let planted = plant(&victim, &donor);
    // The plant is a working attack on a client without keys: it runs module 12 for 11.
    std::fs::write(&victim_file, &planted).unwrap();
    assert_eq!(run(&disk_client(&dir, None), 11), expected(12));
    for (what, bytes) in [
        ("unsigned", planted.clone()),
        ("signed with another key", keys(&[2]).sign(&planted)),
    ] {
        std::fs::write(&victim_file, &bytes).unwrap();
        let reader = disk_client(&dir, Some(keys(&[1])));
        assert_eq!(run(&reader, 11), expected(11), "{what}");
        let s = reader.compile_cache_stats();
        assert_eq!(
            (
                s.unsigned_entries,
                s.compiles,
                s.disk_hits,
                s.corrupt_entries
            ),
            (1, 1, 0, 0),
            "{what}: {s:?}"
        );
        let now = std::fs::read(&victim_file).unwrap();
        assert!(
            keys(&[1]).open(&now).is_ok(),
            "{what}: re-signed in its place"
        );
    }
}

fn redis_client(url: &str, keys: CacheKeys) -> Client {
    let config: RedisCacheConfig = fleet::config(url, "signed", std::time::Duration::from_secs(2));
    Client::builder()
        .compile_cache_redis_config(config)
        .compile_cache_keys(keys)
        .memory_cache_entries(0)
        .open()
        .unwrap()
}

/// The Redis key of module `n`'s entry, found as the one key a compile of it added.
fn entry_key(conn: &mut redis::Connection, before: &[String]) -> String {
    let now: Vec<String> = conn.keys("signed:exe:*").unwrap();
    let mut added = now.into_iter().filter(|k| !before.contains(k));
    let key = added.next().expect("the compile stored an entry");
    assert!(added.next().is_none());
    key
}

#[test]
fn a_planted_redis_entry_is_refused_and_keys_rotate() {
    let server = RedisServer::start(&[]);
    let url = server.url();
    let mut conn = server.connection().unwrap();
    let a = redis_client(&url, keys(&[1]));
    assert_eq!(run(&a, 21), expected(21));
    let victim_key = entry_key(&mut conn, &[]);
    assert_eq!(run(&a, 22), expected(22));
    let donor_key = entry_key(&mut conn, std::slice::from_ref(&victim_key));
    let (victim, donor): (Vec<u8>, Vec<u8>) = (
        conn.get(&victim_key).unwrap(),
        conn.get(&donor_key).unwrap(),
    );
    // A fleet sharing the key shares compiles, as without keys.
    let b = redis_client(&url, keys(&[1]));
    assert_eq!(run(&b, 21), expected(21));
    let s = b.compile_cache_stats();
    assert_eq!(
        (s.redis_hits, s.compiles, s.unsigned_entries),
        (1, 0, 0),
        "{s:?}"
    );

    let planted = plant(&victim, &donor);
    for (what, bytes) in [
        ("unsigned", planted.clone()),
        ("signed with another key", keys(&[2]).sign(&planted)),
    ] {
        let _: () = conn.set(&victim_key, bytes).unwrap();
        let reader = redis_client(&url, keys(&[1]));
        assert_eq!(run(&reader, 21), expected(21), "{what}");
        let s = reader.compile_cache_stats();
        assert_eq!(
            (
                s.unsigned_entries,
                s.compiles,
                s.redis_hits,
                s.corrupt_entries
            ),
            (1, 1, 1, 0),
            "{what}: found (a Redis hit), refused, compiled: {s:?}"
        );
        let now: Vec<u8> = conn.get(&victim_key).unwrap();
        assert!(
            keys(&[1]).open(&now).is_ok(),
            "{what}: a signed entry replaced it"
        );
    }

    // Rotation: key 3 signs, key 1 still verifies the fleet's older entries.
    let rotated = redis_client(&url, keys(&[3, 1]));
    assert_eq!(run(&rotated, 22), expected(22));
    assert_eq!(run(&rotated, 23), expected(23));
    let s = rotated.compile_cache_stats();
    assert_eq!(
        (s.redis_hits, s.compiles, s.unsigned_entries),
        (1, 1, 0),
        "{s:?}"
    );
    let fresh_key = entry_key(&mut conn, &[victim_key.clone(), donor_key.clone()]);
    let fresh: Vec<u8> = conn.get(fresh_key).unwrap();
    assert!(keys(&[3]).open(&fresh).is_ok(), "the new key signs");
    assert!(keys(&[1]).open(&fresh).is_err(), "not the old one");
}

/// The child side of `the_key_file_the_environment_names_signs_entries`, run with
/// `PJRT_ACTORS_CACHE_KEY_FILE` set.
#[test]
#[ignore = "a child process of the_key_file_the_environment_names_signs_entries, which runs it"]
fn keyed_by_env_child() {
    let dir = std::env::var("PJRT_ACTORS_TEST_KEYED_DIR").expect("run by its parent");
    assert_eq!(
        run(&disk_client(std::path::Path::new(&dir), None), 51),
        expected(51)
    );
}

#[test]
fn the_key_file_the_environment_names_signs_entries() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("signed-env");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("keys");
    // Base64 of 32 bytes of 9, then the hex of 32 bytes of 8: the first signs.
    std::fs::write(
        &file,
        format!(
            "# fleet keys\nCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk=\n{}\n",
            "08".repeat(32)
        ),
    )
    .unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let cache = dir.join("cache");
    crate::common::run_child_test(
        "signed_cache::keyed_by_env_child",
        &[
            ("PJRT_ACTORS_TEST_KEYED_DIR", cache.display().to_string()),
            (pjrt_actors::CACHE_KEY_FILE_ENV, file.display().to_string()),
        ],
        std::time::Duration::from_secs(120),
    );
    let [entry] = cache_entries(&cache).try_into().unwrap();
    let bytes = std::fs::read(entry).unwrap();
    assert!(
        keys(&[9]).open(&bytes).is_ok(),
        "signed with the file's first key"
    );
    assert!(keys(&[8]).open(&bytes).is_err());
}
