//! The last word of the fence: a connection whose socket refuses every byte
//! past the Lease time.
//!
//! The layer above (`layer.rs`) decides before a request is handed to the
//! HTTP client and abandons it when the time runs out, but the bytes are
//! written by the client's connection task, which that layer cannot stop: a
//! request it took in hand just before a stall sits in its buffers (or in
//! TLS's), and after the stall that task can run before anything else and
//! write them. Here every write and flush reads the monotonic clock first,
//! so nothing the process holds leaves after its time, whichever task runs
//! first. The connection then fails, and the client opens a new one for the
//! next request.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Instant;

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};

use super::{BoxError, Fence, Scope};

/// A connector whose connections write only within `scope`'s Lease time.
#[derive(Clone)]
pub struct FencedConnector<C> {
    pub inner: C,
    pub fence: Arc<Fence>,
    pub scope: Scope,
}

impl<C> tower::Service<http::Uri> for FencedConnector<C>
where
    C: tower::Service<http::Uri>,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = FencedIo<C::Response>;
    type Error = BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>,
    >;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let (fence, scope) = (self.fence.clone(), self.scope);
        Box::pin(async move {
            let io = connecting.await.map_err(Into::into)?;
            Ok(FencedIo { io, fence, scope })
        })
    }
}

/// A connection whose writes pass only while `scope`'s Lease time lasts.
pub struct FencedIo<T> {
    io: T,
    fence: Arc<Fence>,
    scope: Scope,
}

impl<T> FencedIo<T> {
    /// The refusal when the time is over, read from the clock now.
    fn refused(&self) -> Option<io::Error> {
        self.fence
            .live_until(self.scope, Instant::now())
            .err()
            .map(|fenced| io::Error::other(fenced.to_string()))
    }
}

impl<T: Write + Unpin> Write for FencedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(refused) = self.refused() {
            return Poll::Ready(Err(refused));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let Some(refused) = self.refused() {
            return Poll::Ready(Err(refused));
        }
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    /// A flush writes what a layer below still holds (TLS records): fenced
    /// like a write.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        if let Some(refused) = self.refused() {
            return Poll::Ready(Err(refused));
        }
        Pin::new(&mut self.io).poll_flush(cx)
    }

    /// A shutdown flushes too (TLS writes what it holds before its
    /// close_notify): past the time, the connection is only dropped.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        if self.refused().is_some() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl<T: Read + Unpin> Read for FencedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: Connection> Connection for FencedIo<T> {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}
