//! A request's body as the server reads it: within `--max-body-bytes`, held against the
//! in-flight memory budget as its bytes arrive (never the whole bound up front), and, sent with
//! `Content-Encoding: gzip` or `deflate`, decompressed within the same bound.

use std::io::Read;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, header};
use tokio::sync::OwnedSemaphorePermit;

use super::error::ServeError;
use super::kserve::ServerState;
use super::limits::{OFF_THREAD_BYTES, off_thread};

/// What a body with no `Content-Length` reserves first; it grows (doubling, up to the bound)
/// as more arrives. Sixteen clients trickling a byte a second then hold 1 MiB, not 1 GiB.
const FIRST_RESERVATION: usize = 64 << 10;

/// A request's body within the bound, held against the in-flight memory budget (the permit
/// comes back with it; dropping it gives the room back), decompressed where the client sent it
/// compressed. A declared `Content-Length` past the bound is refused before any of the body is
/// read, so before hyper says `100 Continue`.
pub async fn read_held_body(
    app: &ServerState,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Bytes, OwnedSemaphorePermit), ServeError> {
    let limit = app.limits.body_bytes;
    let encoding = content_encoding(headers)?;
    let declared = declared_length(headers)?;
    if declared.is_some_and(|n| n > limit) {
        return Err(past_body_limit(limit));
    }
    let (bytes, held) = match declared {
        Some(n) => {
            let held = app.memory.reserve(n, "the request body").await?;
            (read_whole(body, limit).await?, held)
        }
        None => read_growing(app, body, limit).await?,
    };
    let Some(encoding) = encoding else {
        return Ok((bytes, held));
    };
    // Decompressed within the bound (on a blocking thread when large), then held in place of
    // the compressed bytes, which go.
    let big = bytes.len() >= OFF_THREAD_BYTES;
    let plain = off_thread(big, move || decompress(encoding, &bytes, limit)).await??;
    let room = (app.memory)
        .reserve(plain.len(), "the decompressed request body")
        .await?;
    drop(held);
    Ok((plain, room))
}

/// The body's encoding: none (`identity`), gzip or deflate; any other is 415.
fn content_encoding(headers: &HeaderMap) -> Result<Option<Encoding>, ServeError> {
    let Some(value) = headers.get(header::CONTENT_ENCODING) else {
        return Ok(None);
    };
    match value
        .to_str()
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        Ok("" | "identity") => Ok(None),
        Ok("gzip" | "x-gzip") => Ok(Some(Encoding::Gzip)),
        Ok("deflate") => Ok(Some(Encoding::Deflate)),
        _ => Err(ServeError::Unsupported(format!(
            "Content-Encoding `{}` is not taken; send gzip, deflate or none",
            super::wire::shown(&String::from_utf8_lossy(value.as_bytes()))
        ))),
    }
}

#[derive(Clone, Copy, Debug)]
enum Encoding {
    Gzip,
    /// HTTP's deflate: zlib-wrapped, as tritonclient and curl send it.
    Deflate,
}

/// `bytes` decompressed, refused past `limit` bytes once decompressed (a compression bomb is
/// 413 after `limit` bytes of work, never more) or when they are not of the encoding.
fn decompress(encoding: Encoding, bytes: &[u8], limit: usize) -> Result<Bytes, ServeError> {
    let mut out = Vec::new();
    let reader: Box<dyn Read + '_> = match encoding {
        Encoding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(bytes)),
        Encoding::Deflate => Box::new(flate2::read::ZlibDecoder::new(bytes)),
    };
    let read = reader.take(limit as u64 + 1).read_to_end(&mut out);
    match read {
        Ok(n) if n > limit => Err(ServeError::TooLarge(format!(
            "the request body decompresses past the server's {limit} bytes (--max-body-bytes)"
        ))),
        Ok(_) => Ok(Bytes::from(out)),
        Err(e) => Err(ServeError::Invalid(format!(
            "the request body is not {encoding:?} data as its Content-Encoding says: {e}"
        ))),
    }
}

/// A `Content-Length` the client declared, if any.
fn declared_length(headers: &HeaderMap) -> Result<Option<usize>, ServeError> {
    match headers.get(header::CONTENT_LENGTH) {
        None => Ok(None),
        Some(v) => (v.to_str().ok().and_then(|s| s.trim().parse().ok()))
            .map(Some)
            .ok_or_else(|| ServeError::Invalid("Content-Length is not a length".into())),
    }
}

/// A body of declared length (reserved already), read whole within `limit`.
async fn read_whole(body: Body, limit: usize) -> Result<Bytes, ServeError> {
    use http_body_util::BodyExt;
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(past_body_limit(limit))
        }
        Err(e) => Err(unreadable(e)),
    }
}

/// A body of unknown length (chunked), its reservation grown as its bytes arrive.
async fn read_growing(
    app: &ServerState,
    mut body: Body,
    limit: usize,
) -> Result<(Bytes, OwnedSemaphorePermit), ServeError> {
    use http_body_util::BodyExt;
    let mut reserved = FIRST_RESERVATION.min(limit);
    let mut held = app.memory.reserve(reserved, "the request body").await?;
    let mut bytes = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(unreadable)?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let needed = bytes.len() + data.len();
        if needed > limit {
            return Err(past_body_limit(limit));
        }
        if needed > reserved {
            let grown = (reserved * 2).max(needed).min(limit);
            let more = (app.memory)
                .reserve(grown - reserved, "the request body")
                .await?;
            held.merge(more);
            reserved = grown;
        }
        bytes.extend_from_slice(&data);
    }
    Ok((bytes.freeze(), held))
}

fn unreadable(e: impl std::fmt::Display) -> ServeError {
    ServeError::Invalid(format!("the request body could not be read: {e}"))
}

fn past_body_limit(limit: usize) -> ServeError {
    ServeError::TooLarge(format!(
        "the request body is larger than the server's {limit} bytes (--max-body-bytes)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn bodies_decompress_within_the_bound_and_a_bomb_is_413() {
        let text = br#"{"inputs": []}"#.repeat(100);
        for (encoding, packed) in [
            (Encoding::Gzip, gzip(&text)),
            (Encoding::Deflate, zlib(&text)),
        ] {
            let plain = decompress(encoding, &packed, 1 << 20).unwrap();
            assert_eq!(&plain[..], &text[..]);
            // One byte past the bound, after decompression: 413.
            let err = decompress(encoding, &packed, text.len() - 1).unwrap_err();
            assert_eq!(err.http_status(), 413, "{err:?}");
            // Not of the encoding it claims: 400.
            let err = decompress(encoding, &text, 1 << 20).unwrap_err();
            assert_eq!(err.http_status(), 400, "{err:?}");
        }
        // 64 MiB of zeros packs into about 64 KiB; against a 1 MiB bound it is refused.
        let bomb = gzip(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 1 << 20);
        assert_eq!(
            decompress(Encoding::Gzip, &bomb, 1 << 20)
                .unwrap_err()
                .http_status(),
            413
        );
    }

    #[test]
    fn encodings_other_than_gzip_and_deflate_are_415() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_ENCODING, v.parse().unwrap());
            content_encoding(&h)
        };
        assert!(matches!(with("gzip"), Ok(Some(Encoding::Gzip))));
        assert!(matches!(with("Deflate"), Ok(Some(Encoding::Deflate))));
        assert!(matches!(with("identity"), Ok(None)));
        assert_eq!(with("br").unwrap_err().http_status(), 415);
        assert_eq!(with("gzip, br").unwrap_err().http_status(), 415);
    }
}
