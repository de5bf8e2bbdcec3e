//! Artifacts: small stored files (contract section 6).
//!
//! The bytes are untrusted. They are served so that a browser can never run them on
//! this origin: always as a download (`Content-Disposition: attachment`), never
//! sniffed (`X-Content-Type-Options: nosniff`), and sandboxed should they be opened
//! anyway (`Content-Security-Policy: sandbox`). The strong `ETag` is the SHA-256 of
//! the bytes, so `If-None-Match` revalidation costs no transfer.

use actix_web::http::header::{self, HeaderValue};
use actix_web::{get, post, web, HttpRequest, HttpResponse};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

use crate::db::TxResult;
use crate::domain::access;
use crate::domain::auth::{Bearer, Caller};
use crate::domain::idempotency::{Gate, IdemHeader, IdempotencyKeyRequired, Operation};
use crate::domain::revision::Change;
use crate::error::{ApiError, ApiResult, FieldErrors};
use crate::http::api::public_read;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{ok_json, page_json, write, Reply, State};
use crate::http::json::{Body, Validate};
use crate::model::verbatim;
use crate::model::{PageMeta, PageParams};
use crate::store::artifacts::{self as store, Artifact};

#[derive(Serialize, ToSchema)]
pub struct ArtifactData {
    pub data: Artifact,
}

#[derive(Serialize, ToSchema)]
pub struct ArtifactPage {
    pub data: Vec<Artifact>,
    pub meta: PageMeta,
}

/// The raw bytes of an artifact.
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct ArtifactBytes(pub Vec<u8>);

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
}

impl Validate for CreateArtifact {
    fn validate(&self, e: &mut FieldErrors) {
        verbatim::text(e, "name", &self.name, 1, 200);
        if !is_media_type(&self.media_type) {
            e.add(
                "media_type",
                "must be a media type such as `application/octet-stream` or \
                 `text/plain; charset=utf-8` (at most 200 characters)",
            );
        }
        if decode(&self.content_base64).is_none() {
            e.add("content_base64", "must be standard base64 with padding");
        }
    }
}

fn decode(b64: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

/// RFC 6838 restricted-name: 1..127 characters, alphanumeric first.
fn is_restricted_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphanumeric())
        && s.len() <= 127
        && bytes.all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
}

/// RFC 9110 token.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn is_quoted(s: &str) -> bool {
    s.len() >= 2
        && s.starts_with('"')
        && s.ends_with('"')
        && s[1..s.len() - 1]
            .bytes()
            .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
}

/// `type/subtype` plus optional `; name=value` parameters, at most 200 characters,
/// all of it usable as a `Content-Type` header value as stored.
pub fn is_media_type(s: &str) -> bool {
    if s.len() > 200 {
        return false;
    }
    let mut parts = s.split(';');
    let essence = parts.next().unwrap_or("");
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    is_restricted_name(kind)
        && is_restricted_name(subtype)
        && parts.all(|p| {
            let p = p.trim_start_matches([' ', '\t']);
            matches!(p.split_once('='), Some((name, value))
                if is_token(name) && (is_token(value) || is_quoted(value)))
        })
}

/// The content decoded and hashed, once, outside the transaction (which may be
/// retried); `None` for a body that does not check.
pub fn decoded(body: &Body<CreateArtifact>) -> Option<(Vec<u8>, String)> {
    body.check()
        .ok()
        .and_then(|v| decode(&v.content_base64))
        .map(|content| {
            let sha256 = hex::encode(Sha256::digest(&content));
            (content, sha256)
        })
}

pub static CREATE_ARTIFACT: Operation =
    Operation::required("POST", "/api/v1/orbits/{orbit}/artifacts");

/// Store an artifact in an orbit (members only).
///
/// `size_bytes` is the decoded size and `sha256` the lowercase hex SHA-256 of the
/// decoded bytes. Invalid base64 or media type → 422.
#[utoipa::path(
    tag = "Artifacts",
    params(("orbit" = String, Path, description = "Orbit id or slug."), IdempotencyKeyRequired),
    request_body = CreateArtifact,
    security(("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 201, body = ArtifactData), WriteErrors),
)]
#[post("/orbits/{orbit}/artifacts")]
pub async fn create_artifact(
    state: State,
    bearer: Bearer,
    key: IdemHeader,
    path: web::Path<String>,
    body: Body<CreateArtifact>,
) -> ApiResult<HttpResponse> {
    let reference = path.into_inner();
    let canonical = body.canonical.clone();
    let decoded = decoded(&body);
    write(
        &state,
        bearer,
        key,
        &CREATE_ARTIFACT,
        canonical,
        move |conn, caller, gate| create(conn, caller, gate, &reference, &body, &decoded),
    )
    .await
}

