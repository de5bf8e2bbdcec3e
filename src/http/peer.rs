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

use std::any::Any;
use std::future::pending;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

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
    let Some(&Socket(fd)) = req.conn_data::<Socket>() else {
        return pending().await;
    };
    // SAFETY: the connection owns this socket and closes it only when it ends,
    // after the request whose handler is polling this (the connection drives that
    // handler): the descriptor is open here. `try_clone_to_owned` gives the watch
    // its own duplicate, closed when the watch ends.
    let socket = unsafe { BorrowedFd::borrow_raw(fd) };
    let Ok(copy) = socket.try_clone_to_owned().map(std::net::TcpStream::from) else {
        return pending().await;
    };
    // Shared with the connection's descriptor, which is non-blocking already.
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
