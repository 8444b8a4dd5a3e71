//! The GPU check's steps for jax.export artifacts and the inference server: exports made for
//! `platforms=("cpu", "cuda")` run with this plugin's platform index, and `pjrt-actors serve`
//! serves the exported transformer on this plugin, its answers checked against JAX's (on a
//! GPU at 2e-2 of the largest logit: f32 dots run as TF32 there).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pjrt_actors::host_data::{HostArray, read_npz};

const RTOL: f32 = 2e-2;

fn data(name: &str) -> PathBuf {
    PathBuf::from("tests/data/exported").join(name)
}

fn read(name: &str) -> Result<Vec<u8>, String> {
    std::fs::read(data(name)).map_err(|e| format!("{name}: {e}"))
}

fn npz(name: &str, key: &str) -> Result<HostArray, String> {
    let all = read_npz(&read(name)?).map_err(|e| e.to_string())?;
    (all.into_iter().find(|(k, _)| k == key).map(|(_, h)| h)).ok_or(format!("{name} has no {key}"))
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect()
}

/// The largest difference relative to the largest magnitude of `want`.
fn off(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().fold(1e-30f32, |m, v| m.max(v.abs()));
    if got.len() != want.len() {
        return f32::INFINITY;
    }
    got.iter()
        .zip(want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs() / scale))
}

/// The two-platform exports, called from their bytes on this client.
pub fn exported(client: &pjrt_actors::Client) -> Result<String, String> {
    let e = |e: pjrt_actors::Error| e.to_string();
    let mut lm = client
        .load_exported(&read("serve/transformer.cpu_cuda.exported")?)
        .map_err(e)?;
    lm.load_params(&read("serve/transformer.safetensors")?)
        .map_err(e)?;
    let tokens = npz("serve/requests.npz", "tokens")?;
    let rows = HostArray {
        dims: vec![16, 8],
        bytes: tokens.bytes[..16 * 8 * 4].to_vec(),
        ..tokens
    };
    let got = lm.call(&[rows]).map_err(e)?;
    let want = f32s(&npz("serve/requests.npz", "logits")?.bytes[..16 * 64 * 4]);
    let lm_off = off(&f32s(&got[0].bytes), &want);
    let mut small = client
        .load_exported(&read("corpus/two_platforms.exported")?)
        .map_err(e)?;
    small
        .load_params(&read("corpus/two_platforms.args.npz")?)
        .map_err(e)?;
    let got = small.call(&[]).map_err(e)?;
    let small_off = off(
        &f32s(&got[0].bytes),
        &f32s(&npz("corpus/two_platforms.want.npz", "out0")?.bytes),
    );
    let worst = lm_off.max(small_off);
    let verdict = if worst <= RTOL { "ok" } else { "WRONG" };
    Ok(format!(
        "{verdict}: platforms {:?} on {}, the transformer off JAX's logits by {lm_off:.1e}, two_platforms by {small_off:.1e}",
        lm.signature().platforms,
        client.raw_platform_name()
    ))
}

/// `pjrt-actors serve` on this plugin: 64 checked answers over HTTP, then requests/s from 8
/// keep-alive clients for 2 s, then SIGTERM.
pub fn kserve() -> Result<String, String> {
    let mut child = Command::new("pjrt-actors")
        .arg("serve")
        .args([
            "--model",
            &format!(
                "lm={}",
                data("serve/transformer.cpu_cuda.exported").display()
            ),
        ])
        .args([
            "--params",
            &format!("lm={}", data("serve/transformer.safetensors").display()),
        ])
        .args(["--http-port", "0", "--grpc-port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("pjrt-actors serve: {e}"))?;
    let line = (BufReader::new(child.stdout.take().ok_or("no stdout")?)
        .lines()
        .next())
    .and_then(|l| l.ok())
    .ok_or("serve printed no listening line")?;
    let port: u16 = (line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http=")))
    .and_then(|a| a.rsplit(':').next()?.parse().ok())
    .ok_or(format!("no http port in `{line}`"))?;
    let tokens: Vec<i32> = npz("serve/requests.npz", "tokens")?
        .bytes
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes(b.try_into().unwrap_or_default()))
        .collect();
    let logits = f32s(&npz("serve/requests.npz", "logits")?.bytes);
    let ask = |conn: &mut BufReader<TcpStream>, r: usize| -> Result<Vec<f32>, String> {
        let body = serde_json::json!({"inputs": [{"name": "tokens", "datatype": "INT32", "shape": [1, 8], "data": &tokens[r * 8..r * 8 + 8]}]}).to_string();
        // One write: head and body in two would wait on Nagle and a delayed ACK.
        let request = format!(
            "POST /v2/models/lm/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        (conn.get_mut().write_all(request.as_bytes())).map_err(|e| e.to_string())?;
        let (mut length, mut line) = (0usize, String::new());
        loop {
            line.clear();
            conn.read_line(&mut line).map_err(|e| e.to_string())?;
            let l = line.trim_end().to_ascii_lowercase();
            if l.is_empty() {
                break;
            }
            if let Some(v) = l.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut answer = vec![0; length];
        conn.read_exact(&mut answer).map_err(|e| e.to_string())?;
        let v: serde_json::Value = serde_json::from_slice(&answer).map_err(|e| e.to_string())?;
        let data = v["outputs"][0]["data"]
            .as_array()
            .ok_or(format!("no data in {v}"))?;
        Ok(data
            .iter()
            .map(|x| x.as_f64().unwrap_or(f64::NAN) as f32)
            .collect())
    };
    let connect = || {
        let s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok::<_, String>(BufReader::new(s))
    };
    let mut conn = connect()?;
    let mut worst = 0f32;
    for r in 0..64 {
        worst = worst.max(off(&ask(&mut conn, r)?, &logits[r * 64..r * 64 + 64]));
    }
    let start = Instant::now();
    let served: usize = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|k| {
                s.spawn(move || {
                    let Ok(mut c) = connect() else { return 0 };
                    let mut n = 0;
                    while start.elapsed() < Duration::from_secs(2)
                        && ask(&mut c, (k + n * 8) % 256).is_ok()
                    {
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or(0)).sum()
    });
    let rps = served as f64 / start.elapsed().as_secs_f64();
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().map_err(|e| e.to_string())?;
    let verdict = if worst <= RTOL && status.success() {
        "ok"
    } else {
        "WRONG"
    };
    Ok(format!(
        "{verdict}: 64 answers off JAX's by at most {worst:.1e}; {rps:.0} requests/s from 8 HTTP clients (JSON); exit {:?} after SIGTERM",
        status.code()
    ))
}
