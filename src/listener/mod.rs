//! The hardened HTTP listener behind every socket metalform serves (DESIGN.md §6; docs/agent.md
//! "The agent channel", docs/daemon.md "Listeners"): the agent channel of `apply` and of the
//! daemon, and the daemon's admin API all go through [`bind`] and [`Bound::serve`].
//!
//! What a hostile or careless network gets from it:
//! - TLS with rustls by default ([`TlsSetting`]); plain HTTP only when the operator says so.
//! - A connection budget: a global maximum (kept below the process's file-descriptor limit,
//!   which is raised to its hard limit at start) and a maximum per peer address. A connection
//!   over either is closed at once; the server keeps descriptors for its store and files.
//! - Deadlines: the TLS handshake, the request head (from its first byte, or from the
//!   connection's opening for the first request — a silent connection is a slow one), the
//!   whole body, and idle keep-alive time between requests.
//! - A body cap enforced before any route runs: a declared length over it is a typed JSON 413
//!   before authentication; a chunked body is counted as it arrives. Routes read bodies with
//!   [`read_body`] after they checked the caller.
//! - A bounded graceful shutdown: accepting stops, every connection is asked to finish its
//!   request and close (idle ones close at once), and whatever is left after
//!   [`Limits::shutdown_grace`] is dropped.
//!
//! HTTP/1.1 only: agents and operators' tools need nothing more, and every limit above has one
//! meaning per connection.

mod body;
pub mod tls;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tower::ServiceExt;

pub use body::{BodyError, ErrorBody, closing, declared_length, error_response, read_body};
pub use tls::{DevCa, ServerTls, TlsError, TlsSetting};

/// What one listener allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Open connections at once (lowered to fit the file-descriptor limit).
    pub max_connections: usize,
    /// Open connections from one peer address.
    pub max_connections_per_peer: usize,
    /// The largest request body any route takes; a larger declared length is refused (413)
    /// before routing.
    pub max_body_bytes: usize,
    /// The largest request head (request line and headers).
    pub max_header_bytes: usize,
    /// A request head must arrive within this from its first byte (and a new connection's
    /// first request within this from its opening).
    pub header_timeout: Duration,
    /// A request body must arrive within this from its head.
    pub body_timeout: Duration,
    /// A kept-alive connection with no request for this long is closed.
    pub idle_timeout: Duration,
    /// The TLS handshake must finish within this.
    pub handshake_timeout: Duration,
    /// How long a shutdown waits for requests in flight before dropping them.
    pub shutdown_grace: Duration,
}

impl Limits {
    /// The agent channel: thousands of hosts. A busy agent long-polls back to back (never
    /// idle); an idle one heartbeats every 30 s on a fresh connection (a resumed TLS session):
    /// an idle connection costs ~28 KiB of server memory, so none is kept long.
    pub fn agent() -> Limits {
        Limits {
            max_connections: 20_000,
            max_connections_per_peer: 16,
            max_body_bytes: 64 * 1024,
            max_header_bytes: 16 * 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(15),
            handshake_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(5),
        }
    }

    /// On a loopback address only local processes connect — a simulator's agents, a local
    /// proxy — all from one address and each holding a long-poll, so a per-address limit
    /// would starve them: there it is the global limit.
    pub fn one_peer_on_loopback(mut self, listen: std::net::SocketAddr) -> Limits {
        if listen.ip().is_loopback() {
            self.max_connections_per_peer = self.max_connections;
        }
        self
    }

    /// The admin API: operators, CI and monitoring.
    pub fn admin() -> Limits {
        Limits {
            max_connections: 1_024,
            max_connections_per_peer: 64,
            max_body_bytes: 64 * 1024,
            max_header_bytes: 16 * 1024,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ListenerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] TlsError),
}

impl ListenerError {
    pub fn hint(&self) -> &'static str {
        match self {
            ListenerError::Bind { .. } => "choose a free address, or stop what holds the port",
            ListenerError::Tls(e) => e.hint(),
        }
    }
}

/// Counters of one listener (for `/metrics`, logs and tests).
#[derive(Debug, Default)]
pub struct ListenerStats {
    open: AtomicUsize,
    accepted: AtomicU64,
    refused_global: AtomicU64,
    refused_peer: AtomicU64,
    handshake_failed: AtomicU64,
    closed_slow: AtomicU64,
    closed_idle: AtomicU64,
    body_too_large: AtomicU64,
    accept_errors: AtomicU64,
    /// Milliseconds (since the process's first listener) of the last refusal logged.
    last_refusal_log: AtomicU64,
}