/// Storing an artifact, inside `domain::write::run`'s transaction (REST and MCP). `decoded` is [`decoded`]'s answer.
pub fn create(
    conn: &mut diesel::PgConnection,
    caller: &Caller,
    gate: &mut Gate,
    reference: &str,
    body: &Body<CreateArtifact>,
    decoded: &Option<(Vec<u8>, String)>,
) -> TxResult<Reply> {
    let orbit = access::resolve(conn, reference)?;
    access::require_member(conn, orbit.id, caller.id())?;
    let value = body.check()?;
    let (content, sha256) = decoded.as_ref().ok_or(ApiError::internal())?;
    let size = content.len() as i64;
    if let Some(stored) = gate.claim(conn, &[orbit.id])? {
        return Ok(Reply::replayed(stored));
    }
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
    let mut out = store::artifact(conn, id)?.ok_or(ApiError::internal())?;
    let rev = gate.record(
        orbit.id,
        caller.id(),
        Change {
            kind: "artifact.created",
            entity_type: "artifact",
            entity_id: id,
            task_id: None,
            summary: format!("artifact {id} stored ({size} bytes, sha256 {sha256})"),
        },
    )?;
    out.orbit_revision = Some(rev);
    Reply::created(&out, orbit.id)
}

/// List an orbit's artifacts (metadata), ascending by id.
#[utoipa::path(
    tag = "Artifacts",
    params(("orbit" = String, Path, description = "Orbit id or slug."), PageParams),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = ArtifactPage), ReadErrors),
)]
#[get("/orbits/{orbit}/artifacts")]
pub async fn list_artifacts(
    state: State,
    bearer: Bearer,
    path: web::Path<String>,
    query: crate::http::json::Query<PageParams>,
) -> ApiResult<HttpResponse> {
    let cursor = query.into_inner().checked()?;
    let reference = path.into_inner();
    let rows = public_read(&state, bearer, move |conn| page(conn, &reference, cursor)).await?;
    page_json(&cursor.page(rows, |a| a.id))
}

/// Read an artifact's metadata.
#[utoipa::path(
    tag = "Artifacts",
    params(("artifact" = i64, Path, minimum = 1)),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses((status = 200, body = ArtifactData), ReadErrors),
)]
#[get("/artifacts/{artifact}")]
pub async fn get_artifact(
    state: State,
    bearer: Bearer,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    let artifact = public_read(&state, bearer, move |conn| read(conn, id)).await?;
    ok_json(&artifact)
}

/// True when an `If-None-Match` value matches `etag` (weak comparison, RFC 9110).
fn none_match(header: &str, etag: &str) -> bool {
    header
        .split(',')
        .map(str::trim)
        .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
}

/// `attachment` with an ASCII fallback name and the exact name in RFC 8187 form.
/// Characters never put in a download's file name: controls (C0, DEL, C1), bidi
/// controls such as U+202E, which make `evil\u{202E}txt.exe` display as
/// `evilexe.txt`, other invisible format characters, and line separators.
fn is_hidden_or_control(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00AD}' | '\u{061C}' | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{E0000}'..='\u{E007F}')
}

fn content_disposition(name: &str) -> String {
    let name: String = name.chars().filter(|c| !is_hidden_or_control(*c)).collect();
    let name = if name.trim().is_empty() {
        "artifact".to_owned()
    } else {
        name
    };
    let fallback: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || " ._()-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut encoded = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}")
}

/// No other site may embed an artifact (`<script src>`, `<img>`): CORP
/// `same-origin` (issue 26, finding 6).
const CORP_SAME_ORIGIN: (&str, &str) = ("cross-origin-resource-policy", "same-origin");

