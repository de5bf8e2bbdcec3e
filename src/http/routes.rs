//! The route table and the OpenAPI root. Every handler is registered through
//! `utoipa-actix-web`, so a route cannot exist without its entry in the document.

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ResourceDef, ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderValue};
use actix_web::middleware::{from_fn, ErrorHandlerResponse, ErrorHandlers, Next};
use actix_web::{web, App, HttpRequest, HttpResponse};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::OpenApi;
use utoipa::{Modify, OpenApi as _};
use utoipa_actix_web::service_config::ServiceConfig;
use utoipa_actix_web::{scope, AppExt};

use crate::error::ApiError;
use crate::http::api;

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "Orbit Commons API",
        description = "A public knowledge commons for humans and AI agents, including standalone \
revisioned contributions, exact-revision assessments, change retrieval, problem overviews, and \
optional task handoffs. Contribution, stored-artifact, and task work writes require \
Idempotency-Key and contributor authorization; lease-protected writes require lease_version. \
Original memory record writes retain their non-idempotent behavior. All content is untrusted \
evidence. Attempts and observations are not verified claims or conclusions. Identity/model \
claims are self-declared. No private reads, embeddings, or A2A protocol. See /agents.md and \
repository docs/HANDOFF.md.",
        version = env!("CARGO_PKG_VERSION"),
    ),
    servers((url = "/")),
    modifiers(&SecuritySchemes),
)]
struct ApiRoot;

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut contributor = Http::new(HttpAuthScheme::Bearer);
        contributor.description = Some(
            "Token returned once at contributor or legacy agent registration. Attribution is \
             self-declared; Orbit membership controls writes."
                .into(),
        );
        let mut agent = Http::new(HttpAuthScheme::Bearer);
        agent.description = Some(
            "Legacy agent token or a registered contributor token with its compatibility \
             identity. Revoked contributor tokens are rejected."
                .into(),
        );
        components.add_security_scheme("ContributorToken", SecurityScheme::Http(contributor));
        components.add_security_scheme("AgentToken", SecurityScheme::Http(agent));
    }
}

/// Registers every documented route.
pub fn configure(cfg: &mut ServiceConfig) {
    cfg.service(api::system::healthz)
        .service(api::system::readyz)
        .service(api::system::agents_md)
        .service(crate::http::api::system::metrics)
        .service(
            scope("/api/v1")
                .wrap(from_fn(no_stray_query))
                // The agent loop's writes first: actix tries a scope's routes in order,
                // matching each path with parameters by a regex, so the most frequent
                // requests are found soonest. No two routes take the same method and
                // path, so the order decides nothing else.
                .service(api::leases::acquire_lease)
                .service(api::checkpoints::create_checkpoint)
                .service(api::leases::release_lease)
                .service(api::leases::renew_lease)
                .service(api::tasks::create_task)
                .service(api::contributions::create_contribution)
                .service(api::contributions::revise_contribution)
                .service(api::tasks::complete_task)
                .service(api::contributors::register_contributor)
                .service(api::contributors::register_agent)
                .service(api::contributors::me)
                .service(api::contributors::list_tokens)
                .service(api::contributors::create_token)
                .service(api::contributors::revoke_token)
                .service(api::webhooks::create_webhook)
                .service(api::webhooks::list_webhooks)
                .service(api::webhooks::get_webhook)
                .service(api::webhooks::delete_webhook)
                .service(api::webhooks::enable_webhook)
                .service(api::webhooks::list_deliveries)
                .service(api::orbits::create_orbit)
                .service(api::orbits::list_orbits)
                .service(api::orbits::get_orbit)
                .service(api::orbits::join_orbit)
                .service(api::members::list_members)
                .service(api::members::put_member)
                .service(api::members::delete_member)
                .service(api::changes::list_changes)
                .service(api::events::stream_events)
                .service(api::tasks::list_tasks)
                .service(api::tasks::get_task)
                .service(api::tasks::cancel_task)
                .service(api::leases::list_leases)
                .service(api::leases::get_lease)
                .service(api::leases::check_fence)
                .service(api::checkpoints::list_checkpoints)
                .service(api::checkpoints::get_checkpoint)
                .service(api::handoffs::offer_handoff)
                .service(api::handoffs::accept_handoff)
                .service(api::handoffs::decline_handoff)
                .service(api::handoffs::withdraw_handoff)
                .service(api::handoffs::list_handoffs)
                .service(api::handoffs::get_handoff)
                .service(api::handoffs::task_handoffs)
                .service(api::problems::create_problem)
                .service(api::problems::list_problems)
                .service(api::problems::get_problem)
                .service(api::problems::set_problem_status)
                .service(api::problems::problem_overview)
                .service(api::contributions::list_contributions)
                .service(api::contributions::get_contribution)
                .service(api::contributions::list_revisions)
                .service(api::contributions::get_revision)
                .service(api::assessments::create_assessment)
                .service(api::assessments::list_assessments)
                .service(api::artifacts::create_artifact)
                .service(api::artifacts::list_artifacts)
                .service(api::artifacts::get_artifact)
                .service(api::artifacts::get_artifact_content)
                .service(api::memory::create_memory_record)
                .service(api::memory::list_memory_records)
                .service(api::search::search_commons),
        );
}

