//! The load generator's HTTP client, and the API calls seeding needs.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

/// The load generator's HTTP/1.1 client: persistent keep-alive connections, each
/// request written in one buffer and its response read by Content-Length (or
/// chunked). Like wrk or pgbench, it does as little as a client can, so the CPU
/// of this small machine goes to the service and the database being measured; a
/// general-purpose client (reqwest) cost about 30 us of CPU per request here,
/// half the service's own cost on a GET.
#[derive(Clone)]
pub struct Api {
    pub http: Arc<Http>,
}

pub struct Http {
    /// `host:port` to connect to.
    pub addr: String,
    /// Idle keep-alive connections; a request takes one and puts it back.
    pub idle: std::sync::Mutex<Vec<Conn>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Delete,
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Delete => "DELETE",
        })
    }
}

/// Why a round trip failed: a reused connection that the server had already
/// closed fails before any byte of a response, and the request is sent again on
/// a new connection (the server never saw it).
pub enum Fail {
    Stale(String),
    Broken(String),
}

pub struct Conn {
    pub stream: tokio::net::TcpStream,
    pub buf: Vec<u8>,
}

impl Conn {
    pub async fn open(addr: &str) -> Result<Conn, String> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("transport: connect {addr}: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("transport: {e}"))?;
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(16 * 1024),
        })
    }

    /// Reads at least one more byte into the buffer; false at end of stream.
    pub async fn fill(&mut self) -> Result<bool, String> {
        use tokio::io::AsyncReadExt as _;
        match self.stream.read_buf(&mut self.buf).await {
            Ok(0) => Ok(false),
            Ok(_) => Ok(true),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Reads a response's head into the buffer (the body's first bytes may follow
    /// it there).
    pub async fn read_head(&mut self) -> Result<Head, Fail> {
        loop {
            match self.fill().await {
                Ok(true) => {}
                Ok(false) if self.buf.is_empty() => {
                    return Err(Fail::Stale("transport: connection closed".into()))
                }
                Ok(false) => return Err(Fail::Broken("transport: closed mid-response".into())),
                Err(e) if self.buf.is_empty() => {
                    return Err(Fail::Stale(format!("transport: {e}")))
                }
                Err(e) => return Err(Fail::Broken(format!("transport: {e}"))),
            }
            let mut headers = [httparse::EMPTY_HEADER; 48];
            let mut parsed = httparse::Response::new(&mut headers);
            let len = match parsed.parse(&self.buf) {
                Ok(httparse::Status::Complete(n)) => n,
                Ok(httparse::Status::Partial) => continue,
                Err(e) => return Err(Fail::Broken(format!("transport: bad response: {e}"))),
            };
            let mut head = Head {
                status: parsed.code.unwrap_or(0),
                len,
                length: None,
                chunked: false,
                keep: parsed.version == Some(1),
                replayed: false,
            };
            for h in parsed.headers.iter() {
                let value = std::str::from_utf8(h.value).unwrap_or("").trim();
                if h.name.eq_ignore_ascii_case("content-length") {
                    head.length = value.parse::<usize>().ok();
                } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                    head.chunked = value.eq_ignore_ascii_case("chunked");
                } else if h.name.eq_ignore_ascii_case("connection") {
                    head.keep = !value.eq_ignore_ascii_case("close");
                } else if h.name.eq_ignore_ascii_case("idempotency-replayed") {
                    head.replayed = true;
                }
            }
            return Ok(head);
        }
    }

    /// Sends one request and reads its response; the flag says whether the
    /// connection can carry another request.
    pub async fn round_trip(&mut self, request: &[u8]) -> Result<(Resp, bool), Fail> {
        use tokio::io::AsyncWriteExt as _;
        self.buf.clear();
        if let Err(e) = self.stream.write_all(request).await {
            return Err(Fail::Stale(format!("transport: {e}")));
        }
        let Head {
            status,
            len: head_len,
            length,
            chunked,
            mut keep,
            replayed,
        } = self.read_head().await?;
        let broken = |e: String| Fail::Broken(format!("transport: {e}"));
        // The body.
        let body = if status == 204 || status == 304 || (100..200).contains(&status) {
            Vec::new()
        } else if chunked {
            let mut body = Vec::new();
            let mut chunks = Chunks::default();
            let mut at = head_len;
            loop {
                at += chunks.decode(&self.buf[at..], &mut body).map_err(broken)?;
                if chunks.ended() {
                    break;
                }
                if !self.fill().await.map_err(broken)? {
                    return Err(broken("closed mid-chunk".into()));
                }
            }
            body
        } else if let Some(n) = length {
            while self.buf.len() < head_len + n {
                if !self.fill().await.map_err(broken)? {
                    return Err(broken("closed mid-body".into()));
                }
            }
            self.buf[head_len..head_len + n].to_vec()
        } else {
            // Neither length nor chunks: the body runs to the end of the stream.
            while self.fill().await.map_err(broken)? {}
            keep = false;
            self.buf[head_len..].to_vec()
        };
        Ok((
            Resp {
                status,
                body,
                replayed,
            },
            keep,
        ))
    }
}

