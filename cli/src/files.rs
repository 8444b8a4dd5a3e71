//! A served model's files, read whole and only as regular files, opened without blocking: the
//! one reader of the model repository, shared by the batched models and the generation models.

use std::path::Path;

use pjrt_actors::Result;

use crate::common::usage;

/// A file of the model's, read whole: only a regular file (a FIFO would hang the start for
/// ever, a device would never end). It is opened without blocking and asked what it is, so
/// that no check can be raced by swapping the file.
pub fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |e: std::io::Error| usage(format!("{what} {}: {e}", path.display()));
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(fail)?;
    let kind = file.metadata().map_err(fail)?.file_type();
    if !kind.is_file() {
        return Err(usage(format!(
            "{what} {} is not a regular file (a {}); a model's files are read whole",
            path.display(),
            file_kind(kind)
        )));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(fail)?;
    Ok(bytes)
}

fn file_kind(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    match () {
        _ if kind.is_dir() => "directory",
        _ if kind.is_fifo() => "FIFO",
        _ if kind.is_socket() => "socket",
        _ if kind.is_char_device() => "character device",
        _ if kind.is_block_device() => "block device",
        _ => "file of another kind",
    }
}