/// A copy of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StatsSnapshot {
    pub open: usize,
    pub accepted: u64,
    pub refused_global: u64,
    pub refused_peer: u64,
    pub handshake_failed: u64,
    pub closed_slow: u64,
    pub closed_idle: u64,
    pub body_too_large: u64,
    pub accept_errors: u64,
}

impl ListenerStats {
    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            open: self.open.load(Ordering::Relaxed),
            accepted: get(&self.accepted),
            refused_global: get(&self.refused_global),
            refused_peer: get(&self.refused_peer),
            handshake_failed: get(&self.handshake_failed),
            closed_slow: get(&self.closed_slow),
            closed_idle: get(&self.closed_idle),
            body_too_large: get(&self.body_too_large),
            accept_errors: get(&self.accept_errors),
        }
    }

    /// At most one log line a second about refused connections (a flood must not flood the
    /// log too).
    fn log_refusal(&self, name: &str, peer: &SocketAddr, why: &str) {
        // 0: never logged (times are stored plus one).
        let now = now_ms() + 1;
        let last = self.last_refusal_log.load(Ordering::Relaxed);
        if (last == 0 || now.saturating_sub(last) >= 1_000)
            && self
                .last_refusal_log
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let s = self.snapshot();
            tracing::warn!(
                listener = name,
                peer = %peer.ip(),
                why,
                open = s.open,
                refused_global = s.refused_global,
                refused_peer = s.refused_peer,
                "connection refused"
            );
        }
    }
}

/// The process-wide monotonic base of the connection clocks.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// Milliseconds since [`base`]: connection times fit in atomics.
fn now_ms() -> u64 {
    base().elapsed().as_millis() as u64
}

fn instant_of(ms: u64) -> tokio::time::Instant {
    tokio::time::Instant::from_std(base() + Duration::from_millis(ms))
}

/// Raise this process's open-file limit to its hard limit (once); the soft limit after.
pub fn raise_fd_limit() -> u64 {
    static LIMIT: OnceLock<u64> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        // SAFETY: getrlimit/setrlimit only read and write the struct passed to them.
        unsafe {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return 1024;
            }
            if limit.rlim_cur < limit.rlim_max {
                let raised = libc::rlimit {
                    rlim_cur: limit.rlim_max,
                    rlim_max: limit.rlim_max,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    limit.rlim_cur = limit.rlim_max;
                }
            }
            limit.rlim_cur
        }
    })
}

/// Descriptors kept out of every listener's budget: the store, secrets, files, clients.
const RESERVED_FDS: u64 = 256;

/// The connections one listener may hold with `fd_limit` descriptors. Two listeners share
/// what the reserve leaves: each keeps room for the other's maximum, which is the admin API's
/// (1,024) unless half the descriptors is less. Halving them instead left a daemon with a
/// 20,000-descriptor limit 9,872 agent connections: ten thousand enrolled agents, each
/// holding its long poll, filled them, and the last agents of a wave could not enroll.
fn connection_budget(fd_limit: u64) -> usize {
    let usable = fd_limit.saturating_sub(RESERVED_FDS);
    let kept_for_the_other = (usable / 2).min(Limits::admin().max_connections as u64);
    (usable - kept_for_the_other).max(16) as usize
}

/// A listener bound to its address, not serving yet.
pub struct Bound {
    name: &'static str,
    listener: TcpListener,
    local_addr: SocketAddr,
    tls: Option<ServerTls>,
    limits: Limits,
}

/// Bind `listen` with `tls` (the development CA is made or read now) and `limits` (its
/// connection maximum lowered to fit the descriptor limit).
pub async fn bind(
    name: &'static str,
    listen: SocketAddr,
    tls: &TlsSetting,
    mut limits: Limits,
) -> Result<Bound, ListenerError> {
    let tls = ServerTls::load(tls)?;
    let budget = connection_budget(raise_fd_limit());
    if limits.max_connections > budget {
        tracing::warn!(
            listener = name,
            configured = limits.max_connections,
            allowed = budget,
            "connection limit lowered to fit the open-file limit (raise LimitNOFILE)"
        );
        limits.max_connections = budget;
    }
    let bind_err = |source| ListenerError::Bind {
        addr: listen,
        source,
    };
    let listener = TcpListener::bind(listen).await.map_err(bind_err)?;
    let local_addr = listener.local_addr().map_err(bind_err)?;
    Ok(Bound {
        name,
        listener,
        local_addr,
        tls,
        limits,
    })
}

