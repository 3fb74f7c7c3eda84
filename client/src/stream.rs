//! The streaming RPCs' message sequences, checked and turned into Rust
//! streams: ReadBytes (header, then data), Grep (matches, then a summary),
//! and the WriteBytes request body (header, then data, aborted rather than
//! ended when its source fails).
//!
//! The response adapters take any stream of `Result<message, Status>` (a
//! `tonic::Streaming` in use, a plain iterator in tests).

use bytes::Bytes;
use futures::future;
use futures::stream::{self, BoxStream, Stream, StreamExt};
use std::sync::{Arc, Mutex, OnceLock};
use tonic::{CancellationHandle, Status};
use wsfs::proto::{self, read_bytes_response::Payload as ReadPayload};
use wsfs::wire::filesystem::{byte_stream, UploadPart};
use wsfs::wire::server_count;
use wsfs::{
    ByteChunks, ByteStream, Error, GrepEvent, PatchChunk, PatchChunks, Result, MAX_CHUNK_SIZE,
};

/// Awaits the ReadBytes header; the returned [`ByteStream`] yields the data
/// that follows and checks it adds up to the length the header announced.
pub(crate) async fn read_bytes<S>(responses: S) -> Result<ByteStream>
where
    S: Stream<Item = std::result::Result<proto::ReadBytesResponse, Status>> + Send + 'static,
{
    let mut responses = responses.boxed();
    let header = match responses.next().await {
        Some(Ok(proto::ReadBytesResponse {
            payload: Some(ReadPayload::Header(header)),
        })) => header,
        Some(Ok(_)) => {
            return Err(Error::internal(
                "the ReadBytes stream began with data instead of its header",
            ))
        }
        Some(Err(status)) => return Err(Error::from_status(&status)),
        None => {
            return Err(Error::internal(
                "the ReadBytes stream ended before its header",
            ))
        }
    };
    let expected = server_count("length", header.length)?;
    byte_stream(header, data_chunks(responses, expected))
}

fn data_chunks(
    responses: BoxStream<'static, std::result::Result<proto::ReadBytesResponse, Status>>,
    expected: u64,
) -> ByteChunks {
    // The state is `None` once the stream has failed, so it ends after the error.
    stream::unfold(Some((responses, 0u64)), move |state| async move {
        let (mut responses, received) = state?;
        let item = match responses.next().await {
            Some(Ok(proto::ReadBytesResponse {
                payload: Some(ReadPayload::Data(data)),
            })) => {
                let received = received + data.len() as u64;
                if received > expected {
                    Err(Error::internal(format!(
                        "the ReadBytes stream carried more than the {expected} bytes its header announced"
                    )))
                } else {
                    return Some((Ok(data), Some((responses, received))));
                }
            }
            Some(Ok(_)) => Err(Error::internal(
                "the ReadBytes stream sent a message other than data after its header",
            )),
            Some(Err(status)) => Err(Error::from_status(&status)),
            None if received == expected => return None,
            None => Err(Error::internal(format!(
                "the ReadBytes stream ended after {received} of the {expected} bytes its header announced"
            ))),
        };
        Some((item, None))
    })
    .boxed()
}

/// Matches, then the summary, after which the stream ends (and the call is
/// dropped). A stream that ends before its summary yields an error: the
/// results would otherwise look complete when they are not.
pub(crate) fn grep_events<S>(responses: S) -> BoxStream<'static, Result<GrepEvent>>
where
    S: Stream<Item = std::result::Result<proto::GrepResponse, Status>> + Send + 'static,
{
    stream::unfold(Some(responses.boxed()), |state| async move {
        let mut responses = state?;
        let item = match responses.next().await {
            Some(Ok(message)) => match GrepEvent::try_from(message) {
                Ok(GrepEvent::Match(m)) => return Some((Ok(GrepEvent::Match(m)), Some(responses))),
                other => other,
            },
            Some(Err(status)) => Err(Error::from_status(&status)),
            None => Err(Error::internal("the Grep stream ended without its summary")),
        };
        Some((item, None))
    })
    .boxed()
}

