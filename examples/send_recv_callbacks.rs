//! Host callbacks over host send/recv, the GPU transport: `y = double(x) + x` where `double`
//! is a Rust closure reached through a send of `x` and a recv of the result. On a plugin that
//! cannot compile host send/recv (XLA:CPU) it shows the refusal and exits 0; on a GPU plugin
//! (`scripts/gpu-check`) it runs 100 times and checks every answer. Last line: one JSON object.

use pjrt_actors::{Client, CompileOptions, Error, HostCallback};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (message, json) = run()?;
    if let Some(m) = message {
        println!("{m}");
    }
    println!("{json}");
    Ok(())
}

/// Runs the check: a message (the refusal, on CPU) and the JSON line.
pub fn run() -> Result<(Option<String>, String), Box<dyn std::error::Error>> {
    let client = Client::open()?;
    let double = HostCallback::map::<f32, f32>("double", &[4], |x| 2.0 * x)?;
    let ty = "tensor<4xf32>";
    let program = format!(
        "module @send_recv {{\n  func.func public @main(%x: {ty}) -> {ty} {{\n{}\n    %o = stablehlo.add %r, %x : {ty}\n    return %o : {ty}\n  }}\n}}\n",
        double.send_recv_text("%r", &["%x"], 1)
    );
    let platform = client.raw_platform_name().to_string();
    let exe = match client
        .compile_request(&program)
        .options(&CompileOptions::default())
        .callbacks(&[double])
        .load()
    {
        Ok(exe) => exe,
        Err(e @ Error::Unsupported { .. }) => {
            let json = format!("{{\"platform\":\"{platform}\",\"send_recv\":\"unsupported\"}}");
            return Ok((Some(e.to_string()), json));
        }
        Err(e) => return Err(e.into()),
    };
    let device = &exe.addressable_devices()[0];
    let mut checked = 0;
    for i in 0..100 {
        let x: Vec<f32> = (0..4).map(|k| (i * 4 + k) as f32).collect();
        let a = device.put(&x, &[4])?;
        let y = exe.execute(&[&a])?[0].to_vec::<f32>()?;
        let want: Vec<f32> = x.iter().map(|v| 3.0 * v).collect();
        if y != want {
            return Err(format!("run {i}: got {y:?}, want {want:?}").into());
        }
        checked += 1;
    }
    Ok((
        None,
        format!("{{\"platform\":\"{platform}\",\"send_recv\":\"ok\",\"runs_checked\":{checked}}}"),
    ))
}
