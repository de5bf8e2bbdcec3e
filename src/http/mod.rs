//! The HTTP layer: the route table and OpenAPI root (`routes`), the body extractor
//! (`json`), the path and query extractors (`params`), the middleware in front of
//! every handler (`ratelimit`, `telemetry`) and the rate-limit buckets it applies
//! (`limits`), what every handler shares (`state`), the REST handlers by resource
//! (`api`), the MCP endpoint (`mcp`), the pages for people (`pages`) and whether a
//! request's client is still connected (`peer`). A handler parses, calls one domain
//! function and shapes the answer.

pub mod api;
pub mod json;
pub mod limits;
pub mod mcp;
pub mod pages;
pub mod params;
pub mod peer;
pub mod ratelimit;
pub mod routes;
pub mod state;
pub mod telemetry;
