//! The stdio transport: newline-delimited JSON-RPC, read with a bound on each line. The crate's
//! own `Stdio` reads lines of any length; [`lines`] reads at most [`MAX_LINE`] bytes of one and
//! hands an over-long line on as a line that is not JSON, so the peer gets a parse error
//! (-32700) and the connection goes on.

use std::io;

use futures::{Sink, Stream};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

/// The longest line read (16 MiB: an embedded resource of a large file fits).
pub const MAX_LINE: usize = 16 << 20;

/// What an over-long line is replaced with (not JSON, so it is answered with a parse error).
pub const TOO_LONG: &str = "<line too long>";

/// Read one line of at most `max` bytes (without its `\n`); `None` at the end of input. A longer
/// line is read to its end and dropped: the result is [`TOO_LONG`].
pub async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R, max: usize) -> io::Result<Option<String>> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            if line.is_empty() && !too_long {
                return Ok(None);
            }
            break;
        }
        let (take, end) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        if !too_long && line.len() + take <= max {
            line.extend_from_slice(&buf[..take]);
        } else {
            too_long = true;
            line.clear();
        }
        reader.consume(take + usize::from(end));
        if end {
            break;
        }
    }
    if too_long {
        return Ok(Some(TOO_LONG.to_owned()));
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(Some(String::from_utf8_lossy(&line).into_owned()))
}

/// The incoming lines of `reader`, each bounded by `max` bytes; blank lines are skipped.
pub fn lines<R: AsyncBufRead + Unpin + Send + 'static>(
    reader: R,
    max: usize,
) -> impl Stream<Item = io::Result<String>> + Send + 'static {
    futures::stream::unfold(reader, move |mut reader| async move {
        loop {
            match read_line(&mut reader, max).await {
                Ok(Some(line)) if line.trim().is_empty() => continue,
                Ok(Some(line)) => return Some((Ok(line), reader)),
                Ok(None) => return None,
                Err(e) => return Some((Err(e), reader)),
            }
        }
    })
}

/// The outgoing sink: each message as one line, flushed.
pub fn sink<W: AsyncWrite + Unpin + Send + 'static>(
    writer: W,
) -> impl Sink<String, Error = io::Error> + Send + 'static {
    futures::sink::unfold(writer, |mut writer, line: String| async move {
        writer.write_all(line.as_bytes()).await?;
        writer.write_all(b"\n").await?;
        writer.flush().await?;
        Ok::<_, io::Error>(writer)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    #[tokio::test]
    async fn bounds_each_line_and_goes_on_after_a_long_one() {
        let input = format!("{{\"a\":1}}\n{}\n{{\"b\":2}}\r\nlast", "x".repeat(100));
        let mut reader = BufReader::with_capacity(8, input.as_bytes());
        assert_eq!(read_line(&mut reader, 50).await.unwrap().unwrap(), "{\"a\":1}");
        assert_eq!(read_line(&mut reader, 50).await.unwrap().unwrap(), TOO_LONG);
        assert_eq!(read_line(&mut reader, 50).await.unwrap().unwrap(), "{\"b\":2}");
        assert_eq!(read_line(&mut reader, 50).await.unwrap().unwrap(), "last");
        assert_eq!(read_line(&mut reader, 50).await.unwrap(), None);
    }
}
