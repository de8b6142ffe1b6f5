//! One small HTTP/1.1 endpoint: hyper's server on a one-thread tokio
//! runtime of its own, a task per connection, kept alive as long as the
//! client keeps it. Every request's whole body (at most a given size) goes
//! to one handler, with the instant its head arrived; the handler's answer
//! is sent with an empty body. The collector listens through it, and so do
//! the test suite's queues.
//!
//! A task per connection: a connection is read as soon as it is accepted,
//! however many others are held open. (A pool of connection threads, such
//! as tiny_http 0.12's, can accept a connection and leave it unread until
//! another connection closes.)

use std::convert::Infallible;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{Result, anyhow};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response};
use tokio::sync::oneshot;

/// One request, read whole.
pub struct Asked {
    /// When its head had arrived (before its body was read).
    pub at: Instant,
    pub method: hyper::Method,
    pub path: String,
    pub body: Bytes,
}

/// What to answer: a status and headers, with an empty body.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
}

impl Answer {
    pub fn status(status: u16) -> Answer {
        Answer {
            status,
            headers: Vec::new(),
        }
    }
}

type Handler = dyn Fn(Asked) -> Answer + Send + Sync;

/// An endpoint listening until dropped.
pub struct Listening {
    /// The address it listens on.
    pub addr: std::net::SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// Listen on `listen` (`host:port`), answering each request with what
/// `handle` says; a body over `max_body` bytes is answered 413 and not
/// handed on.
pub fn serve(
    listen: &str,
    max_body: usize,
    handle: impl Fn(Asked) -> Answer + Send + Sync + 'static,
) -> Result<Listening> {
    let socket = std::net::TcpListener::bind(listen)
        .map_err(|e| anyhow!("cannot listen on {listen}: {e}"))?;
    socket.set_nonblocking(true)?;
    let addr = socket.local_addr()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let (stop, stopped) = oneshot::channel();
    let handle: Arc<Handler> = Arc::new(handle);
    let thread = std::thread::Builder::new()
        .name("noisylab-listen".into())
        .spawn(move || runtime.block_on(accept(socket, stopped, handle, max_body)))?;
    Ok(Listening {
        addr,
        stop: Some(stop),
        thread: Some(thread),
    })
}

/// Accept connections until told to stop; the runtime's end drops every
/// connection still open.
async fn accept(
    socket: std::net::TcpListener,
    mut stopped: oneshot::Receiver<()>,
    handle: Arc<Handler>,
    max_body: usize,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(socket) else {
        return;
    };
    loop {
        let stream = tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        let _ = stream.set_nodelay(true);
        let handle = handle.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                answer(request, handle.clone(), max_body)
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

/// Read one request whole and answer it.
async fn answer(
    request: Request<Incoming>,
    handle: Arc<Handler>,
    max_body: usize,
) -> Result<Response<Empty<Bytes>>, Infallible> {
    let at = Instant::now();
    let (parts, body) = request.into_parts();
    let answer = match Limited::new(body, max_body).collect().await {
        Ok(body) => handle(Asked {
            at,
            method: parts.method,
            path: parts.uri.path().to_string(),
            body: body.to_bytes(),
        }),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Answer::status(413),
        Err(_) => Answer::status(400),
    };
    let mut response = Response::builder().status(answer.status);
    for (name, value) in answer.headers {
        response = response.header(name, value);
    }
    Ok(response.body(Empty::new()).unwrap_or_else(|_| {
        let mut failed = Response::new(Empty::new());
        *failed.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
        failed
    }))
}

impl Drop for Listening {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
