//! ReadBytes' streams: one consistent version of a file, in chunks, read
//! ahead a bounded amount.

use crate::backend::Content;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use wsfs::{CanonicalPath, Error, Result};

/// How far a ReadBytes producer may read ahead of the stream on disk
/// (in whole chunks, at least one). With one chunk queued the reading
/// thread slept and woke for every 64 KiB; four measured a fifth faster.
const READ_AHEAD_BYTES: usize = 256 * 1024;

pub(crate) fn byte_chunks(
    content: Content,
    path: CanonicalPath,
    offset: u64,
    length: u64,
    chunk: usize,
) -> BoxStream<'static, Result<Bytes>> {
    match content {
        Content::Memory(data) => {
            let start = offset as usize;
            let end = start + length as usize;
            futures::stream::iter((start..end).step_by(chunk.max(1)).map(move |at| {
                if at > start {
                    crate::faults::check_stream(path.as_str());
                }
                Ok(data.slice(at..(at + chunk).min(end)))
            }))
            .boxed()
        }
        Content::Disk(file) => {
            // One producer per stream, at most READ_AHEAD_BYTES (or one
            // chunk) queued: memory stays bounded, and a dropped receiver
            // stops the reads.
            let queued = (READ_AHEAD_BYTES / chunk.max(1)).max(1);
            let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes>>(queued);
            crate::producer::spawn_blocking("ReadBytes", tx, move |tx| {
                let mut at = offset;
                let end = offset + length;
                while at < end {
                    if at > offset {
                        crate::faults::check_stream(path.as_str());
                    }
                    let want = ((end - at) as usize).min(chunk);
                    // Read into the new buffer's spare room: not zeroed
                    // first, a chunk's bytes are written once.
                    let mut buf = Vec::with_capacity(want);
                    let read =
                        rustix::io::pread(&file, rustix::buffer::spare_capacity(&mut buf), at);
                    let msg = match read {
                        Ok(0) => Err(Error::internal(format!(
                            "'{path}' was truncated by another process while being read"
                        ))),
                        Ok(n) => {
                            at += n as u64;
                            Ok(Bytes::from(buf))
                        }
                        Err(rustix::io::Errno::INTR) => continue,
                        Err(e) => Err(Error::from_io(e.into(), &path)),
                    };
                    let failed = msg.is_err();
                    if tx.blocking_send(msg).is_err() || failed {
                        return;
                    }
                }
            });
            tokio_stream::wrappers::ReceiverStream::new(rx).boxed()
        }
    }
}