/// A response's head: its status, its length in the buffer, and what it says of
/// the body and the connection.
pub struct Head {
    pub status: u16,
    pub len: usize,
    pub length: Option<usize>,
    pub chunked: bool,
    pub keep: bool,
    pub replayed: bool,
}

/// A chunked body's decoder, fed whatever bytes have arrived: it keeps its place
/// between calls, so a chunk may be split anywhere.
#[derive(Default)]
pub struct Chunks {
    /// Data bytes of the current chunk still to come.
    left: usize,
    /// Bytes of the CRLF after a chunk's data still to skip.
    skip: usize,
    /// The last (empty) chunk's size line was read.
    last: bool,
}

impl Chunks {
    /// Appends the data in `raw` to `out`; how many bytes of `raw` it used (the
    /// rest is an incomplete size line: call again with more behind it).
    pub fn decode(&mut self, raw: &[u8], out: &mut Vec<u8>) -> Result<usize, String> {
        let mut at = 0;
        while at < raw.len() && !self.ended() {
            if self.left > 0 {
                let n = self.left.min(raw.len() - at);
                out.extend_from_slice(&raw[at..at + n]);
                at += n;
                self.left -= n;
                if self.left == 0 {
                    self.skip = 2;
                }
            } else if self.skip > 0 {
                // The CRLF after a chunk's data: its next byte is `\r` or `\n`.
                if raw[at] != b"\r\n"[2 - self.skip] {
                    return Err("no CRLF after a chunk".into());
                }
                at += 1;
                self.skip -= 1;
            } else {
                let Some(nl) = memchr::memchr(b'\n', &raw[at..]) else {
                    break;
                };
                let line = std::str::from_utf8(&raw[at..at + nl]).unwrap_or("");
                let text = line.split(';').next().unwrap_or("").trim();
                let size = usize::from_str_radix(text, 16)
                    .map_err(|_| format!("bad chunk size {text:?}"))?;
                at += nl + 1;
                if size == 0 {
                    // The final CRLF (no trailers are sent).
                    self.last = true;
                    self.skip = 2;
                } else {
                    self.left = size;
                }
            }
        }
        Ok(at)
    }

    /// The body is complete.
    pub fn ended(&self) -> bool {
        self.last && self.skip == 0
    }
}

pub use orbit_commons::testkit::Agent;

/// A response: status, body, and whether it was an idempotent replay.
pub struct Resp {
    pub status: u16,
    pub body: Vec<u8>,
    pub replayed: bool,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// `409 lease_conflict`-style label for an unexpected answer.
    pub fn label(&self) -> String {
        let code = self.json()["code"].as_str().unwrap_or("").to_owned();
        if code.is_empty() {
            self.status.to_string()
        } else {
            format!("{} {code}", self.status)
        }
    }
}

impl Api {
    pub fn new(base: &str) -> Result<Api, String> {
        let base = base.trim_end_matches('/').to_owned();
        let authority = base
            .strip_prefix("http://")
            .ok_or_else(|| format!("{base}: only http:// URLs can be benched"))?;
        let addr = authority.split('/').next().unwrap_or(authority).to_owned();
        if authority != addr {
            return Err(format!(
                "{base}: give the service's root URL, without a path"
            ));
        }
        Ok(Api {
            http: Arc::new(Http {
                addr,
                idle: std::sync::Mutex::new(Vec::new()),
            }),
        })
    }

    pub async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        key: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Resp, String> {
        use std::fmt::Write as _;
        let payload = body.map(|b| serde_json::to_vec(b).unwrap_or_default());
        let mut head = String::with_capacity(256);
        let _ = write!(
            head,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n",
            self.http.addr
        );
        if let Some(t) = token {
            let _ = write!(head, "Authorization: Bearer {t}\r\n");
        }
        if let Some(k) = key {
            let _ = write!(head, "Idempotency-Key: {k}\r\n");
        }
        match &payload {
            Some(p) => {
                let _ = write!(
                    head,
                    "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    p.len()
                );
            }
            None if method == Method::Post => head.push_str("Content-Length: 0\r\n\r\n"),
            None => head.push_str("\r\n"),
        }
        let mut request = head.into_bytes();
        if let Some(p) = payload {
            request.extend_from_slice(&p);
        }
        let attempt = async {
            // A pooled connection the server has closed meanwhile fails before any
            // response byte: the request goes again on a new connection.
            let pooled = self
                .http
                .idle
                .lock()
                .map(|mut idle| idle.pop())
                .ok()
                .flatten();
            if let Some(mut conn) = pooled {
                match conn.round_trip(&request).await {
                    Ok((resp, keep)) => {
                        if keep {
                            self.put_back(conn);
                        }
                        return Ok(resp);
                    }
                    Err(Fail::Broken(e)) => return Err(e),
                    Err(Fail::Stale(_)) => {}
                }
            }
            let mut conn = Conn::open(&self.http.addr).await?;
            match conn.round_trip(&request).await {
                Ok((resp, keep)) => {
                    if keep {
                        self.put_back(conn);
                    }
                    Ok(resp)
                }
                Err(Fail::Broken(e) | Fail::Stale(e)) => Err(e),
            }
        };
        match tokio::time::timeout(Duration::from_secs(30), attempt).await {
            Ok(r) => r,
            Err(_) => Err("transport: timed out after 30 s".into()),
        }
    }

