//! The pages' static files, compiled into the binary (`include_str!`): one style
//! sheet, one small script for live updates and relative times, and the icon. No
//! CDN, no build step; the CSP allows only these, from this origin.

use actix_web::http::header::{self, HeaderValue};
use actix_web::{web, HttpResponse};

use super::{error_page, secure, PageError};

const CSS: &str = include_str!("assets/pages.css");
const JS: &str = include_str!("assets/live.js");
const ICON: &str = include_str!("assets/icon.svg");

/// `/assets/{name}`.
pub async fn asset(name: web::Path<String>) -> HttpResponse {
    let (body, kind) = match name.as_str() {
        "pages.css" => (CSS, "text/css; charset=utf-8"),
        "live.js" => (JS, "text/javascript; charset=utf-8"),
        "icon.svg" => (ICON, "image/svg+xml"),
        _ => return error_page(PageError::not_found("File")),
    };
    let mut resp = HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, HeaderValue::from_static(kind)))
        // Short: a new binary may change them; revalidation is cheap.
        .insert_header((
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=300"),
        ))
        .body(body);
    secure(resp.headers_mut());
    resp
}
