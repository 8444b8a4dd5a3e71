//! `pjrt-actors serve` against requests a hostile or careless client sends (the round-4
//! red-team findings): values that must cross JSON bit for bit, typed gRPC contents, output
//! names given twice, versions, ids, classification, lenient parameters, Triton's timeout
//! rules, metrics that count every answer, and messages that stay short.

mod common;

use std::net::TcpStream;

use common::server::{
    Scratch, Server, grpc_cases, http, identity_program, infer_json, infer_text, message,
    read_answer,
};
use serde_json::{Value, json};

/// Random bit patterns (xorshift), never NaN.
fn random_f64s(n: usize) -> Vec<f64> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let v = f64::from_bits(state);
        if v.is_finite() {
            out.push(v);
        }
    }
    out
}

/// The numbers of the first output's `data`, as the text the server wrote them in.
fn data_texts(body: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(body);
    let at = text.find("\"data\":[").expect("a data list") + "\"data\":[".len();
    let end = at + text[at..].find(']').unwrap();
    text[at..end]
        .split(',')
        .map(|s| s.trim_matches('"').to_string())
        .collect()
}

#[test]
fn floats_cross_json_bit_for_bit_both_ways() {
    let dir = Scratch::new("serve-fp64");
    let f64_model = dir.write("f64.mlir", &identity_program("4x64", "f64"));
    let f32_model = dir.write("f32.mlir", &identity_program("4x2", "f32"));
    let server = Server::start(&[
        "--model".into(),
        format!("id64={f64_model}"),
        "--model".into(),
        format!("id32={f32_model}"),
    ])
    .unwrap();
    // 256 random doubles, written as Rust writes them (shortest round-trip digits): the server
    // must read each exactly and answer each exactly.
    let values = random_f64s(256);
    let data: Vec<String> = values.iter().map(|v| format!("{v:e}")).collect();
    let body = format!(
        r#"{{"inputs":[{{"name":"input0","datatype":"FP64","shape":[4,64],"data":[{}]}}]}}"#,
        data.join(",")
    );
    let (status, _, answer) = http(
        server.http,
        "POST",
        "/v2/models/id64/infer",
        &[],
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let got: Vec<f64> = data_texts(&answer)
        .iter()
        .map(|t| t.parse().unwrap())
        .collect();
    let changed = (got.iter().zip(&values))
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert_eq!(got.len(), values.len());
    assert_eq!(changed, 0, "{changed} of 256 doubles changed on the way");
    // The same bytes sent in binary come back as the same JSON text.
    let header = r#"{"inputs":[{"name":"input0","datatype":"FP64","shape":[4,64],"parameters":{"binary_data_size":2048}}]}"#;
    let mut binary = header.as_bytes().to_vec();
    binary.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    let length = [("Inference-Header-Content-Length", header.len().to_string())];
    let (status, _, answer) = http(
        server.http,
        "POST",
        "/v2/models/id64/infer",
        &length,
        &binary,
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let got: Vec<u64> = (data_texts(&answer).iter())
        .map(|t| t.parse::<f64>().unwrap().to_bits())
        .collect();
    assert_eq!(got, values.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    // f32's largest and smallest, as NumPy writes them, are taken and answered as written.
    let extremes = [
        "3.4028235e38",
        "-3.4028235e38",
        "1e-45",
        "1.1754944e-38",
        "0.1",
        "-0",
    ];
    let body = format!(
        r#"{{"inputs":[{{"name":"input0","datatype":"FP32","shape":[3,2],"data":[{}]}}]}}"#,
        extremes.join(",")
    );
    let (status, _, answer) = http(
        server.http,
        "POST",
        "/v2/models/id32/infer",
        &[],
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
    let bits = |t: &str| t.parse::<f32>().unwrap().to_bits();
    let got: Vec<u32> = data_texts(&answer).iter().map(|t| bits(t)).collect();
    assert_eq!(got, extremes.iter().map(|t| bits(t)).collect::<Vec<_>>());
    // Past f32's range is refused, not made infinite.
    let body =
        r#"{"inputs":[{"name":"input0","datatype":"FP32","shape":[1,2],"data":[3.5e38,1]}]}"#;
    let (status, err) = infer_text(server.http, "id32", body);
    assert_eq!(status, 400, "{err}");
    assert!(
        message(&err).contains("`3.5e38` is out of the range"),
        "{err}"
    );
}

/// The int8 identity model's typed-contents cases: (case, the code it must get, what its
/// message says).
fn typed_contents_cases() -> Vec<(Value, &'static str, &'static str)> {
    let input = |shape: Value, contents: Value| json!({"model": "id8", "inputs": [{"name": "input0", "datatype": "INT8", "shape": shape, "contents": contents}]});
    let mut raw_and_typed = input(json!([1, 4]), json!({"int_contents": [1, 2, 3, 4]}));
    raw_and_typed["raw"] = json!(["01020304"]);
    vec![
        (
            input(json!([1, 4]), json!({"int_contents": [1, -2, 3, 127]})),
            "OK",
            "",
        ),
        (
            input(json!([4, 4]), json!({"int_contents": [1, 2, 3, 4]})),
            "INVALID_ARGUMENT",
            "int_contents holds 4 values; its shape holds 16",
        ),
        (
            input(
                json!([1, 4]),
                json!({"fp32_contents": [1.0, 2.0, 3.0, 4.0]}),
            ),
            "INVALID_ARGUMENT",
            "INT8 values are sent in int_contents; fp32_contents holds 4",
        ),
        (
            input(
                json!([1, 4]),
                json!({"int_contents": [1, 2], "int64_contents": [3, 4]}),
            ),
            "INVALID_ARGUMENT",
            "int64_contents holds 2 values",
        ),
        (
            input(json!([1, 4]), json!({"int_contents": [1, 2, 3, 300]})),
            "INVALID_ARGUMENT",
            "value 3, 300, does not fit in INT8",
        ),
        (raw_and_typed, "INVALID_ARGUMENT", "and typed contents too"),
    ]
}

#[test]
fn grpc_typed_contents_are_read_by_datatype_one_value_each() {
    let dir = Scratch::new("serve-typed");
    let i8_model = dir.write("i8.mlir", &identity_program("4x4", "i8"));
    let f32_model = dir.write("f32.mlir", &identity_program("4x6", "f32"));
    let server = Server::start(&[
        "--model".into(),
        format!("id8={i8_model}"),
        "--model".into(),
        format!("f32={f32_model}"),
    ])
    .unwrap();
    let mut cases = typed_contents_cases();
    // FP32 given int_contents is refused (it was answered [1,1,1,1,1,1] with OK).
    cases.push((
        json!({"model": "f32", "inputs": [{"name": "input0", "datatype": "FP32", "shape": [1, 6], "contents": {"int_contents": [1, 2, 3, 4, 5, 6]}}]}),
        "INVALID_ARGUMENT",
        "FP32 values are sent in fp32_contents; int_contents holds 6",
    ));
    cases.push((
        json!({"model": "f32", "inputs": [{"name": "input0", "datatype": "FP32", "shape": [1, 6], "contents": {"fp32_contents": [1.5, -2, 3.4028235e38, 0, 5, 6]}}]}),
        "OK",
        "",
    ));
    let asked: Vec<Value> = cases.iter().map(|c| c.0.clone()).collect();
    let answers = grpc_cases(&server, &json!(asked));
    for ((case, code, says), a) in cases.iter().zip(&answers) {
        assert_eq!(a["code"], *code, "{case}: {a}");
        assert!(
            a["message"].as_str().unwrap_or("").contains(says),
            "{case}: {a} lacks {says}"
        );
    }
    // The int8 answer is the values sent, one byte each; the float one, the floats sent.
    assert_eq!(
        answers[0]["outputs"][0]["raw"], "01fe037f",
        "{}",
        answers[0]
    );
    let floats: Vec<u8> = [1.5f32, -2.0, f32::MAX, 0.0, 5.0, 6.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let hex: String = floats.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(answers.last().unwrap()["outputs"][0]["raw"], hex);
}

#[test]
fn outputs_named_twice_versions_ids_and_classification_follow_triton() {
    let dir = Scratch::new("serve-names");
    let model = dir.write("f32.mlir", &identity_program("4x2", "f32"));
    let server = Server::start(&["--model".into(), format!("m={model}")]).unwrap();
    let port = server.http;
    let input = json!([{"name": "input0", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]);
    // An output named twice is refused (10,000 repeats turned 214 KB into 37 MB).
    let twice = json!({"inputs": input, "outputs": [{"name": "output0"}, {"name": "output0"}]});
    let (status, err) = infer_json(port, "m", &twice);
    assert_eq!(status, 400, "{err}");
    assert!(
        message(&err).contains("output `output0` is asked for twice"),
        "{err}"
    );
    // The id is echoed; version 1 is served, any other is not found.
    let with_id = json!({"id": "req-7", "inputs": input});
    let (status, _, body) = http(
        port,
        "POST",
        "/v2/models/m/versions/1/infer",
        &[],
        with_id.to_string().as_bytes(),
    );
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((status, &answer["id"]), (200, &json!("req-7")), "{answer}");
    for path in [
        "/v2/models/m/versions/999/infer",
        "/v2/models/m/versions/999/ready",
        "/v2/models/m/versions/999",
    ] {
        let method = if path.ends_with("infer") {
            "POST"
        } else {
            "GET"
        };
        let (status, _, body) = http(port, method, path, &[], with_id.to_string().as_bytes());
        assert_eq!(status, 404, "{path}: {}", String::from_utf8_lossy(&body));
        assert!(
            String::from_utf8_lossy(&body).contains("has no version `999`"),
            "{path}"
        );
    }
    let classify = json!({"inputs": input, "outputs": [{"name": "output0", "parameters": {"classification": 2}}]});
    let (status, err) = infer_json(port, "m", &classify);
    assert_eq!(status, 400, "{err}");
    assert!(message(&err).contains("classification"), "{err}");
    // The same over gRPC.
    let infer = |extra: Value| {
        let mut c = json!({"model": "m", "inputs": [{"name": "input0", "datatype": "FP32", "shape": [1, 2], "contents": {"fp32_contents": [1, 2]}}]});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    };
    let cases = json!([
        infer(json!({"outputs": [{"name": "output0"}, {"name": "output0"}]})),
        infer(json!({"version": "999"})),
        infer(json!({"version": "1", "id": "req-8"})),
        infer(json!({"outputs": [{"name": "output0", "parameters": {"classification": {"int64_param": 2}}}]})),
        {"method": "ModelReady", "model": "m", "version": "999"},
        {"method": "ModelMetadata", "model": "m", "version": "999"},
        {"method": "ModelReady", "model": "m", "version": "1"},
        // A 100 KB unknown name: NOT_FOUND, its message short (it was RESOURCE_EXHAUSTED).
        {"model": "x", "repeat": 100_000, "inputs": []},
        // A 100,000-dim shape: INVALID_ARGUMENT, the shape cut (it was RESOURCE_EXHAUSTED,
        // "metadata size exceeds hard limit").
        {"model": "m", "inputs": [{"name": "input0", "datatype": "FP32", "shape": vec![1; 100_000],
            "contents": {"fp32_contents": [1]}}]},
    ]);
    let a = grpc_cases(&server, &cases);
    assert_eq!(a[0]["code"], "INVALID_ARGUMENT", "{}", a[0]);
    assert!(
        a[0]["message"]
            .as_str()
            .unwrap()
            .contains("asked for twice")
    );
    assert_eq!(a[1]["code"], "NOT_FOUND", "{}", a[1]);
    assert_eq!(
        (&a[2]["code"], &a[2]["id"]),
        (&json!("OK"), &json!("req-8")),
        "{}",
        a[2]
    );
    assert_eq!(a[3]["code"], "INVALID_ARGUMENT", "{}", a[3]);
    assert_eq!(a[4]["code"], "NOT_FOUND", "{}", a[4]);
    assert_eq!(a[5]["code"], "NOT_FOUND", "{}", a[5]);
    assert_eq!(
        (&a[6]["code"], &a[6]["ready"]),
        (&json!("OK"), &json!(true))
    );
    assert_eq!(a[7]["code"], "NOT_FOUND", "{}", a[7]);
    let long = a[7]["message"].as_str().unwrap();
    assert!(
        long.len() < 300 && long.contains("(100000 bytes)"),
        "{long}"
    );
    assert_eq!(a[8]["code"], "INVALID_ARGUMENT", "{}", a[8]);
    let shape = a[8]["message"].as_str().unwrap();
    assert!(
        shape.len() < 400 && shape.contains("(100000 dims)"),
        "{shape}"
    );
    // The same over HTTP: 400, a short body.
    let ones = vec!["1"; 100_000].join(",");
    let body = format!(
        r#"{{"inputs":[{{"name":"input0","datatype":"FP32","shape":[{ones}],"data":[1]}}]}}"#
    );
    let (status, _, answer) = common::server::http(
        server.http,
        "POST",
        "/v2/models/m/infer",
        &[],
        body.as_bytes(),
    );
    assert_eq!(status, 400);
    assert!(answer.len() < 1200, "{} bytes", answer.len());
    assert!(String::from_utf8_lossy(&answer).contains("(100000 dims)"));
}

#[test]
fn lenient_json_is_refused_quoting_what_was_sent() {
    let dir = Scratch::new("serve-lenient");
    let model = dir.write("f32.mlir", &identity_program("4x3", "f32"));
    let server = Server::start(&["--model".into(), format!("m={model}")]).unwrap();
    let input = |shape: &str, rest: &str| {
        format!(r#"{{"inputs":[{{"name":"input0","datatype":"FP32","shape":{shape}{rest}}}]"#)
    };
    // (body, what the 400's message says)
    let cases = [
        (
            input("[2,3]", r#","data":[[1,2,3],[4,5]]"#) + "}",
            "`data[1]` holds 2 items",
        ),
        (
            input(
                "[1,3]",
                r#","data":[1,2,3],"parameters":{"binary_data_size":12}"#,
            ) + "}",
            "both `data` and binary_data_size",
        ),
        (
            input("[1,3]", r#","data":[1,2,3]"#) + r#","parameters":{"priority":"high"}}"#,
            "`priority` is `\"high\"`",
        ),
        (
            input("[1,3]", r#","data":[1,2,3]"#) + r#","parameters":{"priority":1.5}}"#,
            "`priority` is `1.5`",
        ),
        (
            input("[1,3]", r#","data":[1,2,3]"#) + r#","parameters":{"timeout":-4}}"#,
            "`timeout` is `-4`",
        ),
        (
            input("[18446744073709551615,3]", r#","data":[1]"#) + "}",
            "18446744073709551615",
        ),
        (
            input("[1.0,3]", r#","data":[1,2,3]"#) + "}",
            "shape is `1.0`",
        ),
        (
            input("[1,3]", r#","parameters":{"binary_data_size":-12}"#) + "}",
            "binary_data_size is `-12`",
        ),
        (
            input("[1,3]", r#","data":[1,2,"x"]"#) + "}",
            "the string `\"x\"`",
        ),
    ];
    for (body, says) in cases {
        let (status, err) = infer_text(server.http, "m", &body);
        assert_eq!(status, 400, "{body}: {err}");
        assert!(message(&err).contains(says), "{body}: {err} lacks {says}");
    }
    // The same over gRPC: parameters of the wrong kind, a negative dim.
    let infer = |params: Value, shape: Value| json!({"model": "m", "parameters": params, "inputs": [{"name": "input0", "datatype": "FP32", "shape": shape, "contents": {"fp32_contents": [1, 2, 3]}}]});
    let cases = [
        (
            infer(json!({"priority": {"string_param": "high"}}), json!([1, 3])),
            "string_param `high`",
        ),
        (
            infer(json!({"timeout": {"double_param": 1.5}}), json!([1, 3])),
            "double_param 1.5",
        ),
        (
            infer(json!({"priority": {"int64_param": -1}}), json!([1, 3])),
            "int64_param -1",
        ),
        (infer(json!({}), json!([-1, 3])), "a dim of -1"),
    ];
    let asked: Vec<Value> = cases.iter().map(|c| c.0.clone()).collect();
    for ((case, says), a) in cases.iter().zip(grpc_cases(&server, &json!(asked))) {
        assert_eq!(a["code"], "INVALID_ARGUMENT", "{case}: {a}");
        assert!(
            a["message"].as_str().unwrap().contains(says),
            "{a} lacks {says}"
        );
    }
}

#[test]
fn timeouts_follow_triton_and_past_the_server_limit_grpc_says_deadline_exceeded() {
    let dir = Scratch::new("serve-timeouts");
    let program = identity_program("4x2", "f32");
    // A queue delay of 3 s: a lone request waits for company that never comes.
    let slow = |policy: Value| {
        json!({"max_queue_delay_microseconds": 3_000_000, "default_queue_policy": policy})
            .to_string()
    };
    let models = [
        (
            "short",
            slow(json!({"default_timeout_microseconds": 300_000, "allow_timeout_override": true})),
        ),
        (
            "fixed",
            json!({"default_queue_policy": {"allow_timeout_override": false}}).to_string(),
        ),
        ("waits", slow(json!({}))),
        // The same for gRPC, a queue of its own: in one queue, a request the server gave up on
        // still opens the batch window, and a gRPC client slow to start (a loaded machine)
        // would ride out in its batch before the limit.
        ("waits_grpc", slow(json!({}))),
    ];
    let mut args = vec!["--request-timeout".to_string(), "1".into()];
    for (name, config) in &models {
        args.extend([
            "--model".into(),
            format!("{name}={}", dir.write(&format!("{name}.mlir"), &program)),
            "--config".into(),
            format!("{name}={}", dir.write(&format!("{name}.json"), config)),
        ]);
    }
    let server = Server::start(&args).unwrap();
    let request = |timeout: u64| json!({"inputs": [{"name": "input0", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}], "parameters": {"timeout": timeout}});
    // An override may only shorten the default: asking 10 s still expires at 0.3 s, in the
    // queue, before the 3 s delay ends (a longer override would have let it run).
    let (status, err) = infer_json(server.http, "short", &request(10_000_000));
    assert_eq!(status, 504, "{err}");
    assert!(
        !message(&err).contains("--request-timeout"),
        "expired in the queue: {err}"
    );
    // Without the override a request's timeout is ignored, as Triton ignores it (was 400).
    let (status, err) = infer_json(server.http, "fixed", &request(1));
    assert_eq!(status, 200, "{err}");
    // Past the server's own limit: 504 over HTTP, DEADLINE_EXCEEDED over gRPC (was CANCELLED).
    let (status, err) = infer_json(server.http, "waits", &request(0));
    assert_eq!(status, 504, "{err}");
    assert!(message(&err).contains("--request-timeout"), "{err}");
    let a = grpc_cases(
        &server,
        &json!([{"model": "waits_grpc", "inputs": [{"name": "input0", "datatype": "FP32", "shape": [1, 2], "contents": {"fp32_contents": [1, 2]}}]}]),
    );
    assert_eq!(a[0]["code"], "DEADLINE_EXCEEDED", "{}", a[0]);
}

#[test]
fn metrics_count_every_answer_and_escape_model_names() {
    let dir = Scratch::new("serve-metrics");
    dir.write("a\"b/model.mlir", &identity_program("4x2", "f32"));
    dir.write("plain/model.mlir", &identity_program("4x2", "f32"));
    let server = Server::start(&[
        "--model-repository".into(),
        dir.0.display().to_string(),
        "--max-body-bytes".into(),
        "4096".into(),
    ])
    .unwrap();
    let path = "/v2/models/a%22b/infer";
    let good = json!({"inputs": [{"name": "input0", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]}).to_string();
    let bodies: [(&[u8], u16); 5] = [
        (good.as_bytes(), 200),
        (b"{not json", 400),
        (
            br#"{"inputs":[{"name":"input0","datatype":"FP32","shape":[1,2],"data":[[1],[2]]}]}"#,
            400,
        ),
        (&[b' '; 5000], 413),
        (good.as_bytes(), 200),
    ];
    for (body, want) in bodies {
        let (status, _, answer) = http(server.http, "POST", path, &[], body);
        assert_eq!(status, want, "{}", String::from_utf8_lossy(&answer));
    }
    // gRPC answers are counted too: one served, one unknown model, one refused input.
    let input = json!([{"name": "input0", "datatype": "FP32", "shape": [1, 2], "contents": {"fp32_contents": [1, 2]}}]);
    let a = grpc_cases(
        &server,
        &json!([
            {"model": "a\"b", "inputs": input},
            {"model": "nope", "inputs": input},
            {"model": "a\"b", "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "contents": {"fp32_contents": [1, 2]}}]},
        ]),
    );
    let codes: Vec<&Value> = a.iter().map(|a| &a["code"]).collect();
    assert_eq!(
        codes,
        [
            &json!("OK"),
            &json!("NOT_FOUND"),
            &json!("INVALID_ARGUMENT")
        ]
    );
    let (_, _, page) = http(server.http, "GET", "/metrics", &[], b"");
    let page = String::from_utf8_lossy(&page);
    // Every sample line is `name{labels} value`, its labels well formed.
    let count = |outcome: &str| -> u64 {
        let key = format!(
            "pjrt_actors_server_requests_total{{model=\"a\\\"b\",protocol=\"http\",outcome=\"{outcome}\"}} "
        );
        (page.lines().find_map(|l| l.strip_prefix(&key))).map_or(0, |n| n.parse().unwrap())
    };
    assert_eq!(
        (count("ok"), count("invalid"), count("too_large")),
        (2, 2, 1),
        "{page}"
    );
    for (labels, want) in [
        (r#"model="a\"b",protocol="grpc",outcome="ok""#, 1),
        (r#"model="a\"b",protocol="grpc",outcome="invalid""#, 1),
        (
            r#"model="(unknown)",protocol="grpc",outcome="not_found""#,
            1,
        ),
    ] {
        let key = format!("pjrt_actors_server_requests_total{{{labels}}} {want}");
        assert!(page.lines().any(|l| l == key), "no `{key}` in\n{page}");
    }
    // Each family is named once, with all its samples after it, both models' among them: a
    // scrape refuses a second TYPE line (joined per-model pages had one per model).
    let mut families = std::collections::BTreeSet::new();
    let mut family = "";
    for line in page.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            family = rest.split(' ').next().unwrap();
            assert!(
                families.insert(family),
                "a second TYPE for {family} in\n{page}"
            );
        } else if !line.starts_with('#') && !line.is_empty() {
            assert!(
                line.starts_with(family),
                "{line} outside its family {family}"
            );
        }
    }
    for model in [r#"a\"b"#, "plain"] {
        let key = format!("pjrt_batcher_queue_depth{{model=\"{model}\"}} 0");
        assert!(page.lines().any(|l| l == key), "no `{key}` in\n{page}");
    }
    for line in page
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let value = line.rsplit(' ').next().unwrap();
        assert!(
            value.parse::<f64>().is_ok(),
            "a sample without a value: {line}"
        );
        let labels = line
            .split_once('{')
            .map(|(_, l)| l.rsplit_once('}').unwrap().0);
        if let Some(labels) = labels {
            // Quotes pair up once escaped ones are removed: no label breaks out of its value.
            let bare = labels.replace("\\\\", "").replace("\\\"", "");
            assert_eq!(bare.matches('"').count() % 2, 0, "{line}");
        }
    }
}

#[test]
fn a_body_past_the_limit_is_413_before_100_continue_and_grpc_keeps_the_same_bound() {
    let dir = Scratch::new("serve-body");
    let model = dir.write("f32.mlir", &identity_program("4x65536", "f32"));
    let server = Server::start(&[
        "--model".into(),
        format!("m={model}"),
        "--max-body-bytes".into(),
        "1000000".into(),
    ])
    .unwrap();
    // A declared length past the limit with `Expect: 100-continue`: 413 at once, never
    // `100 Continue` (the client would then send the megabytes for nothing).
    let mut s = TcpStream::connect(("127.0.0.1", server.http)).unwrap();
    use std::io::Write;
    s.write_all(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\nExpect: 100-continue\r\n\r\n")
        .unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let (status, _, _) = read_answer(&mut s);
    assert_eq!(status, 413);
    // gRPC: a 1.05 MB message is past the same limit (it was served up to tonic's 4 MiB);
    // a 0.5 MB one is served both ways, its answer inside the limit.
    let input = |rows: usize| json!({"model": "m", "inputs": [{"name": "input0", "datatype": "FP32", "shape": [rows, 65536]}], "raw_zeros": [rows * 65536 * 4]});
    let a = grpc_cases(&server, &json!([input(4), input(1)]));
    assert_eq!(a[0]["code"], "OUT_OF_RANGE", "{}", a[0]);
    assert_eq!(
        a[1]["code"], "OK",
        "an answer of 1 row (256 KB) fits: {}",
        a[1]
    );
    // The limit bounds answers too: one row in binary (256 KB) asks for up to 1.1 MB of JSON
    // text back, refused before it runs; asked in binary, it is served.
    let header = |binary: bool| {
        json!({"inputs": [{"name": "input0", "datatype": "FP32", "shape": [1, 65536], "parameters": {"binary_data_size": 262144}}], "parameters": {"binary_data_output": binary}}).to_string()
    };
    for (binary, want) in [(false, 413), (true, 200)] {
        let header = header(binary);
        let mut body = header.clone().into_bytes();
        body.extend(vec![0u8; 262144]);
        let length = [("Inference-Header-Content-Length", header.len().to_string())];
        let (status, _, answer) = http(server.http, "POST", "/v2/models/m/infer", &length, &body);
        let text = String::from_utf8_lossy(&answer[..answer.len().min(300)]).to_string();
        assert_eq!(status, want, "binary output {binary}: {text}");
        if want == 413 {
            assert!(text.contains("answers are limited to 1000000"), "{text}");
        }
    }
}