impl Bound {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// `https` or `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// The PEM bundle clients of this listener pin, when there is one to give them.
    pub fn client_ca(&self) -> Option<&str> {
        self.tls.as_ref().and_then(|t| t.client_ca.as_deref())
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Serve `app` until [`Server::shutdown`].
    pub fn serve(self, app: Router) -> Server {
        let stats = Arc::new(ListenerStats::default());
        let (stop, stopped) = watch::channel(false);
        let Bound {
            name,
            listener,
            local_addr,
            tls,
            limits,
        } = self;
        tracing::info!(
            listener = name,
            addr = %local_addr,
            tls = tls.is_some(),
            max_connections = limits.max_connections,
            per_peer = limits.max_connections_per_peer,
            "listening"
        );
        let shared = Arc::new(Shared {
            name,
            tls,
            limits,
            app,
            stats: stats.clone(),
            peers: Mutex::new(HashMap::new()),
        });
        let task = tokio::spawn(accept_loop(listener, shared, stopped));
        Server {
            local_addr,
            stats,
            stop,
            task,
        }
    }
}

/// A serving listener.
#[derive(Debug)]
pub struct Server {
    local_addr: SocketAddr,
    stats: Arc<ListenerStats>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn stats(&self) -> Arc<ListenerStats> {
        self.stats.clone()
    }

    /// Stop accepting, let requests in flight finish (bounded by the shutdown grace), close
    /// every connection, and return.
    pub async fn shutdown(self) {
        self.stop.send_replace(true);
        let _ = self.task.await;
    }
}

/// What every connection of one listener shares.
struct Shared {
    name: &'static str,
    tls: Option<ServerTls>,
    limits: Limits,
    app: Router,
    stats: Arc<ListenerStats>,
    peers: Mutex<HashMap<IpAddr, usize>>,
}

/// A connection's place in the budget, given back when it closes.
struct Admitted {
    shared: Arc<Shared>,
    peer: IpAddr,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.shared.stats.open.fetch_sub(1, Ordering::Relaxed);
        let mut peers = self.shared.peers.lock().expect("peers lock");
        if let Some(n) = peers.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                peers.remove(&self.peer);
            }
        }
    }
}

impl Shared {
    /// Take a place for a connection from `peer`, or say why there is none.
    fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Admitted, &'static str> {
        let mut peers = self.peers.lock().expect("peers lock");
        if self.stats.open.load(Ordering::Relaxed) >= self.limits.max_connections {
            self.stats.refused_global.fetch_add(1, Ordering::Relaxed);
            return Err("the listener's connection limit is reached");
        }
        let n = peers.entry(peer).or_insert(0);
        if *n >= self.limits.max_connections_per_peer {
            self.stats.refused_peer.fetch_add(1, Ordering::Relaxed);
            return Err("the peer's connection limit is reached");
        }
        *n += 1;
        self.stats.open.fetch_add(1, Ordering::Relaxed);
        self.stats.accepted.fetch_add(1, Ordering::Relaxed);
        Ok(Admitted {
            shared: self.clone(),
            peer,
        })
    }
}

