//! What the fleet tests share: a distinct small module per number, a client on a Redis tier,
//! and a compile whose answer is checked. Also included by `tests/fleet_tls.rs`, a binary of
//! its own.
#![allow(dead_code)]

use std::time::Duration;

use pjrt_actors::{Client, CompileOptions, RedisCacheConfig};

/// A distinct small module per `n` (so a distinct cache key), computing x * n + n.
pub fn module(n: u32) -> String {
    format!(
        "module @fleet{n} {{\n  func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {{\n    %c = stablehlo.constant dense<{n}.0> : tensor<4xf32>\n    %m = stablehlo.multiply %x, %c : tensor<4xf32>\n    %y = stablehlo.add %m, %c : tensor<4xf32>\n    return %y : tensor<4xf32>\n  }}\n}}\n"
    )
}

/// The tier's settings for `url` under `namespace`, each round trip limited to `op_timeout`.
pub fn config(url: &str, namespace: &str, op_timeout: Duration) -> RedisCacheConfig {
    let mut c = RedisCacheConfig::new(url);
    c.namespace = namespace.into();
    c.op_timeout = op_timeout;
    c
}

pub fn client(config: RedisCacheConfig) -> Client {
    Client::builder()
        .compile_cache_redis_config(config)
        .open()
        .unwrap()
}

/// Compiles module `n` and checks it computes x * n + n.
pub fn compile_and_check(client: &Client, n: u32) {
    let exe = client
        .compile_and_load(module(n), &CompileOptions::default())
        .unwrap();
    let d = &client.devices()[0];
    let x = d.put(&[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap();
    let y = exe.execute(&[&x]).unwrap()[0].to_vec::<f32>().unwrap();
    let n = n as f32;
    assert_eq!(y, [1.0 * n + n, 2.0 * n + n, 3.0 * n + n, 4.0 * n + n]);
}
