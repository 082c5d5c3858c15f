//! The agent channel on its own hardened listener (crate::listener), separate from the admin
//! API: what `apply` runs while it works and what the daemon runs beside its admin listener —
//! the same code in both.

use std::net::SocketAddr;
use std::sync::Arc;

use url::Url;

use super::{AgentChannel, ChannelOptions};
use crate::listener::{self, Limits, ListenerStats, TlsError, TlsSetting};
use crate::store::Store;

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("cannot listen for agents on {addr}: {source}")]
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
    #[error("agent channel TLS: {0}")]
    Tls(#[from] TlsError),
}

impl AgentError {
    /// What the operator should do, for the CLI's `hint:` line.
    pub fn hint(&self) -> &'static str {
        match self {
            AgentError::Bind { .. } => {
                "choose a free address for the agent listener, or stop what holds the port"
            }
            AgentError::NoPublicUrl { .. } => {
                "give the URL the deployed hosts reach, e.g. https://<address>:<port>/"
            }
            AgentError::InvalidUrl { .. } => {
                "an https:// URL (http:// only with TLS turned off), e.g. https://10.176.46.5:8741/"
            }
            AgentError::Tls(e) => e.hint(),
        }
    }
}

/// How an agent server listens.
#[derive(Debug, Clone)]
pub struct AgentServerConfig {
    /// Port 0 picks a free one.
    pub listen: SocketAddr,
    /// The base URL deployed hosts reach the server at; without it the listening address is
    /// used, which must then be a specific one (not 0.0.0.0).
    pub public_url: Option<Url>,
    pub tls: TlsSetting,
    pub limits: Limits,
    pub channel: ChannelOptions,
}

impl AgentServerConfig {
    pub fn new(listen: SocketAddr, public_url: Option<Url>, tls: TlsSetting) -> Self {
        Self {
            listen,
            public_url,
            tls,
            limits: Limits::agent(),
            channel: ChannelOptions::default(),
        }
    }
}

/// The names a development certificate is issued for: the public URL's host and the
/// listening address (when it is a specific one).
pub fn server_certificate_names(listen: SocketAddr, public_url: Option<&Url>) -> Vec<String> {
    let mut names = Vec::new();
    if let Some(host) = public_url.and_then(Url::host_str) {
        names.push(
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
        );
    }
    if !listen.ip().is_unspecified() {
        names.push(listen.ip().to_string());
    }
    names
}

/// A running agent channel.
#[derive(Debug)]
pub struct AgentServer {
    channel: AgentChannel,
    server: listener::Server,
    client_ca: Option<String>,
}

impl AgentServer {
    /// Bind, make or read the TLS material, and serve. A restarted apply or daemon must be
    /// given the same listen address, URL and TLS (or development CA directory): hosts deployed
    /// before the restart carry that URL and pin that CA.
    pub async fn start(store: Store, config: AgentServerConfig) -> Result<AgentServer, AgentError> {
        if let Some(url) = &config.public_url {
            let scheme_ok = match url.scheme() {
                "https" => true,
                // Plain URLs only with TLS off (or ended in front of this server).
                "http" => config.tls.is_off(),
                _ => false,
            };
            if !scheme_ok {
                return Err(AgentError::InvalidUrl {
                    url: url.to_string(),
                    reason: if url.scheme() == "http" {
                        "the agent listener speaks TLS, so its URL is https://".into()
                    } else {
                        "the scheme must be https (or http with TLS turned off)".into()
                    },
                });
            }
        }
        if config.public_url.is_none() && config.listen.ip().is_unspecified() {
            return Err(AgentError::NoPublicUrl {
                addr: config.listen,
            });
        }
        let bound = listener::bind("agent", config.listen, &config.tls, config.limits.clone())
            .await
            .map_err(|e| match e {
                listener::ListenerError::Bind { addr, source } => AgentError::Bind { addr, source },
                listener::ListenerError::Tls(e) => AgentError::Tls(e),
            })?;
        let local_addr = bound.local_addr();
        let base = match config.public_url {
            Some(url) => url,
            None => Url::parse(&format!("{}://{local_addr}/", bound.scheme())).map_err(|e| {
                AgentError::InvalidUrl {
                    url: local_addr.to_string(),
                    reason: e.to_string(),
                }
            })?,
        };
        let client_ca = bound.client_ca().map(str::to_owned);
        let channel = AgentChannel::new(store, base, config.channel);
        let server = bound.serve(channel.router());
        tracing::info!(addr = %local_addr, url = %channel.enroll_url(), "agent channel listening");
        Ok(AgentServer {
            channel,
            server,
            client_ca,
        })
    }

    /// What cloud-init carries (`METALFORM_ENROLL_URL`).
    pub fn enroll_url(&self) -> String {
        self.channel.enroll_url()
    }

    /// The PEM bundle deployed hosts pin (cloud-init writes it to /etc/metalform/ca.pem):
    /// the development CA, or the operator's `client_ca`; `None` with plain HTTP or when hosts
    /// use their system roots.
    pub fn client_ca(&self) -> Option<&str> {
        self.client_ca.as_deref()
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    pub fn channel(&self) -> &AgentChannel {
        &self.channel
    }

    pub fn stats(&self) -> Arc<ListenerStats> {
        self.server.stats()
    }

    /// Waiting polls answer 204, requests in flight finish (bounded by the listener's shutdown
    /// grace), the noted agent contacts are written; then it returns.
    pub async fn shutdown(self) {
        self.channel.close_polls();
        self.server.shutdown().await;
        self.channel.close().await;
    }
}
