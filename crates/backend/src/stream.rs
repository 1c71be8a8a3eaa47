//! The source of a streamed write ([`Backend::write_stream`](crate::Backend::write_stream)) and
//! the one way every backend reads it: in bounded chunks, to exactly its announced length.

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::{BackendError, Result};
use crate::path::VirtualPath;

/// The bytes of a streamed write: any reader (a file, a socket, a decoder), boxed so that
/// [`Backend`](crate::Backend) stays object-safe. A stream of byte chunks becomes one with
/// `tokio_util::io::StreamReader`.
pub type WriteSource = Box<dyn AsyncRead + Send + Unpin>;

/// How many bytes a streamed write reads from its source at a time (and so the most of it that a
/// streaming backend holds in memory, besides what its store buffers).
pub const WRITE_CHUNK: usize = 64 * 1024;

/// A source read to exactly `len` bytes, chunk by chunk: [`Exact::next`] gives each chunk, then
/// `None` once `len` bytes were read and the source has ended. A source that ends early, or holds
/// a byte more, fails with [`BackendError::LengthMismatch`]; one that fails to read fails with
/// [`BackendError::Other`] (the failure is the source's, not the store's).
pub(crate) struct Exact<'a> {
    path: &'a VirtualPath,
    source: WriteSource,
    len: u64,
    left: u64,
    buf: Vec<u8>,
}

impl<'a> Exact<'a> {
    /// Read `source`, announced as `len` bytes, for a write of `path`.
    pub(crate) fn new(path: &'a VirtualPath, source: WriteSource, len: u64) -> Self {
        let chunk = usize::try_from(len).map_or(WRITE_CHUNK, |len| len.clamp(1, WRITE_CHUNK));
        Self {
            path,
            source,
            len,
            left: len,
            buf: vec![0; chunk],
        }
    }

    /// The next chunk (never empty), or `None` when the source ended at exactly its length.
    pub(crate) async fn next(&mut self) -> Result<Option<&[u8]>> {
        if self.left == 0 {
            // One byte more would be a longer source than announced.
            let n = self.read(1).await?;
            if n > 0 {
                return Err(self.mismatch(None));
            }
            return Ok(None);
        }
        let want = usize::try_from(self.left).map_or(self.buf.len(), |left| left.min(self.buf.len()));
        let n = self.read(want).await?;
        if n == 0 {
            return Err(self.mismatch(Some(self.len - self.left)));
        }
        self.left -= n as u64;
        Ok(Some(&self.buf[..n]))
    }

    async fn read(&mut self, want: usize) -> Result<usize> {
        loop {
            match self.source.read(&mut self.buf[..want]).await {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(BackendError::other(self.path, e)),
            }
        }
    }

    fn mismatch(&self, found: Option<u64>) -> BackendError {
        BackendError::LengthMismatch {
            path: self.path.to_string(),
            expected: self.len,
            found,
        }
    }
}

/// The whole of `source`, announced as `len` bytes, in memory: what a backend that cannot stream
/// writes (see [`Backend::write_stream`](crate::Backend::write_stream)'s default). Errors:
/// [`BackendError::LengthMismatch`] when the source holds fewer or more bytes than `len`,
/// [`BackendError::Other`] when it fails to read, [`BackendError::TooLarge`] when `len` does not
/// fit in the address space.
pub async fn read_source(path: &VirtualPath, source: WriteSource, len: u64) -> Result<Bytes> {
    let capacity = usize::try_from(len).map_err(|_| BackendError::TooLarge {
        path: path.to_string(),
        size: len,
        limit: usize::MAX as u64,
    })?;
    // The announced length is the caller's word, not a promise: grow past 64 MiB only as bytes come.
    let mut data = Vec::with_capacity(capacity.min(64 << 20));
    let mut exact = Exact::new(path, source, len);
    while let Some(chunk) = exact.next().await? {
        data.extend_from_slice(chunk);
    }
    Ok(Bytes::from(data))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn source(bytes: &'static [u8]) -> WriteSource {
        Box::new(bytes)
    }

    #[tokio::test]
    async fn exact_length_reads_whole_and_others_fail_typed() {
        let path = VirtualPath::parse("/f").unwrap();
        assert_eq!(&read_source(&path, source(b"abc"), 3).await.unwrap()[..], b"abc");
        assert_eq!(&read_source(&path, source(b""), 0).await.unwrap()[..], b"");
        let short = read_source(&path, source(b"ab"), 3).await.unwrap_err();
        assert!(
            matches!(
                short,
                BackendError::LengthMismatch {
                    expected: 3,
                    found: Some(2),
                    ..
                }
            ),
            "{short:?}"
        );
        let long = read_source(&path, source(b"abcd"), 3).await.unwrap_err();
        assert!(
            matches!(
                long,
                BackendError::LengthMismatch {
                    expected: 3,
                    found: None,
                    ..
                }
            ),
            "{long:?}"
        );
    }
}