    pub fn put_back(&self, conn: Conn) {
        if let Ok(mut idle) = self.http.idle.lock() {
            idle.push(conn);
        }
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> Result<Resp, String> {
        self.send(Method::Get, path, token, None, None).await
    }

    /// A keyed POST with a fresh Idempotency-Key.
    pub async fn post_keyed(&self, path: &str, token: &str, body: &Value) -> Result<Resp, String> {
        let key = uuid::Uuid::new_v4().to_string();
        self.send(Method::Post, path, Some(token), Some(&key), Some(body))
            .await
    }

    /// Seeding helper: the request must answer `expect`; returns the JSON body.
    pub async fn must(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        keyed: bool,
        body: Option<Value>,
        expect: u16,
    ) -> Result<Value, String> {
        let key = keyed.then(|| uuid::Uuid::new_v4().to_string());
        let r = self
            .send(method, path, token, key.as_deref(), body.as_ref())
            .await?;
        if r.status != expect {
            return Err(format!(
                "{method} {path}: expected {expect}, got {}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        }
        Ok(r.json())
    }

    pub async fn register(&self, name: &str) -> Result<Agent, String> {
        let v = self
            .must(
                Method::Post,
                "/api/v1/contributors",
                None,
                false,
                Some(json!({"type": "AGENT", "name": name, "model_claim": "orbit-bench"})),
                201,
            )
            .await?;
        Ok(Agent {
            id: v["data"]["contributor"]["id"]
                .as_i64()
                .ok_or("no contributor id")?,
            token: v["data"]["token"].as_str().ok_or("no token")?.to_owned(),
        })
    }

    pub async fn create_orbit(&self, owner: &Agent, slug: &str) -> Result<i64, String> {
        let v = self
            .must(
                Method::Post,
                "/api/v1/orbits",
                Some(&owner.token),
                false,
                Some(json!({"slug": slug, "name": slug})),
                201,
            )
            .await?;
        v["data"]["id"].as_i64().ok_or_else(|| "no orbit id".into())
    }

    pub async fn join(&self, agent: &Agent, orbit: i64) -> Result<(), String> {
        self.must(
            Method::Post,
            &format!("/api/v1/orbits/{orbit}/join"),
            Some(&agent.token),
            false,
            None,
            201,
        )
        .await
        .map(|_| ())
    }

    pub async fn create_task(&self, who: &Agent, orbit: i64, title: &str) -> Result<i64, String> {
        let v = self
            .must(
                Method::Post,
                &format!("/api/v1/orbits/{orbit}/tasks"),
                Some(&who.token),
                true,
                Some(json!({"title": title})),
                201,
            )
            .await?;
        v["data"]["id"].as_i64().ok_or_else(|| "no task id".into())
    }

    /// `host:port` of the service.
    pub fn addr(&self) -> &str {
        &self.http.addr
    }

    /// `(hits, misses)` from /metrics, when the service exposes them.
    pub async fn token_cache_counters(&self) -> Option<(f64, f64)> {
        let r = self.get("/metrics", None).await.ok()?;
        if r.status != 200 {
            return None;
        }
        let text = String::from_utf8_lossy(&r.body).into_owned();
        let read = |name: &str| -> Option<f64> {
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .find(|l| l.split(['{', ' ']).next() == Some(name))
                .and_then(|l| l.split_whitespace().last())
                .and_then(|v| v.parse::<f64>().ok())
        };
        Some((
            read("orbit_token_cache_hits_total")?,
            read("orbit_token_cache_misses_total")?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::Chunks;

    /// A chunked body decodes the same however its bytes are split on arrival,
    /// and the decoder stops after the last chunk's final CRLF.
    #[test]
    fn chunks_decode_across_any_split() {
        let wire: &[u8] =
            b"6\r\n: ok\n\n\r\n19;x=y\r\nid: 7\nevent: e\ndata: {}\n\n\r\n0\r\n\r\nNEXT";
        let body = b": ok\n\nid: 7\nevent: e\ndata: {}\n\n".to_vec();
        for split in 0..wire.len() {
            let (mut chunks, mut out) = (Chunks::default(), Vec::new());
            let mut raw = wire[..split].to_vec();
            let used = chunks.decode(&raw, &mut out).unwrap();
            raw.drain(..used);
            raw.extend_from_slice(&wire[split..]);
            let used = chunks.decode(&raw, &mut out).unwrap();
            assert!(chunks.ended(), "split at {split}");
            assert_eq!(out, body, "split at {split}");
            assert_eq!(&raw[used..], b"NEXT", "split at {split}");
        }
        assert!(Chunks::default()
            .decode(b"zz\r\n", &mut Vec::new())
            .is_err());
        assert!(Chunks::default()
            .decode(b"1\r\nab\r\n", &mut Vec::new())
            .is_err());
    }
}
