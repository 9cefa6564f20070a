//! A small blocking HTTP/1.1 client for the members' REST APIs.
//!
//! Owns: one request per connection (`Connection: close`), HTTP basic auth as
//! patronictl sends it, TLS for `https://` URLs (rustls's `ClientConnection` over
//! the same blocking socket, [`crate::tls::client_config`]: `[ctl] cacert`,
//! `certfile`/`keyfile`, `insecure`), a connect deadline and a deadline on the
//! whole exchange, and a cap on the answer's size. Must never: follow redirects,
//! send a request to an https:// URL unencrypted, block past its deadline, or
//! panic on what a server sends.
//!
//! Why not a crate: ctl needs GET, POST and PATCH with a JSON body against
//! servers it knows; std's `TcpStream` with timeouts plus `httparse` (already a
//! dependency of the API server) for the answer's head is all of that, and adds
//! nothing to the binary. ctl runs outside the agent's loop, so blocking here is
//! fine (DESIGN §5 is about the agent).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

/// The most of an answer read (heads and bodies of the API are a few kB).
pub const MAX_RESPONSE: usize = 4 * 1024 * 1024;
/// The longest a TCP connect may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// `[api] username/password`, sent as HTTP basic auth.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password, even in a debug print.
        write!(f, "Credentials({:?}, <password>)", self.username)
    }
}

/// An answer: the status and the body as text (lossy UTF-8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

/// Whether `url` is `https://`.
pub fn is_https(url: &str) -> bool {
    url.starts_with("https://")
}

/// `http[s]://host:port[/path]` → `(host, port)` (default port 80, or 443 for
/// https). The path of Patroni's `api_url` (`/patroni`) is dropped: every
/// endpoint is at the root.
pub fn parse_api_url(url: &str) -> Result<(String, u16), String> {
    let (rest, default_port) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(r), _) => (r, 80),
        (None, Some(r)) => (r, 443),
        (None, None) => return Err(format!("{url:?}: not an http:// or https:// URL")),
    };
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty() || authority.contains('@') {
        return Err(format!("{url:?}: no host:port in it"));
    }
    let port_of = |p: &str| {
        p.parse::<u16>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("{url:?}: the port {p:?} is not a number in 1..65535"))
    };
    // `[v6]` or `[v6]:port` (review of bad input, finding 9: `[::1]` alone was
    // split at its last colon); else `host` or `host:port`.
    let (host, port) = match authority.strip_prefix('[') {
        Some(inner) => {
            let (h, after) = inner
                .split_once(']')
                .ok_or_else(|| format!("{url:?}: an IPv6 address without its closing ']'"))?;
            let port = match after {
                "" => default_port,
                p => port_of(p.strip_prefix(':').ok_or_else(|| {
                    format!("{url:?}: expected :port after the IPv6 address, found {p:?}")
                })?)?,
            };
            (h, port)
        }
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, port_of(p)?),
            None => (authority, default_port),
        },
    };
    if host.is_empty() {
        return Err(format!("{url:?}: no host in it"));
    }
    if host.contains(['[', ']', ' ']) || host.chars().any(char::is_control) {
        return Err(format!(
            "{url:?}: the host {host:?} is not a host name or address"
        ));
    }
    Ok((host.to_string(), port))
}

/// Standard base64 with padding (RFC 4648), for the basic-auth header: the same
/// crate the server decodes it with (`api::auth`).
pub fn base64(input: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(input)
}

/// The request's bytes.
pub fn encode_request(
    method: &str,
    host: &str,
    port: u16,
    path: &str,
    body: Option<&str>,
    auth: Option<&Credentials>,
) -> Vec<u8> {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: tenure-ctl/{}\r\n\
         Accept: application/json\r\nConnection: close\r\n",
        env!("CARGO_PKG_VERSION")
    );
    if let Some(c) = auth {
        let token = base64(format!("{}:{}", c.username, c.password).as_bytes());
        head += &format!("Authorization: Basic {token}\r\n");
    }
    match body {
        Some(b) => {
            head += &format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                b.len()
            );
            let mut out = head.into_bytes();
            out.extend_from_slice(b.as_bytes());
            out
        }
        None if method != "GET" && method != "HEAD" => {
            head += "Content-Length: 0\r\n\r\n";
            head.into_bytes()
        }
        None => {
            head += "\r\n";
            head.into_bytes()
        }
    }
}