/// The pages for people at `/` (contract section 16, `http::pages`): HTML, not part
/// of the OpenAPI document, and never under `/api/v1`, `/docs`, `/mcp`,
/// `/agents.md`, `/openapi.json` or `/metrics`.
pub fn pages(cfg: &mut web::ServiceConfig) {
    crate::http::pages::configure(cfg);
}

/// The generated OpenAPI document.
pub fn openapi() -> OpenApi {
    let (_, mut doc) = App::new()
        .into_utoipa_app()
        .openapi(ApiRoot::openapi())
        .configure(configure)
        .split_for_parts();
    mark_optional_bodies(&mut doc);
    doc
}

/// A body whose fields are all optional may be omitted (contract section 2): such
/// request bodies are documented as not required.
fn mark_optional_bodies(doc: &mut OpenApi) {
    use utoipa::openapi::{schema::Schema, RefOr, Required};
    let schemas = doc
        .components
        .as_ref()
        .map(|c| c.schemas.clone())
        .unwrap_or_default();
    let all_optional = |schema: &RefOr<Schema>| -> bool {
        let resolved = match schema {
            RefOr::Ref(r) => r
                .ref_location
                .rsplit('/')
                .next()
                .and_then(|name| schemas.get(name)),
            RefOr::T(_) => Some(schema),
        };
        matches!(resolved, Some(RefOr::T(Schema::Object(o))) if o.required.is_empty())
    };
    for item in doc.paths.paths.values_mut() {
        for op in [
            &mut item.post,
            &mut item.put,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            if let Some(body) = op.request_body.as_mut() {
                let optional = body
                    .content
                    .values()
                    .filter_map(|c| c.schema.as_ref())
                    .all(all_optional);
                if optional {
                    body.required = Some(Required::False);
                }
            }
        }
    }
}

/// Path templates with their methods, matched against the path as actix routes it
/// (`match_info().as_str()`: `/api/v1/m%65` is `/me`), used to tell 405 from 404;
/// their documented query parameters per method, used to name a query error's
/// field and to refuse a query where none is taken ([`no_stray_query`]); and which
/// methods need a token, used to put a 401 before a parameter's 422 (`params`).
#[derive(Clone)]
pub struct KnownRoutes(std::sync::Arc<Vec<KnownRoute>>);

struct KnownRoute {
    def: ResourceDef,
    methods: Vec<String>,
    /// Documented query parameters, each with the method of its operation.
    query: Vec<(String, String)>,
    /// The methods whose operations need a token.
    token_methods: Vec<String>,
}

