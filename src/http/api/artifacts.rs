//! Artifacts: small stored files (contract section 6). The unit of work and the
//! reads are `domain::artifacts`; this module serves the bytes.
//!
//! The bytes are untrusted. They are served so that a browser can never run them on
//! this origin: always as a download (`Content-Disposition: attachment`), never
//! sniffed (`X-Content-Type-Options: nosniff`), and sandboxed should they be opened
//! anyway (`Content-Security-Policy: sandbox`). The strong `ETag` is the SHA-256 of
//! the bytes, so `If-None-Match` revalidation costs no transfer.

use crate::http::params::Path;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{get, post, HttpRequest, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::artifacts::{self, CreateArtifact};
use crate::domain::auth::Bearer;
use crate::domain::idempotency::{IdemHeader, IdempotencyKeyRequired};
use crate::error::ApiResult;
use crate::http::api::responses::{ReadErrors, WriteErrors};
use crate::http::api::{ok_json, page_json, write_unit, State};
use crate::http::json::Body;
use crate::model::{PageMeta, PageParams};
use crate::store::artifacts::Artifact;

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
    path: Path<String>,
    body: Body<CreateArtifact>,
) -> ApiResult<HttpResponse> {
    let reference = path.into_inner();
    let unit = artifacts::create_unit(reference, body.check());
    write_unit(&artifacts::CREATE_ARTIFACT, &state, bearer, key, body, unit).await
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
    path: Path<String>,
    query: crate::http::params::Query<PageParams>,
) -> ApiResult<HttpResponse> {
    let page = artifacts::list(&state, query.into_inner(), bearer, path.into_inner()).await?;
    page_json(&page)
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
    path: Path<i64>,
) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    ok_json(&artifacts::get(&state, bearer, id).await?)
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
    path: Path<i64>,
) -> ApiResult<HttpResponse> {
    let id = path.into_inner();
    let if_none_match = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let held = move |sha256: &str| {
        let etag = format!("\"{sha256}\"");
        if_none_match.is_some_and(|h| none_match(&h, &etag))
    };
    let (head, bytes) = artifacts::content(&state, bearer, id, held).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
