//! The tier's key names: `{namespace}:{kind}:{{sha256}}`, the hash in braces so that on a
//! cluster an entry, its lease and its wake-up channel hash to one slot (lease scripts touch
//! one key; a takeover's look and lease land on one master). And finding the tier's own keys.

use crate::compile::signing::{CacheKeys, SignatureCount};
use crate::fleet::target::{RedisConnection, RedisTarget};

/// The key (or channel) of `kind` for the compile key `hex` under `namespace`.
pub fn name(namespace: &str, kind: &str, hex: &str) -> String {
    format!("{namespace}:{kind}:{{{hex}}}")
}

/// Why `namespace` cannot name the tier's keys, if it cannot: a brace in it would move the
/// hash tag, and an entry and its lease could land on different cluster slots.
pub fn namespace_problem(namespace: &str) -> Option<String> {
    namespace.contains(['{', '}']).then(|| {
        format!("{namespace:?}: a namespace has no braces (the tier's keys end in a {{hash tag}} that keeps an entry and its lease in one cluster slot)")
    })
}

/// The keys of `kinds` this tier writes under `namespace`, on every master of a cluster (SCAN,
/// so no server is blocked on a large keyspace; a cluster's masters each over a connection of
/// its own, found from the slot map): the pattern has the namespace's glob characters escaped,
/// and what it finds is kept only when it is exactly `NS:KIND:` and a SHA-256 in lowercase hex
/// within braces.
pub async fn ours(
    target: &RedisTarget,
    c: &mut RedisConnection,
    namespace: &str,
    kinds: &[&str],
) -> redis::RedisResult<Vec<String>> {
    let mut keys = Vec::new();
    let masters = c.slot_map().await?;
    if masters.is_empty() {
        scan(c, namespace, kinds, &mut keys).await?;
    }
    for m in masters {
        let client = target.node(&m.host, m.port)?;
        let mut node = client.get_multiplexed_async_connection().await?;
        scan(&mut node, namespace, kinds, &mut keys).await?;
    }
    keys.sort();
    keys.dedup();
    Ok(keys)
}

/// Adds to `keys` those of `kinds` under `namespace` on the one server `c` speaks to.
async fn scan(
    c: &mut impl redis::aio::ConnectionLike,
    namespace: &str,
    kinds: &[&str],
    keys: &mut Vec<String>,
) -> redis::RedisResult<()> {
    for kind in kinds {
        let prefix = format!("{namespace}:{kind}:");
        let pattern = format!("{}*", glob_literal(&prefix));
        let mut cursor = 0u64;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000);
            // As bytes: one key that is not UTF-8 under the prefix (not ours: ours are ASCII)
            // would fail the whole answer's decoding, and with it stats and clear.
            let (next, found): (u64, Vec<Vec<u8>>) = scan.query_async(c).await?;
            keys.extend(
                (found.into_iter())
                    .filter_map(|k| String::from_utf8(k).ok())
                    .filter(|k| is_ours(k, &prefix)),
            );
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(())
}

/// The sum of `command`'s integer answers for each of `keys`, one key a command (on a cluster
/// the keys lie in many slots, which no one command may span), up to 64 in flight at once.
pub async fn sum_over(
    c: RedisConnection,
    keys: Vec<String>,
    command: &'static str,
) -> redis::RedisResult<u64> {
    use futures_util::{StreamExt, TryStreamExt};
    futures_util::stream::iter(keys)
        .map(move |key| {
            let mut c = c.clone();
            async move {
                redis::cmd(command)
                    .arg(key)
                    .query_async::<u64>(&mut c)
                    .await
            }
        })
        .buffer_unordered(64)
        .try_fold(0u64, |sum, n| async move { Ok(sum + n) })
        .await
}

/// The entries at `names` by signature (`keys`: which of them verify), fetched a few at a time.
pub async fn signatures(
    c: RedisConnection,
    names: Vec<String>,
    keys: Option<CacheKeys>,
) -> redis::RedisResult<SignatureCount> {
    use futures_util::{StreamExt, TryStreamExt};
    futures_util::stream::iter(names)
        .map(move |name| {
            let mut c = c.clone();
            async move {
                redis::cmd("GET")
                    .arg(name)
                    .query_async::<Option<Vec<u8>>>(&mut c)
                    .await
            }
        })
        .buffer_unordered(8)
        .try_fold(SignatureCount::default(), move |mut count, entry| {
            count.tally(&entry.unwrap_or_default(), keys.as_ref());
            async move { Ok(count) }
        })
        .await
}

/// `text` as a Redis glob pattern matching itself only: `*`, `?`, `[`, `]` and `\` escaped.
pub fn glob_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Whether `key` is `prefix` and a SHA-256 in lowercase hex within braces: a key of ours.
fn is_ours(key: &str, prefix: &str) -> bool {
    (key.strip_prefix(prefix))
        .and_then(|rest| rest.strip_prefix('{')?.strip_suffix('}'))
        .is_some_and(|hash| {
            hash.len() == 64
                && hash
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_keys_of_ours_are_ours_and_the_namespace_is_literal() {
        let hash = "ab".repeat(32);
        // (key, prefix, ours)
        let cases = [
            (name("pjrt-actors", "exe", &hash), "pjrt-actors:exe:", true),
            (
                name("pjrt-actors", "lease", &hash),
                "pjrt-actors:lease:",
                true,
            ),
            (format!("pjrt-actors:exe:{hash}"), "pjrt-actors:exe:", false),
            (
                "pjrt-actors:exe:{notahash}".to_string(),
                "pjrt-actors:exe:",
                false,
            ),
            (
                name("pjrt-actors", "exe", &"AB".repeat(32)),
                "pjrt-actors:exe:",
                false,
            ),
            (
                format!("pjrt-actors:exe:{{{hash}}}0"),
                "pjrt-actors:exe:",
                false,
            ),
            ("sessions:alice".to_string(), "*:exe:", false),
            (name("other", "exe", &hash), "*:exe:", false),
        ];
        for (key, prefix, ours) in cases {
            assert_eq!(is_ours(&key, prefix), ours, "{key} under {prefix}");
        }
        assert_eq!(glob_literal("a*b?c[d]e\\f"), "a\\*b\\?c\\[d\\]e\\\\f");
    }

    #[test]
    fn an_entry_its_lease_and_its_channel_share_a_hash_tag() {
        let hash = "0f".repeat(32);
        for kind in ["exe", "lease", "wake"] {
            let key = name("ns", kind, &hash);
            let tag = &key[key.find('{').unwrap() + 1..key.find('}').unwrap()];
            assert_eq!(tag, hash, "{key}");
        }
        assert!(namespace_problem("fleet-a").is_none());
        assert!(namespace_problem("{fleet}").unwrap().contains("braces"));
    }
}
