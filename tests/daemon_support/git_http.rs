//! A git smart-HTTP server for tests: git's own `git http-backend` (CGI) behind a small axum
//! front that can demand basic authentication, so the daemon fetches over real HTTP exactly as
//! it would from a git forge.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use base64::Engine;
use tokio::io::AsyncWriteExt;

#[derive(Clone)]
struct Served {
    root: PathBuf,
    /// `user:token` the client must present, if any.
    basic: Option<String>,
    refused: Arc<AtomicUsize>,
    served: Arc<AtomicUsize>,
}

pub struct GitHttp {
    pub addr: SocketAddr,
    /// Requests answered 401.
    pub refused: Arc<AtomicUsize>,
    /// Requests passed to git.
    pub served: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl GitHttp {
    /// Serve the repositories under `root` (`http://ADDR/<dir>`), requiring `basic`
    /// (`user:token`) when given.
    pub async fn start(root: PathBuf, basic: Option<&str>) -> GitHttp {
        let served = Served {
            root,
            basic: basic.map(str::to_owned),
            refused: Arc::default(),
            served: Arc::default(),
        };
        let (refused, count) = (served.refused.clone(), served.served.clone());
        let app = axum::Router::new().fallback(backend).with_state(served);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        GitHttp {
            addr,
            refused,
            served: count,
            task,
        }
    }

    pub fn url(&self, repository: &str) -> String {
        format!("http://{}/{repository}", self.addr)
    }

    pub fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }

    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}

impl Drop for GitHttp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn backend(
    State(state): State<Served>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(basic) = &state.basic {
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(basic)
        );
        let given = headers.get("authorization").and_then(|v| v.to_str().ok());
        if given != Some(expected.as_str()) {
            state.refused.fetch_add(1, Ordering::SeqCst);
            return Response::builder()
                .status(StatusCode::UNAUTHORIZED)
                .header("www-authenticate", "Basic realm=\"fleet\"")
                .body(Body::empty())
                .unwrap();
        }
    }
    state.served.fetch_add(1, Ordering::SeqCst);
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let mut child = tokio::process::Command::new("git")
        .arg("http-backend")
        .env("GIT_PROJECT_ROOT", &state.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", method.as_str())
        .env("PATH_INFO", uri.path())
        .env("QUERY_STRING", uri.query().unwrap_or(""))
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
        .env("HTTP_GIT_PROTOCOL", header("git-protocol"))
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("git http-backend runs");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&body).await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    // CGI: headers, a blank line, the body.
    let split = output
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| (at, 4))
        .or_else(|| {
            output
                .stdout
                .windows(2)
                .position(|w| w == b"\n\n")
                .map(|at| (at, 2))
        })
        .expect("CGI headers end");
    let (head, rest) = output.stdout.split_at(split.0);
    let mut response = Response::builder().status(StatusCode::OK);
    for line in String::from_utf8_lossy(head).lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code: u16 = value.split(' ').next().unwrap().parse().unwrap();
            response = response.status(code);
        } else {
            response = response.header(name, value);
        }
    }
    response.body(Body::from(rest[split.1..].to_vec())).unwrap()
}
