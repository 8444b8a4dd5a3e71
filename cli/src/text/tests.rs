//! The text model against what the data script recorded with Hugging Face's own `tokenizers`
//! and jinja2 (tests/data/exported/generate_text/text_cases.json): prompts encoded and chats
//! rendered to the same ids, answers decoded to the same text, whole and as a stream, and stop
//! strings cut where Python cut them.

use super::*;
use serde_json::Value;

fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/exported/generate_text")
}

fn cases() -> Vec<Value> {
    let v: Value =
        serde_json::from_slice(&std::fs::read(folder().join("text_cases.json")).unwrap()).unwrap();
    v["cases"].as_array().unwrap().clone()
}

fn ids(v: &Value) -> Vec<i32> {
    (v.as_array().unwrap().iter())
        .map(|t| t.as_i64().unwrap() as i32)
        .collect()
}

fn model() -> TextModel {
    TextModel::load(&folder(), 384).unwrap().unwrap()
}

#[test]
fn prompts_and_chats_become_the_ids_hugging_face_makes() {
    let m = model();
    let mut chats = 0;
    for c in cases() {
        let want = ids(&c["prompt_ids"]);
        let got = match c["kind"].as_str().unwrap() {
            k if k.starts_with("completion") => m.encode(c["prompt"].as_str().unwrap(), true),
            _ => {
                chats += 1;
                let messages: Vec<Message> = (c["messages"].as_array().unwrap().iter())
                    .map(|m| Message {
                        role: m["role"].as_str().unwrap().into(),
                        content: m["content"].as_str().unwrap().into(),
                    })
                    .collect();
                Ok(m.chat_prompt(&messages).unwrap())
            }
        };
        assert_eq!(got.unwrap(), want, "{}", c["prompt"]);
    }
    assert!(chats >= 10, "{chats}");
}

#[test]
fn streamed_text_joins_to_the_whole_text_and_splits_no_character() {
    let m = model();
    let mut split = 0;
    for c in cases().iter().filter(|c| c.get("stop").is_none()) {
        let tokens = ids(&c["tokens"]);
        assert_eq!(m.decode(&tokens), c["text"].as_str().unwrap());
        let mut s = TextStream::default();
        let mut deltas: Vec<String> = tokens.iter().map(|&t| s.push(&m, t)).collect();
        // A token that ends mid-character gives nothing until the character is whole.
        split += deltas.iter().filter(|d| d.is_empty()).count();
        for d in &deltas {
            assert!(!d.ends_with(REPLACEMENT_FOR_TEST), "{d:?} in {c}");
        }
        deltas.push(s.finish(&m));
        assert_eq!(deltas.concat(), c["text"].as_str().unwrap(), "{deltas:?}");
    }
    // The recorded answers do split characters across tokens: the test exercises the hold.
    assert!(split > 0);
}

const REPLACEMENT_FOR_TEST: char = '\u{FFFD}';

#[test]
fn stop_strings_cut_the_streamed_text_where_python_cut_the_whole() {
    let m = model();
    let mut n = 0;
    for c in cases().iter().filter(|c| c.get("stop").is_some()) {
        let stops: Vec<String> = (c["stop"].as_array().unwrap().iter())
            .map(|s| s.as_str().unwrap().to_string())
            .collect();
        let (mut s, mut stop) = (TextStream::default(), StopText::new(stops));
        let mut out = String::new();
        let mut stopped = false;
        for &t in &ids(&c["tokens"]) {
            let (given, hit) = stop.push(&s.push(&m, t));
            out += &given;
            if hit {
                stopped = true;
                break;
            }
        }
        assert!(stopped, "{c}");
        assert_eq!(out, c["text"].as_str().unwrap(), "{c}");
        n += 1;
    }
    assert!(n >= 10, "{n}");
}

#[test]
fn stop_text_holds_only_what_may_begin_a_match() {
    // (stops, deltas, given after each delta, matched at the end)
    type Case<'a> = (&'a [&'a str], &'a [&'a str], &'a [&'a str], bool);
    let table: [Case; 5] = [
        (&["ab"], &["xa", "by"], &["x", ""], true),
        (&["ab"], &["xa", "cy"], &["x", "ac"], false),
        (&["é!", "zz"], &["aé", "!b"], &["a", ""], true),
        (&["stop"], &["s", "t", "o", "x"], &["", "", "", "s"], false),
        (&[], &["abc"], &["abc"], false),
    ];
    for (stops, deltas, given, matched) in table {
        let mut s = StopText::new(stops.iter().map(|s| s.to_string()).collect());
        let mut hit = false;
        for (d, want) in deltas.iter().zip(given) {
            let (out, h) = s.push(d);
            assert_eq!(out, *want, "{stops:?} {deltas:?}");
            hit |= h;
        }
        assert_eq!(hit, matched, "{stops:?} {deltas:?}");
    }
}

#[test]
fn a_folder_without_a_tokenizer_has_no_text_and_a_small_vocabulary_is_refused() {
    let ids_only = folder().join("../generate");
    assert!(TextModel::load(&ids_only, 64).unwrap().is_none());
    let err = TextModel::load(&folder(), 100).err().unwrap().to_string();
    assert!(
        err.contains("384 tokens") && err.contains("tokenizer.json"),
        "{err}"
    );
}