/// What an upload's request body and its caller share: the call's
/// cancellation handle and the error that made the body give up.
#[derive(Debug, Default)]
pub(crate) struct UploadAbort {
    handle: OnceLock<CancellationHandle>,
    error: Mutex<Option<Error>>,
}

impl UploadAbort {
    /// Must be called before the request is sent.
    pub(crate) fn arm(&self, handle: CancellationHandle) {
        // A second arm would be a bug in this crate; the first handle stays.
        let _ = self.handle.set(handle);
    }

    /// The source failed: keep its error and reset the HTTP/2 stream, so the
    /// server sees a broken upload rather than a complete, shorter file.
    pub(crate) fn fail(&self, error: Error) {
        self.error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get_or_insert(error);
        if let Some(handle) = self.handle.get() {
            handle.clone().cancel();
        }
    }

    /// The source's error, if the upload was aborted because of one.
    pub(crate) fn take_error(&self) -> Option<Error> {
        self.error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }
}

/// The WriteBytes request body: `header`, then `data` in messages of at most
/// [`MAX_CHUNK_SIZE`] bytes. When `data` fails, the body records the error
/// in `abort`, cancels the call, and then never ends: ending it would send
/// END_STREAM, which the server must treat as a finished upload.
pub(crate) fn upload_body(
    header: proto::WriteBytesRequest,
    data: ByteChunks,
    abort: Arc<UploadAbort>,
) -> impl Stream<Item = proto::WriteBytesRequest> + Send + 'static {
    upload_messages(header, data, abort, |chunk| {
        split(chunk, MAX_CHUNK_SIZE)
            .map(|data| UploadPart::Data(data).into())
            .collect()
    })
}

/// [`upload_body`] of a PATCH: each chunk's data follows an offset message
/// when it does not start where the one before it ended (the position
/// starts at 0).
pub(crate) fn patch_body(
    header: proto::WriteBytesRequest,
    data: PatchChunks,
    abort: Arc<UploadAbort>,
) -> impl Stream<Item = proto::WriteBytesRequest> + Send + 'static {
    let mut position = 0u64;
    upload_messages(header, data, abort, move |chunk: PatchChunk| {
        let mut messages = Vec::new();
        if chunk.data.is_empty() {
            return messages;
        }
        if chunk.offset != position {
            messages.push(UploadPart::Offset(chunk.offset).into());
        }
        position = chunk.offset.saturating_add(chunk.data.len() as u64);
        messages
            .extend(split(chunk.data, MAX_CHUNK_SIZE).map(|data| UploadPart::Data(data).into()));
        messages
    })
}

/// `header`, then the messages `encode` makes of each item, aborting the
/// call (see [`upload_body`]) when an item is an error.
fn upload_messages<T: Send + 'static>(
    header: proto::WriteBytesRequest,
    items: BoxStream<'static, Result<T>>,
    abort: Arc<UploadAbort>,
    encode: impl FnMut(T) -> Vec<proto::WriteBytesRequest> + Send + 'static,
) -> impl Stream<Item = proto::WriteBytesRequest> + Send + 'static {
    let items = stream::unfold(items, move |mut items| {
        let abort = abort.clone();
        async move {
            match items.next().await {
                Some(Ok(item)) => Some((item, items)),
                Some(Err(error)) => {
                    abort.fail(error);
                    future::pending().await
                }
                None => None,
            }
        }
    });
    stream::once(future::ready(header)).chain(items.map(encode).flat_map(stream::iter))
}

