//! Artifacts: small stored files (contract section 6): the body's rules (media
//! type, base64), the unit of work and the reads behind `http::api::artifacts` and
//! the MCP tools. How the bytes are served is the handler's (`http::api::artifacts`).

use base64::Engine as _;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use crate::db::TxResult;
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{Gate, Operation};
use crate::domain::revision::Change;
use crate::domain::write::{claim, public_page, public_read, Reply, Unit};
use crate::domain::Core;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::model::{Page, PageParams, Validate};
use crate::store::artifacts::{self as store, Artifact, ContentHead};

/// Body of `POST /api/v1/orbits/{orbit}/artifacts`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateArtifact {
    #[schema(min_length = 1, max_length = 200)]
    pub name: String,
    /// `type/subtype` with optional `; name=value` parameters (RFC 6838 names), at
    /// most 200 characters, e.g. `text/plain; charset=utf-8`.
    #[schema(min_length = 3, max_length = 200, example = "application/pdf")]
    pub media_type: String,
    /// The content in standard base64 (RFC 4648 section 4, with padding). The whole
    /// request must fit in 256 KiB, so the content can be at most about 190 KiB.
    #[schema(format = Byte)]
    pub content_base64: String,
    /// The content decoded, once: by the check, kept for the store.
    #[serde(skip)]
    content: std::sync::OnceLock<Option<Vec<u8>>>,
}

impl CreateArtifact {
    /// The content's bytes; `None` when it is no standard base64 with padding.
    fn content(&self) -> Option<&[u8]> {
        self.content
            .get_or_init(|| {
                base64::engine::general_purpose::STANDARD
                    .decode(&self.content_base64)
                    .ok()
            })
            .as_deref()
    }
}

impl Validate for CreateArtifact {
    fn validate(&self, e: &mut FieldErrors) {
        e.text("name", &self.name, 1, 200);
        if !is_media_type(&self.media_type) {
            e.add(
                "media_type",
                "must be a media type such as `application/octet-stream` or \
                 `text/plain; charset=utf-8` (at most 200 characters)",
            );
        }
        if self.content().is_none() {
            e.add("content_base64", "must be standard base64 with padding");
        }
    }
}

/// RFC 6838 restricted-name: 1..127 characters, alphanumeric first.
fn is_restricted_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphanumeric())
        && s.len() <= 127
        && bytes.all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
}

/// RFC 9110 tchar.
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// RFC 9110 token.
fn is_token(s: &str) -> bool {
    !s.is_empty() && s.chars().all(is_token_char)
}

/// The length of the RFC 9110 quoted-string `s` starts with (its quotes included),
/// ASCII only: `None` when `s` does not start with one.
fn quoted_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let text = |c: u8| c == b'\t' || (b' '..=b'~').contains(&c);
    if b.first() != Some(&b'"') {
        return None;
    }
    let mut i = 1;
    loop {
        match *b.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' if text(*b.get(i + 1)?) => i += 2,
            c if c != b'\\' && text(c) => i += 1,
            _ => return None,
        }
    }
}

/// `type/subtype` plus optional parameters as RFC 9110 (section 8.3.1) writes them
/// (`*( OWS ";" OWS [ name "=" ( token / quoted-string ) ] )`), ASCII only, at
/// most 200 characters: usable as a `Content-Type` header value as stored.
pub fn is_media_type(s: &str) -> bool {
    const OWS: [char; 2] = [' ', '\t'];
    if s.len() > 200 {
        return false;
    }
    let Some((kind, rest)) = s.split_once('/') else {
        return false;
    };
    let end = rest.find([';', ' ', '\t']).unwrap_or(rest.len());
    let (subtype, mut params) = rest.split_at(end);
    if !is_restricted_name(kind) || !is_restricted_name(subtype) {
        return false;
    }
    while !params.is_empty() {
        let Some(next) = params.trim_start_matches(OWS).strip_prefix(';') else {
            return false;
        };
        params = next.trim_start_matches(OWS);
        if params.is_empty() || params.starts_with(';') {
            continue; // an empty parameter
        }
        let Some((name, value)) = params.split_once('=') else {
            return false;
        };
        let len = if value.starts_with('"') {
            quoted_len(value)
        } else {
            Some(value.len() - value.trim_start_matches(is_token_char).len())
        };
        match len {
            Some(n) if n > 0 && is_token(name) => params = &value[n..],
            _ => return false,
        }
    }
    true
}

/// The content's hash (the content decoded once, by the check), outside the
/// transaction (which may be retried); `None` for a body that does not check.
fn hashed(body: ApiResult<&CreateArtifact>) -> Option<String> {
    body.ok()
        .and_then(|v| v.content())
        .map(|content| hex::encode(Sha256::digest(content)))
}