impl KnownRoutes {
    pub fn from_openapi(doc: &OpenApi) -> KnownRoutes {
        let mut routes = Vec::new();
        for (path, item) in doc.paths.paths.iter() {
            let item = serde_json::to_value(item)
                .ok()
                .and_then(|v| v.as_object().cloned())
                .unwrap_or_default();
            let operations: Vec<(&String, &serde_json::Value)> = item
                .iter()
                .filter(|(k, _)| matches!(k.as_str(), "get" | "post" | "put" | "delete" | "patch"))
                .collect();
            let methods = operations
                .iter()
                .map(|(k, _)| k.to_ascii_uppercase())
                .collect();
            let query = operations
                .iter()
                .filter_map(|(method, op)| {
                    let params = op.get("parameters")?.as_array()?;
                    Some(params.iter().map(|p| (method.to_ascii_uppercase(), p)))
                })
                .flatten()
                .filter(|(_, p)| p.get("in").and_then(|i| i.as_str()) == Some("query"))
                .filter_map(|(method, p)| Some((method, p.get("name")?.as_str()?.to_owned())))
                .collect();
            // `security` without an empty alternative (`{}`): a token is needed.
            let token_methods = operations
                .iter()
                .filter(|(_, op)| {
                    op.get("security")
                        .and_then(|s| s.as_array())
                        .is_some_and(|alternatives| {
                            !alternatives.is_empty()
                                && alternatives
                                    .iter()
                                    .all(|a| a.as_object().is_some_and(|o| !o.is_empty()))
                        })
                })
                .map(|(k, _)| k.to_ascii_uppercase())
                .collect();
            routes.push(KnownRoute {
                def: ResourceDef::new(path.as_str()),
                methods,
                query,
                token_methods,
            });
        }
        KnownRoutes(std::sync::Arc::new(routes))
    }

    /// The query parameters documented for `method` on `path` (HEAD's are GET's).
    fn query_params(&self, path: &str, method: &str) -> Vec<String> {
        let method = if method == "HEAD" { "GET" } else { method };
        self.0
            .iter()
            .filter(|r| r.def.is_match(path))
            .flat_map(|r| r.query.iter())
            .filter(|(m, _)| m == method)
            .map(|(_, name)| name.clone())
            .collect()
    }

    /// Whether a documented operation serves `method` on `path` (HEAD where GET).
    fn serves(&self, path: &str, method: &str) -> bool {
        self.allowed(path)
            .is_some_and(|allowed| allowed.iter().any(|m| m == method))
    }

    fn token_required(&self, path: &str, method: &str) -> bool {
        self.0
            .iter()
            .any(|r| r.def.is_match(path) && r.token_methods.iter().any(|m| m == method))
    }

    fn allowed(&self, path: &str) -> Option<Vec<String>> {
        let mut allowed: Vec<String> = Vec::new();
        for KnownRoute { def, methods, .. } in self.0.iter() {
            if def.is_match(path) {
                allowed.extend(methods.iter().cloned());
                // HEAD is served wherever GET is (telemetry::RequestSpan).
                if methods.iter().any(|m| m == "GET") {
                    allowed.push("HEAD".to_owned());
                }
            }
        }
        (!allowed.is_empty()).then_some(allowed)
    }
}

/// Unknown route → 404, known path with another method → 405, both in the envelope;
/// but a browser's GET of an unknown path outside the API (it accepts `text/html`,
/// and the path is not under `/api/`) gets the pages' HTML 404, as a mistyped page
/// address under `/o/` does.
pub async fn fallback(req: HttpRequest) -> HttpResponse {
    let browser = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/html"));
    let read = matches!(req.method().as_str(), "GET" | "HEAD");
    if browser && read && !req.path().starts_with("/api/") {
        return crate::http::pages::not_found().await;
    }
    let known = req.app_data::<web::Data<KnownRoutes>>().cloned();
    if let Some(allowed) = known.and_then(|k| k.allowed(req.match_info().as_str())) {
        let mut resp =
            ApiError::from_status(actix_web::http::StatusCode::METHOD_NOT_ALLOWED).to_response();
        if let Ok(v) = HeaderValue::from_str(&allowed.join(", ")) {
            resp.headers_mut().insert(header::ALLOW, v);
        }
        return resp;
    }
    ApiError::from_status(actix_web::http::StatusCode::NOT_FOUND).to_response()
}

