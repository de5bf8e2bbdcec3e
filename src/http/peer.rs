//! Whether a request's client is still there: [`gone`] resolves when the client's
//! end of the connection is closed, so a long poll whose client gave up ends then
//! instead of at its deadline, and frees its place under the per-client limit.
//!
//! actix-web reads the socket only for the next request and keeps running a handler
//! whose client left (actix/actix-web#1313), and `h1_allow_half_closed(false)` would
//! cancel every handler at a client's EOF, writes included (`lib.rs` says why not).
//! So each connection's socket is noted when it opens ([`on_connect`]) and a long
//! poll peeks at a duplicate of it: end of stream, or an error, is a client that
//! left; bytes (a pipelined request) are one that stays, and the watch stops.
//! [`Watch`] takes that duplicate while the request is handled, for an MCP tool
//! call, which runs where the request cannot be borrowed.

use std::any::Any;
use std::future::pending;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;

use actix_web::dev::Extensions;
use actix_web::HttpRequest;

/// The socket of a connection, as [`on_connect`] noted it.
#[derive(Debug, Clone, Copy)]
struct Socket(RawFd);

/// `HttpServer::on_connect`: notes a TCP connection's socket for [`gone`].
pub fn on_connect(connection: &dyn Any, data: &mut Extensions) {
    if let Some(stream) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
        data.insert(Socket(stream.as_raw_fd()));
    }
}

/// Resolves when `req`'s client has closed its end of the connection (or reset it);
/// never, for a connection whose socket was not noted or that sends more bytes.
/// Await it within `req`'s handler (it borrows `req` for that): it looks at the
/// socket only when first polled, so a handler that never waits costs nothing.
pub async fn gone(req: &HttpRequest) {
    match duplicate(req) {
        Some(copy) => watch(copy).await,
        None => pending().await,
    }
}

/// A duplicate of a request's connection socket, taken while the request is
/// handled, for work that runs away from the request's handler: an MCP tool call
/// runs inside the SDK's transport, which keeps the request to itself.
#[derive(Debug, Clone)]
pub struct Watch(Arc<OwnedFd>);

impl Watch {
    /// The watch of `req`'s connection; `None` for a socket that was not noted.
    pub fn of(req: &HttpRequest) -> Option<Watch> {
        duplicate(req).map(|copy| Watch(Arc::new(copy)))
    }

    /// [`gone`] for the connection this watch was taken from.
    pub async fn gone(&self) {
        match self.0.try_clone() {
            Ok(copy) => watch(copy).await,
            Err(_) => pending().await,
        }
    }
}

/// A descriptor of its own for `req`'s connection socket.
fn duplicate(req: &HttpRequest) -> Option<OwnedFd> {
    let &Socket(fd) = req.conn_data::<Socket>()?;
    // SAFETY: the connection owns this socket and closes it only when it ends,
    // after the request being handled here (the connection drives that request):
    // the descriptor is open here. The duplicate is the caller's own, closed when
    // it is dropped, so a watch never reads a descriptor the connection closed.
    let socket = unsafe { BorrowedFd::borrow_raw(fd) };
    socket.try_clone_to_owned().ok()
}

/// Resolves when the peer of the socket `copy` duplicates has closed or reset it;
/// never, once it sends bytes.
async fn watch(copy: OwnedFd) {
    // Shared with the connection's descriptor, which is non-blocking already.
    let copy = std::net::TcpStream::from(copy);
    let stream = copy
        .set_nonblocking(true)
        .and_then(|()| tokio::net::TcpStream::from_std(copy));
    let Ok(stream) = stream else {
        return pending().await;
    };
    let mut byte = [0u8; 1];
    match stream.peek(&mut byte).await {
        Ok(0) | Err(_) => {}
        Ok(_) => pending().await,
    }
}
