//! The enrollment endpoint as its own HTTP server, for `apply` (DESIGN.md §6: the daemon mounts
//! [`super::router`] instead). Listens until [`EnrollmentServer::shutdown`]; in-flight requests
//! finish first.

use std::net::SocketAddr;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use url::Url;

use super::{AgentState, router};
use crate::store::Store;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot listen for agent enrollments on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "agents cannot reach {addr}: it listens on every interface, so the URL deployed hosts use must be given"
    )]
    NoPublicUrl { addr: SocketAddr },
    #[error("invalid agent URL `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
}

impl AgentError {
    /// What the operator should do, for the CLI's `hint:` line.
    pub fn hint(&self) -> &'static str {
        match self {
            AgentError::Bind { .. } => {
                "choose a free address with --agent-listen, or stop what holds the port"
            }
            AgentError::NoPublicUrl { .. } => {
                "pass --agent-url http://<address the deployed hosts reach>:<port>/"
            }
            AgentError::InvalidUrl { .. } => {
                "pass an http:// or https:// URL, e.g. http://10.176.46.5:8740/"
            }
        }
    }
}

/// A running enrollment endpoint.
#[derive(Debug)]
pub struct EnrollmentServer {
    local_addr: SocketAddr,
    state: AgentState,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl EnrollmentServer {
    /// Listen on `listen` (port 0 picks a free one). `public_url` is the base URL deployed hosts
    /// reach this server at; without it the listening address is used, which must then be a
    /// specific one (not 0.0.0.0). A restarted apply passes the same values, so hosts deployed
    /// before the restart still reach it.
    pub async fn start(
        store: Store,
        listen: SocketAddr,
        public_url: Option<Url>,
    ) -> Result<Self, AgentError> {
        if let Some(url) = &public_url
            && !matches!(url.scheme(), "http" | "https")
        {
            return Err(AgentError::InvalidUrl {
                url: url.to_string(),
                reason: "the scheme must be http or https".into(),
            });
        }
        if public_url.is_none() && listen.ip().is_unspecified() {
            return Err(AgentError::NoPublicUrl { addr: listen });
        }
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|source| AgentError::Bind {
                addr: listen,
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| AgentError::Bind {
            addr: listen,
            source,
        })?;
        let base = match public_url {
            Some(url) => url,
            None => Url::parse(&format!("http://{local_addr}/")).map_err(|e| {
                AgentError::InvalidUrl {
                    url: local_addr.to_string(),
                    reason: e.to_string(),
                }
            })?,
        };
        let state = AgentState::new(store, base);
        let app = router(state.clone()).into_make_service_with_connect_info::<SocketAddr>();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(err) = served {
                tracing::error!(error = %err, "agent enrollment server stopped");
            }
        });
        tracing::info!(addr = %local_addr, url = %state.enroll_url(), "agent enrollment endpoint listening");
        Ok(Self {
            local_addr,
            state,
            stop,
            task,
        })
    }

    /// What cloud-init carries (`METALFORM_ENROLL_URL`).
    pub fn enroll_url(&self) -> String {
        self.state.enroll_url()
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stop accepting, let in-flight enrollments finish, and return.
    pub async fn shutdown(self) {
        self.state.close_polls();
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}
