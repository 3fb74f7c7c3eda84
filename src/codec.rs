//! The codec every generated client and server of `wsfs.v1` uses: prost's,
//! with a decode buffer sized for the message it decodes.
//!
//! tonic decodes a message into a buffer that starts at 8 KiB. A message
//! that arrives in one HTTP/2 frame (frames here are up to
//! [`crate::HTTP2_MAX_FRAME_BYTES`]) is copied into that buffer, which
//! grows to hold it, and then grows again when tonic reserves the
//! message's whole length on top of what it already holds: every byte of
//! a 1 MiB ReadBytes chunk was copied twice, 27% of the mount's CPU while
//! reading a large file. A ReadBytes answer's buffer starts large enough
//! for a largest chunk and that reserve, so it is copied once. Every other
//! message keeps tonic's default (a small call should not allocate
//! megabytes).

use std::any::TypeId;
use std::marker::PhantomData;
use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// A ReadBytes answer's decode buffer: a largest chunk as it arrives, the
/// same again for tonic's reserve, and room for the message's own fields.
/// A constant, not anything a peer sends; only a client allocates it (a
/// server decodes no ReadBytes answer), once per ReadBytes stream, and
/// only the pages a chunk fills are touched. A message over it still
/// grows the buffer, up to the channel's message limit, as before.
const READ_BYTES_BUFFER_BYTES: usize = 2 * crate::MAX_CHUNK_SIZE + 64 * 1024;
// A largest chunk arriving whole, then reserved again, fits.
const _: () = assert!(READ_BYTES_BUFFER_BYTES >= 2 * crate::MAX_CHUNK_SIZE + 16);

/// The encoder's threshold for yielding while encoding a stream, which
/// `BufferSettings::new` asks for beside the buffer size (tonic's own
/// default; a decoder does not use it).
const YIELD_THRESHOLD_BYTES: usize = 32 * 1024;

/// Prost's codec, with [`decode_buffer`]'s settings for each message type.
#[derive(Debug, Clone, Copy)]
pub struct WsfsCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for WsfsCodec<T, U> {
    fn default() -> Self {
        WsfsCodec(PhantomData)
    }
}

impl<T, U> Codec for WsfsCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::default().encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(decode_buffer::<U>())
    }
}

/// The decode buffer of messages of type `U`: tonic's default, but for
/// ReadBytes answers.
fn decode_buffer<U: 'static>() -> BufferSettings {
    if TypeId::of::<U>() == TypeId::of::<crate::proto::ReadBytesResponse>() {
        BufferSettings::new(READ_BYTES_BUFFER_BYTES, YIELD_THRESHOLD_BYTES)
    } else {
        BufferSettings::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_read_bytes_answers_get_the_large_buffer() {
        let large = format!(
            "{:?}",
            BufferSettings::new(READ_BYTES_BUFFER_BYTES, YIELD_THRESHOLD_BYTES)
        );
        let default = format!("{:?}", BufferSettings::default());
        assert_ne!(large, default);
        let of = |settings: BufferSettings| format!("{settings:?}");
        assert_eq!(
            of(decode_buffer::<crate::proto::ReadBytesResponse>()),
            large
        );
        assert_eq!(of(decode_buffer::<crate::proto::StatResponse>()), default);
        assert_eq!(
            of(decode_buffer::<crate::proto::WriteBytesRequest>()),
            default
        );
    }
}