/// Cuts a chunk into pieces of at most `max` bytes, without copying.
fn split(mut chunk: Bytes, max: usize) -> impl Iterator<Item = Bytes> {
    std::iter::from_fn(move || (!chunk.is_empty()).then(|| chunk.split_to(chunk.len().min(max))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use tonic::Code;
    use wsfs::proto::grep_response::Payload as GrepPayload;
    use wsfs::proto::write_bytes_request::Payload as WritePayload;
    use wsfs::GrepSummary;

    type Item<T> = std::result::Result<T, Status>;

    fn header(length: i64) -> Item<proto::ReadBytesResponse> {
        Ok(proto::ReadBytesResponse {
            payload: Some(ReadPayload::Header(proto::ReadBytesHeader {
                path: "f.bin".into(),
                size_bytes: 10,
                version: 4,
                offset: 10 - length,
                length,
            })),
        })
    }

    fn data(bytes: &'static [u8]) -> Item<proto::ReadBytesResponse> {
        Ok(proto::ReadBytesResponse {
            payload: Some(ReadPayload::Data(Bytes::from_static(bytes))),
        })
    }

    async fn collect_chunks(s: ByteStream) -> Vec<Result<Bytes>> {
        s.chunks.collect().await
    }

    #[tokio::test]
    async fn read_bytes_yields_header_fields_then_data() {
        let s = read_bytes(stream::iter(vec![header(5), data(b"ab"), data(b"cde")]))
            .await
            .unwrap();
        assert_eq!((s.size, s.version, s.offset, s.length), (10, 4, 5, 5));
        assert_eq!(s.path.as_str(), "f.bin");
        let chunks: Vec<Bytes> = collect_chunks(s)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(chunks, vec![Bytes::from("ab"), Bytes::from("cde")]);
    }

    #[tokio::test]
    async fn read_bytes_without_header_is_internal() {
        let err = read_bytes(stream::iter(Vec::new())).await.unwrap_err();
        assert_eq!(err.code(), Code::Internal);
        assert!(err.to_string().contains("header"), "{err}");
        let err = read_bytes(stream::iter(vec![data(b"x")]))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Internal);
    }

    #[tokio::test]
    async fn read_bytes_status_before_header_is_the_contract_error() {
        let status = Error::FileNotFound { path: "f".into() }.to_status();
        let err = read_bytes(stream::iter(vec![Err(status)]))
            .await
            .unwrap_err();
        assert_eq!(err, Error::FileNotFound { path: "f".into() });
    }

    #[tokio::test]
    async fn read_bytes_short_stream_ends_with_an_error() {
        let s = read_bytes(stream::iter(vec![header(5), data(b"ab")]))
            .await
            .unwrap();
        let chunks = collect_chunks(s).await;
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[1].as_ref().unwrap_err().code(), Code::Internal);
    }

    #[tokio::test]
    async fn read_bytes_second_header_ends_with_an_error() {
        let s = read_bytes(stream::iter(vec![header(2), header(2), data(b"ab")]))
            .await
            .unwrap();
        let chunks = collect_chunks(s).await;
        assert_eq!(chunks.len(), 1, "the stream stops at the error");
        assert!(chunks[0].is_err());
    }

    fn grep_match(line_number: u64) -> Item<proto::GrepResponse> {
        Ok(proto::GrepResponse {
            payload: Some(GrepPayload::Match(proto::GrepMatch {
                path: "a.rs".into(),
                line_number,
                line: "x".into(),
                match_start: 0,
                match_end: 1,
                before: vec![],
                after: vec![],
            })),
        })
    }

    fn grep_summary() -> Item<proto::GrepResponse> {
        Ok(proto::GrepResponse {
            payload: Some(GrepPayload::Summary(proto::GrepSummary {
                files_searched: 1,
                matches: 2,
                truncated: false,
            })),
        })
    }

    #[tokio::test]
    async fn grep_stream_ends_at_its_summary() {
        let events: Vec<_> = grep_events(stream::iter(vec![
            grep_match(1),
            grep_match(2),
            grep_summary(),
            grep_match(3),
        ]))
        .collect()
        .await;
        assert_eq!(events.len(), 3);
        assert_eq!(
            events[2].as_ref().unwrap(),
            &GrepEvent::Summary(GrepSummary {
                files_searched: 1,
                matches: 2,
                truncated: false
            })
        );
    }

    #[tokio::test]
    async fn grep_stream_without_summary_ends_with_an_error() {
        let events: Vec<_> = grep_events(stream::iter(vec![grep_match(1)]))
            .collect()
            .await;
        assert_eq!(events.len(), 2);
        let err = events[1].as_ref().unwrap_err();
        assert_eq!(err.code(), Code::Internal);
        assert!(err.to_string().contains("summary"), "{err}");
    }

    fn header_message() -> proto::WriteBytesRequest {
        let header = wsfs::wire::filesystem::Upload::Write {
            session_id: "s".into(),
            path: wsfs::CanonicalPath::parse("f", &wsfs::PathLimits::UNLIMITED).unwrap(),
            options: wsfs::WriteOptions::default(),
        };
        wsfs::wire::Request::message(header).unwrap().into()
    }

    fn payload_len(m: &proto::WriteBytesRequest) -> usize {
        match &m.payload {
            Some(WritePayload::Data(d)) => d.len(),
            other => panic!("not data: {other:?}"),
        }
    }

    #[tokio::test]
    async fn upload_body_sends_header_then_bounded_chunks() {
        let big = Bytes::from(vec![7u8; MAX_CHUNK_SIZE * 2 + 1]);
        let data = stream::iter(vec![Ok(Bytes::new()), Ok(big), Ok(Bytes::from("z"))]).boxed();
        let abort = Arc::new(UploadAbort::default());
        let messages: Vec<_> = upload_body(header_message(), data, abort.clone())
            .collect()
            .await;
        assert!(matches!(messages[0].payload, Some(WritePayload::Header(_))));
        let sizes: Vec<usize> = messages[1..].iter().map(payload_len).collect();
        assert_eq!(sizes, vec![MAX_CHUNK_SIZE, MAX_CHUNK_SIZE, 1, 1]);
        assert!(abort.take_error().is_none());
    }

    #[tokio::test]
    async fn patch_body_sends_an_offset_only_where_a_chunk_does_not_follow_on() {
        let chunk = |offset, data: &'static [u8]| {
            Ok(PatchChunk {
                offset,
                data: Bytes::from_static(data),
            })
        };
        let data = stream::iter(vec![
            chunk(0, b"ab"),
            chunk(2, b"cd"),
            chunk(9, b""),
            chunk(10, b"x"),
            chunk(0, b"y"),
        ])
        .boxed();
        let abort = Arc::new(UploadAbort::default());
        let messages: Vec<_> = patch_body(header_message(), data, abort)
            .skip(1)
            .map(|m| m.payload)
            .collect()
            .await;
        let data = |d: &'static [u8]| Some(WritePayload::Data(Bytes::from_static(d)));
        assert_eq!(
            messages,
            vec![
                data(b"ab"),
                data(b"cd"),
                Some(WritePayload::Offset(10)),
                data(b"x"),
                Some(WritePayload::Offset(0)),
                data(b"y"),
            ]
        );
    }

    #[tokio::test]
    async fn failed_source_records_its_error_and_never_ends_the_body() {
        let data = stream::iter(vec![
            Ok(Bytes::from("a")),
            Err(Error::internal("disk on fire")),
            Ok(Bytes::from("b")),
        ])
        .boxed();
        let abort = Arc::new(UploadAbort::default());
        let mut body = Box::pin(upload_body(header_message(), data, abort.clone()));
        assert!(body.next().await.is_some(), "header");
        assert!(body.next().await.is_some(), "first chunk");
        assert!(
            body.next().now_or_never().is_none(),
            "after a failure the body must stay open so the call can be reset"
        );
        assert_eq!(abort.take_error(), Some(Error::internal("disk on fire")));
    }
}