pub static CREATE_ARTIFACT: Operation =
    Operation::required("POST", "/api/v1/orbits/{orbit}/artifacts");

/// Storing an artifact in the orbit named by `reference` (id or slug), as its REST
/// route and MCP tool run it: the content decoded and hashed once, outside the
/// (retried) transaction ([`hashed`]), then [`create`].
pub fn create_unit(reference: String, body: ApiResult<&CreateArtifact>) -> Unit<CreateArtifact> {
    let sha256 = hashed(body);
    Unit::plain(move |c, who, g, b| create(c, who, g, &reference, b, &sha256))
}

/// Storing an artifact, inside `domain::write::run`'s transaction. `sha256` is
/// [`hashed`]'s answer.
fn create(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    reference: &str,
    body: ApiResult<&CreateArtifact>,
    sha256: &Option<String>,
) -> TxResult<Reply> {
    let orbit = access::member_orbit(conn, reference, caller.id())?;
    let value = body?;
    let content = value.content().ok_or(ApiError::internal())?;
    let sha256 = sha256.as_ref().ok_or(ApiError::internal())?;
    let size = content.len() as i64;
    claim!(gate, conn, &[orbit.id]);
    let id = store::insert(
        conn,
        orbit.id,
        &value.name,
        &value.media_type,
        size,
        sha256,
        content,
        caller.id(),
    )?;
    let mut artifact = store::artifact(conn, id)?.ok_or(ApiError::internal())?;
    artifact.orbit_revision = Some(gate.record(
        orbit.id,
        caller.id(),
        Change {
            kind: "artifact.created",
            entity_type: "artifact",
            entity_id: id,
            task_id: None,
            summary: format!("artifact {id} stored ({size} bytes, sha256 {sha256})"),
        },
    )?);
    Reply::created(&artifact, orbit.id)
}

/// An orbit's artifacts (metadata), ascending by id (REST and MCP).
pub async fn list(
    core: &Core,
    params: PageParams,
    bearer: Bearer,
    reference: String,
) -> ApiResult<Page<Artifact>> {
    let cursor = params.checked()?;
    public_page(
        core,
        bearer,
        cursor,
        |a: &Artifact| a.id,
        move |conn, cursor| {
            let orbit = access::resolve(conn, &reference)?;
            Ok(store::artifacts_of_orbit(conn, orbit.id, cursor)?)
        },
    )
    .await
}

/// An artifact's metadata (REST and MCP).
pub async fn get(core: &Core, bearer: Bearer, id: i64) -> ApiResult<Artifact> {
    public_read(core, bearer, move |conn| {
        store::artifact(conn, id)?.ok_or_else(|| ApiError::not_found("Artifact").into())
    })
    .await
}

/// An artifact's name, media type and hash, and its bytes unless `held` says the
/// caller already holds them (`held` gets the SHA-256 in hex).
pub async fn content(
    core: &Core,
    bearer: Bearer,
    id: i64,
    held: impl FnOnce(&str) -> bool + Send + 'static,
) -> ApiResult<(ContentHead, Option<Vec<u8>>)> {
    public_read(core, bearer, move |conn| {
        let head = store::content_head(conn, id)?.ok_or_else(|| ApiError::not_found("Artifact"))?;
        if held(&head.sha256) {
            return Ok((head, None));
        }
        let bytes = store::content(conn, id)?;
        Ok((head, Some(bytes)))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_are_type_slash_subtype_with_parameters() {
        for ok in [
            "application/octet-stream",
            "text/plain; charset=utf-8",
            "text/plain;charset=\"utf-8\"",
            "application/vnd.api+json",
            "image/svg+xml",
            // RFC 9110 forms a probe found refused (2026-12-07).
            "text/plain; a=\"x;y\"",
            "text/plain; a=\"x\\\"y\"",
            "text/plain ; charset=utf-8",
            "text/plain;",
            "text/plain;;charset=utf-8",
        ] {
            assert!(is_media_type(ok), "{ok}");
        }
        for bad in [
            "",
            "text",
            "text/",
            "/plain",
            "text/plain; charset",
            "text/plain\r\nX-Evil: 1",
            "text/pl ain",
            " text/plain",
            "tëxt/plain",
            "text/plain ",
            "text/plain; a=b c",
            "text/plain; a; b=c",
            "text/plain; a=\"unclosed",
            "text/plain; a=\"x\"y",
            "text/plain; a=\"\\\"",
            "text/plain; =b",
            &format!("a/{}", "b".repeat(199)),
        ] {
            assert!(!is_media_type(bad), "{bad}");
        }
    }
}
