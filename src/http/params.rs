//! Path and query parameters as handlers take them ([`Path`], [`Query`]): judged
//! before the handler runs, since the handler needs them, but a 422 of theirs never
//! hides the contract's 401 (section 2: 401 → 404 → 403 → 422). A parameter that
//! does not parse, on a request without the token its route needs or with a token
//! that is not valid, is answered 401 ([`unauthorized_first`]). (A 404 or 403 still
//! comes after such a 422: which object a bad path parameter names cannot be known,
//! and a bad query is refused before the path's object is looked up;
//! docs/IDEMPOTENCY.md.)

use std::rc::Rc;

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::{web, FromRequest, HttpMessage, HttpRequest};
use futures_util::future::LocalBoxFuture;
use serde::de::DeserializeOwned;
use tokio::sync::OnceCell;

use crate::domain::auth::Bearer;
use crate::domain::write::public_read;
use crate::error::{ApiError, FieldErrors};
use crate::http::json::{parse_query_partly, GIVEN_TWICE};
use crate::http::state::AppState;
use crate::model::Validate;

/// What the route table knows of the route a request is for, set as app data by the
/// app builder (this module sits below the route table): its documented query
/// parameters, and whether it needs a token (`routes::KnownRoutes`, from the
/// OpenAPI document's `security`).
#[derive(Clone, Copy)]
pub struct RouteFacts {
    pub documented_query: fn(&HttpRequest) -> Vec<String>,
    pub token_required: fn(&HttpRequest) -> bool,
}

/// `invalid` (a 422 of a parameter), unless the request's caller is the contract's
/// 401 first: no token on a route that needs one, or a token that is not valid
/// (unknown, revoked: checked as a public read checks it, `write::public_read`, in
/// one read that only a request refused anyway pays). A malformed `Authorization`
/// header never gets here: `Bearer`, the handlers' first extractor, refused it.
/// Any other failure of that read keeps the 422. The path's and the query's
/// extractors ask once between them (the verdict is kept in the request).
pub async fn unauthorized_first(req: &HttpRequest, invalid: ApiError) -> ApiError {
    let verdict = {
        let mut extensions = req.extensions_mut();
        extensions
            .get_or_insert_with(|| Verdict(Rc::new(OnceCell::new())))
            .0
            .clone()
    };
    let unauthorized = verdict.get_or_init(|| caller_refused(req)).await;
    unauthorized.clone().unwrap_or(invalid)
}

/// The 401 of [`unauthorized_first`], once per request.
#[derive(Clone)]
struct Verdict(Rc<OnceCell<Option<ApiError>>>);

async fn caller_refused(req: &HttpRequest) -> Option<ApiError> {
    let bearer = match Bearer::extract(req).await {
        Ok(bearer) => bearer,
        Err(unauthorized) => return Some(unauthorized),
    };
    if !bearer.is_present() {
        let required = req
            .app_data::<RouteFacts>()
            .is_some_and(|facts| (facts.token_required)(req));
        return required.then(Bearer::missing);
    }
    let state = req.app_data::<web::Data<AppState>>()?;
    match public_read(state, bearer, |_| Ok(())).await {
        Err(refused) if refused.status == StatusCode::UNAUTHORIZED => Some(refused),
        _ => None,
    }
}

/// A route's path parameters (as `web::Path`), or 422 `invalid_path` in plain words
/// (contract section 17, not the deserializer's) after [`unauthorized_first`].
pub struct Path<T>(T);

impl<T> Path<T> {
    pub fn into_inner(self) -> T {
        self.0
    }
}

/// The path parameter that is not a positive number below 2^63 written in plain
/// digits, if any: every path parameter but `orbit` (an id or a slug) is one (an
/// id, or a revision's `n`), as the OpenAPI document says (`minimum: 1`) and as the
/// MCP tools read their ids, so `/tasks/0` is the same 422 as `get_task
/// {"task_id": 0}`; and one resource has one URL ([`crate::model::plain_id`]):
/// `/tasks/01` and `/tasks/+1` are refused, not task 1.
fn bad_number(req: &HttpRequest) -> Option<(&str, &str)> {
    req.match_info()
        .iter()
        .find(|(name, value)| *name != "orbit" && crate::model::plain_id(value).is_none())
}

/// The 422 of a path parameter that is no plain positive id ([`bad_number`]).
fn invalid_path(req: &HttpRequest) -> ApiError {
    let message = bad_number(req)
        .map(|(name, value)| {
            format!(
                "`{name}` in the path must be a positive whole number below 2^63 in plain \
                 digits, not {value:?}."
            )
        })
        .unwrap_or_else(|| {
            "A path parameter must be a positive whole number below 2^63 in plain digits.".into()
        });
    ApiError::invalid("invalid_path", message)
}

impl<T: DeserializeOwned + 'static> FromRequest for Path<T> {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            match web::Path::<T>::extract(&req).await {
                Ok(path) if bad_number(&req).is_none() => Ok(Path(path.into_inner())),
                _ => Err(unauthorized_first(&req, invalid_path(&req)).await),
            }
        })
    }
}

/// A route's query string, parsed and judged (`T`'s [`Validate`]: ranges, lengths)
/// at once: every bad parameter is in one 422 `validation_failed` (after
/// [`unauthorized_first`]), a value's range problem beside another's type
/// problem, filed under its name only when it is a documented parameter of the
/// route ([`RouteFacts`]), else under `query`: never a name the client made up.
/// Derefs to `T`.
pub struct Query<T>(pub T);

impl<T> Query<T> {
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> std::ops::Deref for Query<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: DeserializeOwned + Validate + 'static> FromRequest for Query<T> {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let (parsed, mut problems) = parse_query_partly::<T>(req.query_string());
            if let Some(parsed) = &parsed {
                // The values that parsed are judged too; a parameter with a problem
                // of its value already (or a stand-in) is not judged again. One given
                // twice is: its first value is the one parsed.
                let mut judged = FieldErrors::default();
                parsed.validate(&mut judged);
                for (field, words) in judged.into_inner() {
                    if !problems
                        .iter()
                        .any(|(p, w)| *p == field && w != GIVEN_TWICE)
                    {
                        problems.extend(words.into_iter().map(|w| (field.clone(), w)));
                    }
                }
            }
            if let (Some(parsed), true) = (parsed, problems.is_empty()) {
                return Ok(Query(parsed));
            }
            let documented = req
                .app_data::<RouteFacts>()
                .map(|facts| (facts.documented_query)(&req))
                .unwrap_or_default();
            let mut errors = FieldErrors::default();
            for (param, words) in problems {
                let field = if documented.contains(&param) {
                    param.as_str()
                } else {
                    "query"
                };
                errors.add(field, words);
            }
            Err(unauthorized_first(&req, errors.into_error()).await)
        })
    }
}