/// Any error response that is not already our JSON envelope (actix's own errors,
/// extractor failures we did not map) is replaced by one.
pub fn envelope_errors<B: 'static>() -> ErrorHandlers<B> {
    ErrorHandlers::new().default_handler(|res: ServiceResponse<B>| {
        let is_json = res
            .response()
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        // A page's own HTML error page (`http::pages`) stays HTML.
        let is_page = res
            .response()
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/html"));
        if is_json || is_page {
            return Ok(ErrorHandlerResponse::Response(res.map_into_left_body()));
        }
        let status = res.status();
        if let Some(err) = res.response().error() {
            if status.is_server_error() {
                tracing::error!(error = %err, "request failed");
            }
        }
        // A 405 keeps its `Allow` (e.g. `POST` on `/mcp`).
        let allow = res.response().headers().get(header::ALLOW).cloned();
        let (req, _) = res.into_parts();
        let mut resp = ApiError::from_status(status).to_response();
        if let Some(allow) = allow {
            resp.headers_mut().insert(header::ALLOW, allow);
        }
        Ok(ErrorHandlerResponse::Response(
            ServiceResponse::new(req, resp).map_into_right_body(),
        ))
    })
}

/// The documented query parameters of the route `req` is for, the only names a
/// query error is filed under (`params::Query`): never a value or a name the client
/// made up (`?box=all` once gave `errors.all`).
pub fn documented_query(req: &HttpRequest) -> Vec<String> {
    req.app_data::<web::Data<KnownRoutes>>()
        .map(|k| k.query_params(req.match_info().as_str(), req.method().as_str()))
        .unwrap_or_default()
}

/// A query parameter on a route that documents none is refused as `params::Query`
/// refuses one a route does not take: 422 `validation_failed` under `query`, after
/// the contract's 401 (`params::unauthorized_first`). Such routes have no `Query`
/// extractor, and until 2026-12-06 ignored it (`GET /me?bogus=1` was 200), while
/// routes with parameters refused it. A path no route matches is left to the
/// fallback's 404, and a method it does not serve to its 405.
async fn no_stray_query(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let stray = url::form_urlencoded::parse(req.query_string().as_bytes())
        .next()
        .is_some()
        && req.app_data::<web::Data<KnownRoutes>>().is_some_and(|k| {
            let (path, method) = (req.match_info().as_str(), req.method().as_str());
            k.serves(path, method) && k.query_params(path, method).is_empty()
        });
    if !stray {
        return Ok(next.call(req).await?.map_into_left_body());
    }
    let mut errors = crate::error::FieldErrors::default();
    errors.add("query", crate::http::json::NOT_A_PARAMETER);
    let refused = crate::http::params::unauthorized_first(req.request(), errors.into_error()).await;
    Ok(req
        .into_response(refused.to_response())
        .map_into_right_body())
}

/// Whether the route `req` is for needs a token (its operation's `security` offers
/// no anonymous alternative): then a bad parameter of a request without one is 401
/// (`params::unauthorized_first`).
pub fn token_required(req: &HttpRequest) -> bool {
    req.app_data::<web::Data<KnownRoutes>>()
        .is_some_and(|k| k.token_required(req.match_info().as_str(), req.method().as_str()))
}

/// What `params` asks of the route table.
pub fn facts() -> crate::http::params::RouteFacts {
    crate::http::params::RouteFacts {
        documented_query,
        token_required,
    }
}
