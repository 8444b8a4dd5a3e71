//! OpenAI bodies read into what every route asks, and what is not built refused by name.

use super::*;

#[test]
fn bodies_are_read_into_the_one_readers_fields_and_what_is_not_built_is_refused() {
    let chat = read(
        br#"{"model": "lm", "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
            "max_completion_tokens": 5, "temperature": 0.5, "top_p": 0.9, "seed": 7, "stop": "x",
            "stream": true, "stream_options": {"include_usage": true}, "n": 1, "user": "me"}"#,
        Route::Chat,
    )
    .unwrap();
    let a = &chat.asked;
    assert_eq!(
        (a.max_tokens, a.temperature, a.top_p, a.seed),
        (Some(5), Some(0.5), Some(0.9), Some(7))
    );
    assert_eq!(chat.stop_strings, ["x"]);
    assert!(chat.stream && chat.include_usage);
    assert!(
        matches!(&chat.input, Input::Chat(m) if m == &[("user".to_string(), "Hi".to_string())])
    );
    let plain = read(br#"{"model": "lm", "prompt": "Hi"}"#, Route::Completions).unwrap();
    assert_eq!(plain.asked.max_tokens, Some(16));
    let asks = |body: &str, route| read(body.as_bytes(), route).unwrap().logprobs;
    let chat_body = r#"{"model": "lm", "messages": [{"role": "user", "content": "a"}], "logprobs": true, "top_logprobs": 3}"#;
    assert_eq!(asks(chat_body, Route::Chat), Some(3));
    assert_eq!(
        asks(
            r#"{"model": "lm", "prompt": "a", "logprobs": 2}"#,
            Route::Completions
        ),
        Some(2)
    );
    assert_eq!(
        asks(
            r#"{"model": "lm", "prompt": "a", "logprobs": null}"#,
            Route::Completions
        ),
        None
    );
    let ids = read(br#"{"model": "lm", "prompt": [1, 2]}"#, Route::Completions).unwrap();
    assert!(matches!(ids.input, Input::Prompt(Prompt::Ids(ref i)) if i == &[1, 2]));
    for (body, route, param) in [
        (
            r#"{"model": "lm", "prompt": "a", "n": 2}"#,
            Route::Completions,
            Some("n"),
        ),
        (
            r#"{"model": "lm", "messages": [{"role": "user", "content": "a"}], "tools": [{}]}"#,
            Route::Chat,
            Some("tools"),
        ),
        (
            r#"{"model": "lm", "messages": [{"role": "user", "content": "a"}], "response_format": {"type": "json_object"}}"#,
            Route::Chat,
            Some("response_format"),
        ),
        (
            r#"{"model": "lm", "prompt": "a", "logprobs": 6}"#,
            Route::Completions,
            Some("logprobs"),
        ),
        (
            r#"{"model": "lm", "prompt": "a", "logprobs": true}"#,
            Route::Completions,
            Some("logprobs"),
        ),
        (
            r#"{"model": "lm", "messages": [{"role": "user", "content": "a"}], "logprobs": 2}"#,
            Route::Chat,
            Some("logprobs"),
        ),
        (
            r#"{"model": "lm", "messages": [{"role": "user", "content": "a"}], "top_logprobs": 2}"#,
            Route::Chat,
            Some("top_logprobs"),
        ),
        (
            r#"{"model": "lm", "messages": [{"role": "user", "content": "a"}], "logprobs": true, "top_logprobs": 21}"#,
            Route::Chat,
            Some("top_logprobs"),
        ),
        (
            r#"{"model": "lm", "prompt": "a", "stop": ["1","2","3","4","5"]}"#,
            Route::Completions,
            Some("stop"),
        ),
        (
            r#"{"model": "lm", "prompt": "a", "temperature": 3}"#,
            Route::Completions,
            Some("temperature"),
        ),
        (
            r#"{"model": "lm", "prompt": "a", "max_tokens": 0}"#,
            Route::Completions,
            Some("max_tokens"),
        ),
        (
            r#"{"model": "lm", "prompt": ["a", "b"]}"#,
            Route::Completions,
            Some("prompt"),
        ),
        (
            r#"{"model": "lm", "prompt": [-1]}"#,
            Route::Completions,
            Some("prompt"),
        ),
        (
            r#"{"model": "lm", "messages": []}"#,
            Route::Chat,
            Some("messages"),
        ),
        (
            r#"{"model": "lm", "messages": [{"role": "robot", "content": "a"}]}"#,
            Route::Chat,
            Some("messages"),
        ),
        (
            r#"{"model": "lm", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#,
            Route::Chat,
            Some("messages"),
        ),
        (
            r#"{"model": "lm", "prompt": "a", "messages": []}"#,
            Route::Completions,
            Some("messages"),
        ),
        (
            r#"{"model": "lm", "messages": [{"role": "user", "content": "a"}], "prompt": "a"}"#,
            Route::Chat,
            Some("prompt"),
        ),
        (
            r#"{"model": "lm", "prompt": "a", "beam_width": 2}"#,
            Route::Completions,
            None,
        ),
        (r#"{"prompt": "a"}"#, Route::Completions, None),
        (r#"[1]"#, Route::Completions, None),
    ] {
        let r = read(body.as_bytes(), route).unwrap_err();
        assert_eq!(r.param, param, "{body}: {}", r.message);
        assert!(!r.message.is_empty());
    }
}