/// Parse a complete answer: up to its `Content-Length`, or everything up to the
/// connection's end (`eof`) when it has none. `Ok(None)`: not complete yet.
pub fn parse_response(buf: &[u8], eof: bool) -> Result<Option<Response>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    let head_len = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("not an HTTP answer ({e})")),
    };
    let status = r.code.ok_or("an HTTP answer without a status")?;
    let mut length = None;
    for h in r.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let v = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or("a Content-Length that is not a number")?;
            length = Some(v);
        }
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err("a chunked answer (tenure's API never sends one)".into());
        }
    }
    let body = &buf[head_len..];
    let body = match length {
        Some(n) if body.len() < n => return Ok(None),
        Some(n) => &body[..n],
        None if !eof => return Ok(None),
        None => body,
    };
    Ok(Some(Response {
        status,
        body: String::from_utf8_lossy(body).into_owned(),
    }))
}

/// The connection: plain, or TLS over the same socket.
enum Conn {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(t) => t.get_ref(),
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(t) => t.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(t) => t.flush(),
        }
    }
}

/// One request to the API at `api_url` over plain HTTP (an https:// URL is
/// refused: [`request_with`] takes the TLS configuration).
pub fn request(
    api_url: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    auth: Option<&Credentials>,
    timeout: Duration,
) -> Result<Response, String> {
    request_with(
        api_url,
        method,
        path,
        body,
        auth,
        Err("no TLS client configuration"),
        timeout,
    )
}

/// One request to the API at `api_url`. `timeout` bounds the whole exchange
/// (connect and TLS handshake included); the text of an `Err` names the URL and
/// what failed. `tls`: the client configuration for https:// URLs, or why there
/// is none (said when the URL needs one).
pub fn request_with(
    api_url: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
    auth: Option<&Credentials>,
    tls: Result<&Arc<ClientConfig>, &str>,
    timeout: Duration,
) -> Result<Response, String> {
    let deadline = Instant::now() + timeout;
    let (host, port) = parse_api_url(api_url)?;
    let fail = |what: String| format!("{method} {path} at {api_url}: {what}");
    let addrs: Vec<SocketAddr> = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| fail(format!("cannot resolve {host}: {e}")))?
        .collect();
    let mut last = String::from("no address");
    let mut stream = None;
    for a in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(&a, left.min(CONNECT_TIMEOUT)) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = format!("cannot connect to {a}: {e}"),
        }
    }
    let stream = stream.ok_or_else(|| fail(last))?;
    let mut stream = if is_https(api_url) {
        let config = tls.map_err(|why| fail(format!("https: {why}")))?;
        let name = ServerName::try_from(host.clone())
            .map_err(|e| fail(format!("TLS: {host:?} is not a server name: {e}")))?;
        let conn = ClientConnection::new(Arc::clone(config), name)
            .map_err(|e| fail(format!("TLS: {e}")))?;
        Conn::Tls(Box::new(StreamOwned::new(conn, stream)))
    } else {
        Conn::Plain(stream)
    };
    let left = |d: Instant| {
        let l = d.saturating_duration_since(Instant::now());
        // A zero timeout means "none" to std: never pass it.
        if l.is_zero() {
            Err(fail("no answer in time".into()))
        } else {
            Ok(l)
        }
    };
    stream
        .tcp()
        .set_write_timeout(Some(left(deadline)?))
        .map_err(|e| fail(e.to_string()))?;
    // The handshake reads too: bounded by the same deadline.
    stream
        .tcp()
        .set_read_timeout(Some(left(deadline)?))
        .map_err(|e| fail(e.to_string()))?;
    stream
        .write_all(&encode_request(method, &host, port, path, body, auth))
        .map_err(|e| fail(format!("sending: {e}")))?;
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    loop {
        stream
            .tcp()
            .set_read_timeout(Some(left(deadline)?))
            .map_err(|e| fail(e.to_string()))?;
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.len() > MAX_RESPONSE {
                    return Err(fail(format!(
                        "the answer is larger than {MAX_RESPONSE} bytes"
                    )));
                }
                if let Ok(Some(r)) = parse_response(&buf, false) {
                    return Ok(r);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(fail(format!(
                    "no complete answer within {:.1} s",
                    timeout.as_secs_f64()
                )));
            }
            Err(e) => return Err(fail(format!("reading: {e}"))),
        }
    }
    parse_response(&buf, true)
        .map_err(fail)?
        .ok_or_else(|| fail("the connection closed before a complete answer".into()))
}