/// Download an artifact's bytes.
///
/// `Content-Type` is the artifact's `media_type`; the response is always a download
/// (`Content-Disposition: attachment`, the file name without control or bidi
/// characters) with `X-Content-Type-Options: nosniff`,
/// `Content-Security-Policy: sandbox` and `Cross-Origin-Resource-Policy: same-origin`. `ETag` is the quoted SHA-256; a matching
/// `If-None-Match` answers 304 without the bytes.
#[utoipa::path(
    tag = "Artifacts",
    params(
        ("artifact" = i64, Path, minimum = 1),
        ("If-None-Match" = Option<String>, Header, description = "ETags you hold; a match answers 304."),
    ),
    security((), ("ContributorToken" = []), ("AgentToken" = [])),
    responses(
        (status = 200, description = "The bytes, with Content-Type = the artifact's media_type.",
            content_type = "*/*", body = ArtifactBytes,
            headers(
                ("ETag" = String, description = "The quoted SHA-256 of the bytes."),
                ("Content-Disposition" = String, description = "Always `attachment`."),
                ("X-Content-Type-Options" = String, description = "`nosniff`."),
                ("Content-Security-Policy" = String, description = "`sandbox`."),
            )),
        (status = 304, description = "Not modified: the `If-None-Match` ETag matches.",
            headers(("ETag" = String, description = "The quoted SHA-256 of the bytes."))),
        ReadErrors,
    ),
)]
#[get("/artifacts/{artifact}/content")]
pub async fn get_artifact_content(
    state: State,
    bearer: Bearer,
    req: HttpRequest,
    path: web::Path<i64>,
) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    let if_none_match = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (head, bytes) = public_read(&state, bearer, move |conn| {
        let head = store::content_head(conn, id)?.ok_or_else(|| ApiError::not_found("Artifact"))?;
        let etag = format!("\"{}\"", head.sha256);
        if if_none_match.is_some_and(|h| none_match(&h, &etag)) {
            return Ok((head, None));
        }
        let bytes = store::content(conn, id)?;
        Ok((head, Some(bytes)))
    })
    .await?;
    let etag = format!("\"{}\"", head.sha256);
    let Some(bytes) = bytes else {
        return Ok(HttpResponse::NotModified()
            .insert_header(CORP_SAME_ORIGIN)
            .insert_header((header::ETAG, etag))
            .insert_header((header::CACHE_CONTROL, "no-cache"))
            .finish());
    };
    let content_type = HeaderValue::from_str(&head.media_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, content_type))
        .insert_header((header::CONTENT_DISPOSITION, content_disposition(&head.name)))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::CONTENT_SECURITY_POLICY, "sandbox"))
        .insert_header(CORP_SAME_ORIGIN)
        .insert_header((header::ETAG, etag))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(bytes))
}

/// A page of an orbit's artifacts (metadata; REST and MCP).
pub fn page(
    conn: &mut diesel::PgConnection,
    reference: &str,
    cursor: crate::model::Cursor,
) -> TxResult<Vec<Artifact>> {
    let orbit = access::resolve(conn, reference)?;
    Ok(store::artifacts_of_orbit(conn, orbit.id, cursor)?)
}

/// An artifact's metadata (REST and MCP).
pub fn read(conn: &mut diesel::PgConnection, id: i64) -> TxResult<Artifact> {
    store::artifact(conn, id)?.ok_or_else(|| ApiError::not_found("Artifact").into())
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
            &format!("a/{}", "b".repeat(199)),
        ] {
            assert!(!is_media_type(bad), "{bad}");
        }
    }

    #[test]
    fn if_none_match_uses_weak_comparison_and_lists() {
        let etag = "\"abc\"";
        assert!(none_match("\"abc\"", etag));
        assert!(none_match("W/\"abc\"", etag));
        assert!(none_match("\"x\", \"abc\"", etag));
        assert!(none_match("*", etag));
        assert!(!none_match("\"abcd\"", etag));
        assert!(!none_match("abc", etag));
    }

    #[test]
    fn content_disposition_is_attachment_with_a_safe_name() {
        assert_eq!(
            content_disposition("a\"b;é.txt"),
            "attachment; filename=\"a_b__.txt\"; filename*=UTF-8''a%22b%3B%C3%A9.txt"
        );
        assert_eq!(
            content_disposition("evil\u{202E}txt.exe\u{0007}\u{2066}"),
            "attachment; filename=\"eviltxt.exe\"; filename*=UTF-8''eviltxt.exe"
        );
        assert!(content_disposition("\u{202E}\n").contains("filename=\"artifact\""));
    }
}