fn out_of_descriptors(err: &std::io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut connections: JoinSet<()> = JoinSet::new();
    let (drain, draining) = watch::channel(false);
    loop {
        tokio::select! {
            biased;
            _ = async { let _ = stop.wait_for(|s| *s).await; } => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match shared.admit(peer.ip()) {
                    Ok(admitted) => {
                        connections.spawn(connection(
                            stream,
                            peer,
                            shared.clone(),
                            admitted,
                            draining.clone(),
                        ));
                    }
                    Err(why) => {
                        shared.stats.log_refusal(shared.name, &peer, why);
                        drop(stream);
                    }
                },
                Err(err) => {
                    shared.stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                    if out_of_descriptors(&err) {
                        tracing::error!(listener = shared.name, error = %err, "cannot accept: out of descriptors; pausing");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }
    }
    // New connections are refused by the kernel from here on.
    drop(listener);
    drain.send_replace(true);
    let grace = tokio::time::sleep(shared.limits.shutdown_grace);
    tokio::pin!(grace);
    loop {
        tokio::select! {
            next = connections.join_next() => if next.is_none() { break },
            _ = &mut grace => {
                tracing::warn!(listener = shared.name, left = connections.len(), "shutdown grace over: dropping the connections left");
                connections.abort_all();
                while connections.join_next().await.is_some() {}
                break;
            }
        }
    }
    tracing::info!(listener = shared.name, "listener stopped");
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    admitted: Admitted,
    mut draining: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    match shared.tls.clone() {
        None => drive(stream, peer, &shared, draining).await,
        Some(tls) => {
            let handshake =
                tokio::time::timeout(shared.limits.handshake_timeout, tls.acceptor.accept(stream));
            let accepted = tokio::select! {
                accepted = handshake => accepted,
                _ = async { let _ = draining.wait_for(|d| *d).await; } => return,
            };
            match accepted {
                Ok(Ok(stream)) => drive(stream, peer, &shared, draining).await,
                Ok(Err(err)) => {
                    shared
                        .stats
                        .handshake_failed
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(listener = shared.name, peer = %peer, error = %err, "TLS handshake failed");
                }
                Err(_) => {
                    shared
                        .stats
                        .handshake_failed
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(listener = shared.name, peer = %peer, "TLS handshake timed out");
                }
            }
        }
    }
    drop(admitted);
}

/// What a connection's watchdog reads (written by its reads and its requests).
struct ConnState {
    /// A request is being handled.
    in_flight: AtomicU32,
    requests: AtomicU64,
    /// When the first byte of the next request head arrived (ms), `u64::MAX`: none yet.
    head_started: AtomicU64,
    /// When the last request ended, or the connection opened (ms).
    idle_since: AtomicU64,
    /// A head started: the watchdog re-arms to the head deadline.
    head_notify: Notify,
}

const NONE: u64 = u64::MAX;

/// The watchdog's reading of a connection.
enum Verdict {
    /// Nothing overdue; look again at this time (ms).
    Fine(u64),
    SlowHead,
    Idle,
}

impl ConnState {
    fn new() -> Self {
        Self {
            in_flight: AtomicU32::new(0),
            requests: AtomicU64::new(0),
            head_started: AtomicU64::new(NONE),
            idle_since: AtomicU64::new(now_ms()),
            head_notify: Notify::new(),
        }
    }

    fn verdict(&self, limits: &Limits, now: u64) -> Verdict {
        let header = limits.header_timeout.as_millis() as u64;
        if self.in_flight.load(Ordering::Acquire) > 0 {
            // The route owns the request (the body has its own deadline); look again later.
            return Verdict::Fine(now + header.max(1_000));
        }
        let started = self.head_started.load(Ordering::Acquire);
        if started != NONE {
            let due = started.saturating_add(header);
            return if now >= due {
                Verdict::SlowHead
            } else {
                Verdict::Fine(due)
            };
        }
        let first = self.requests.load(Ordering::Acquire) == 0;
        let allowed = if first {
            header
        } else {
            limits.idle_timeout.as_millis() as u64
        };
        let due = self
            .idle_since
            .load(Ordering::Acquire)
            .saturating_add(allowed);
        match (now >= due, first) {
            (false, _) => Verdict::Fine(due),
            // A connection that never sent a whole request in time is a slow one.
            (true, true) => Verdict::SlowHead,
            (true, false) => Verdict::Idle,
        }
    }
}

/// A request in flight; its end makes the connection idle.
struct InFlight(Arc<ConnState>);

impl InFlight {
    fn begin(state: &Arc<ConnState>) -> Self {
        state.in_flight.fetch_add(1, Ordering::AcqRel);
        state.requests.fetch_add(1, Ordering::Relaxed);
        state.head_started.store(NONE, Ordering::Release);
        InFlight(state.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.idle_since.store(now_ms(), Ordering::Release);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The connection's byte stream, telling the watchdog when a new request head starts.
struct Metered<T> {
    inner: T,
    state: Arc<ConnState>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Metered<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let state = &self.state;
            if state.in_flight.load(Ordering::Acquire) == 0
                && state
                    .head_started
                    .compare_exchange(NONE, now_ms(), Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                state.head_notify.notify_one();
            }
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Metered<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Serve HTTP/1.1 on one connection under its watchdog.
async fn drive<IO>(
    io: IO,
    peer: SocketAddr,
    shared: &Arc<Shared>,
    mut draining: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let state = Arc::new(ConnState::new());
    let io = TokioIo::new(Metered {
        inner: io,
        state: state.clone(),
    });
    let service = {
        let shared = shared.clone();
        let state = state.clone();
        hyper::service::service_fn(move |request: Request<Incoming>| {
            let shared = shared.clone();
            let flight = InFlight::begin(&state);
            async move { Ok::<_, Infallible>(handle(request, peer, &shared, flight).await) }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        // The watchdog below keeps the head deadline (hyper's would also end keep-alive).
        .header_read_timeout(None)
        .keep_alive(true)
        .max_buf_size(shared.limits.max_header_bytes.max(8192))
        .max_headers(100);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut graceful = false;
    // The watchdog's timer is set to the next deadline it knows, never to "now": a connection
    // that asks and is answered in time (an agent's heartbeat) costs no timer wake-up at all.
    let Some(mut wake) = watch(&state, shared, peer) else {
        return;
    };
    loop {
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(err) = served {
                    tracing::debug!(listener = shared.name, peer = %peer, error = %err, "connection ended");
                }
                return;
            }
            _ = async { let _ = draining.wait_for(|d| *d).await; }, if !graceful => {
                // Idle connections close now; a request in flight finishes first.
                conn.as_mut().graceful_shutdown();
                graceful = true;
            }
            // A head started: its deadline now runs from its first byte.
            _ = state.head_notify.notified() => match watch(&state, shared, peer) {
                Some(next) => wake = next,
                None => return,
            },
            _ = tokio::time::sleep_until(instant_of(wake)) => match watch(&state, shared, peer) {
                Some(next) => wake = next,
                None => return,
            },
        }
    }
}

/// The watchdog's reading now: when to look again (ms), or `None` when the connection is to
/// close (counted).
fn watch(state: &ConnState, shared: &Shared, peer: SocketAddr) -> Option<u64> {
    match state.verdict(&shared.limits, now_ms()) {
        Verdict::Fine(next) => Some(next),
        Verdict::SlowHead => {
            shared.stats.closed_slow.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(listener = shared.name, peer = %peer, "closed: request head too slow");
            None
        }
        Verdict::Idle => {
            shared.stats.closed_idle.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

/// One request: the body cap before anything else, then the application.
async fn handle(
    request: Request<Incoming>,
    peer: SocketAddr,
    shared: &Shared,
    flight: InFlight,
) -> Response<Body> {
    let limits = &shared.limits;
    if declared_length(request.headers()).is_some_and(|n| n > limits.max_body_bytes as u64) {
        shared.stats.body_too_large.fetch_add(1, Ordering::Relaxed);
        drop(flight);
        return closing(error_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "the request body is over {} bytes, the most this server takes",
                limits.max_body_bytes
            ),
        ));
    }
    let (mut parts, incoming) = request.into_parts();
    parts.extensions.insert(ConnectInfo(peer));
    let body = Body::new(body::GuardedBody::new(
        incoming,
        limits.max_body_bytes,
        limits.body_timeout,
    ));
    let response = match shared
        .app
        .clone()
        .oneshot(Request::from_parts(parts, body))
        .await
    {
        Ok(response) => response,
        Err(never) => match never {},
    };
    drop(flight);
    response
}

#[cfg(test)]
mod tests {
    use super::connection_budget;

    #[test]
    fn a_listener_keeps_room_for_the_other_and_the_reserve() {
        // 1,024 descriptors: 768 after the reserve, half each (the admin maximum is more).
        assert_eq!(connection_budget(1_024), 384);
        // 20,000: the agent channel holds ten thousand agents' long polls and more, with the
        // admin API's 1,024 and the reserve left over.
        assert_eq!(connection_budget(20_000), 18_720);
        assert!(connection_budget(20_000) + 1_024 + 256 <= 20_000);
        // Nothing to spare still leaves a listener that answers.
        assert_eq!(connection_budget(100), 16);
    }
}
