//! JSON in: [`Body`], the body extractor of every route that takes a body (and of
//! the MCP write tools, through [`Body::from_value`]), and the query parser (its
//! extractor is `params::Query`). The canonical form (RFC 8785) is
//! `model::canonical`'s, re-exported here.
//!
//! `Body<T>` reads at most 256 KiB (413 past that, refused from Content-Length
//! before reading, and the one refusal it answers at once), accepts an absent or
//! empty body as `{}`, requires `application/json` for a non-empty body, rejects
//! unknown fields, validates, and keeps the canonical form of the body as sent for
//! idempotency fingerprints. Every other refusal is kept for the handler's
//! `check()`, after its 401, 404 and 403 (the contract's order).
//!
//! Numbers follow I-JSON (RFC 7493), which RFC 8785 assumes: a number must come
//! back as sent, that is, the double nearest to it, written with the shortest
//! digits that read back as that double (as the canonical form writes it), must be
//! the same decimal value ([`survives_double`]); any other (`9007199254740993`, a
//! decimal with more digits than a double keeps, an overflow or underflow) is
//! refused with 422, so every accepted number is stored and returned as sent, and
//! every number the service returns is one it accepts. serde_json reads numbers
//! correctly rounded (its `float_roundtrip` feature), so the value stored is the
//! double this rule judged. An
//! integral number (`1643.0`) counts as an integer wherever one is expected, as in
//! JSON Schema (issue 26, findings 2 and 10). A key given twice in one object is
//! refused with 422 too: JSON leaves its meaning open. One reading of the text
//! ([`fit_text`]) finds both.
//!
//! [`parse_query`] reads a query string and, like a body, reports every bad
//! parameter at once in plain words (contract section 17); `params::Query` is its
//! extractor.

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{FromRequest, HttpRequest};
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{ApiError, ApiResult, FieldErrors};
pub use crate::model::canonical::canonical_json;
use crate::model::Limits;
pub use crate::model::Validate;

pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// A body parsed and judged, before [`Body`] keeps it (or its refusal).
struct JsonBody<T> {
    value: T,
    /// RFC 8785 canonical form of the body as sent (`{}` when absent).
    canonical: String,
}

fn is_json_content_type(req: &HttpRequest) -> Option<bool> {
    let ct = req.headers().get(header::CONTENT_TYPE)?;
    let ct = ct.to_str().ok()?.to_ascii_lowercase();
    let essence = ct.split(';').next().unwrap_or("").trim().to_owned();
    Some(essence == "application/json" || essence.ends_with("+json"))
}

/// Reads the whole body, enforcing the size limit. A non-empty body in a content
/// coding (`Content-Encoding` other than `identity`) is refused once read (so the
/// size limit and the timeout come first): no coding is decoded, and its bytes are
/// not what they would be taken for.
pub async fn read_body(req: &HttpRequest, payload: &mut Payload) -> ApiResult<Vec<u8>> {
    let body = read_bytes(req, payload).await?;
    let codings = req.headers().get_all(header::CONTENT_ENCODING);
    let coded = codings
        .flat_map(|v| v.to_str().unwrap_or("?").split(','))
        .map(str::trim)
        .any(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"));
    if coded && !body.is_empty() {
        return Err(ApiError::invalid(
            "unsupported_content_encoding",
            "The body is sent in a content coding (Content-Encoding, a compression) this \
             service does not decode. Send it uncompressed, without Content-Encoding.",
        ));
    }
    Ok(body)
}

/// The body's bytes as sent, within the size limit and the client timeout.
async fn read_bytes(req: &HttpRequest, payload: &mut Payload) -> ApiResult<Vec<u8>> {
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
    {
        if len > MAX_BODY_BYTES {
            return Err(ApiError::payload_too_large());
        }
    }
    // The whole body must arrive within the client timeout: actix's own timeout
    // covers only the request head, and a client that stalls in its body would
    // otherwise hold this connection and request forever (issue 10, slow clients).
    let within = req
        .app_data::<actix_web::web::Data<crate::http::state::AppState>>()
        .map(|s| s.config.client_timeout_seconds)
        .unwrap_or(10);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(within);
    let mut body = Vec::new();
    loop {
        let Ok(next) = tokio::time::timeout_at(deadline, payload.next()).await else {
            return Err(ApiError::new(
                actix_web::http::StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "The request body did not arrive in time.",
            ));
        };
        let Some(chunk) = next else {
            break;
        };
        let chunk = chunk.map_err(|e| match e {
            actix_web::error::PayloadError::Overflow => ApiError::payload_too_large(),
            _ => ApiError::invalid("unreadable_body", "The request body could not be read."),
        })?;
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(ApiError::payload_too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The words on a body whose arrays and objects nest more than 127 levels deep:
/// serde_json's own limit, which keeps a hostile body from exhausting the stack.
/// Such a body is valid JSON the service does not read: 422 `validation_failed` on
/// `body` in these words, over MCP a parse error in them (there the whole message
/// counts, so a tool's arguments nest two levels less than a REST body).
pub const TOO_DEEP: &str = "nests arrays and objects more than 127 levels deep";

/// Whether serde_json refused a text for nesting too deep ([`TOO_DEEP`]).
pub fn too_deep(e: &serde_json::Error) -> bool {
    e.to_string().starts_with("recursion limit exceeded")
}

/// Parses raw body bytes into `T`, with the error envelope for every failure.
fn parse_body<T: DeserializeOwned + Validate>(
    content_type_ok: Option<bool>,
    bytes: &[u8],
    limits: &Limits,
) -> ApiResult<JsonBody<T>> {
    let empty = bytes.iter().all(|b| b.is_ascii_whitespace());
    let value: Value = if empty {
        Value::Object(Default::default())
    } else {
        if content_type_ok != Some(true) {
            return Err(ApiError::invalid(
                "unsupported_content_type",
                "The request body must be JSON sent with `Content-Type: application/json`.",
            ));
        }
        let value = serde_json::from_slice(bytes).map_err(|e| {
            if too_deep(&e) {
                return ApiError::field("body", TOO_DEEP);
            }
            // `1e400` is valid JSON that serde_json refuses: the number rule says why.
            if e.to_string().starts_with("number out of range") {
                if let Err(unfit) = fit_text(bytes) {
                    return unfit.into_error();
                }
            }
            ApiError::invalid(
                "malformed_json",
                format!("The body is not valid JSON: {e}."),
            )
        })?;
        if let Err(unfit) = fit_text(bytes) {
            return Err(unfit.into_error());
        }
        value
    };
    parse_value(value, limits)
}

/// A key given twice in one object of a body. JSON leaves such a text's meaning
/// open (RFC 8259: names SHOULD be unique) and serde_json keeps the last value, so
/// a proxy that kept the first would read another request than we do: refused.
#[derive(Debug)]
pub struct DuplicateKey {
    /// The object keys leading to it, from the top (array positions left out), the
    /// repeated key last.
    pub keys: Vec<String>,
}

impl DuplicateKey {
    /// 422 `validation_failed` naming the field at `depth` of the keys (0: the
    /// body's own field), as [`InexactNumber::into_error_at`] does.
    pub fn into_error_at(self, depth: usize) -> ApiError {
        let key: String = self
            .keys
            .last()
            .map(|k| k.chars().take(40).collect())
            .unwrap_or_default();
        ApiError::field(
            &field_at(&self.keys, depth),
            format!("the key {key:?} is given more than once in one object: give each key once"),
        )
    }
}

/// The field a problem found at `keys` (the object keys leading to it) is filed
/// under: the key at `depth` (0: the body's own field), else `body`.
fn field_at(keys: &[String], depth: usize) -> String {
    keys.get(depth)
        .cloned()
        .unwrap_or_else(|| "body".to_owned())
}

/// A number in a body that an IEEE 754 double does not hold exactly.
#[derive(Debug)]
pub struct InexactNumber {
    /// The object keys leading to it, from the top (array positions left out).
    pub keys: Vec<String>,
    /// The number as sent, cut to 40 characters.
    pub text: String,
}

impl InexactNumber {
    pub fn message(&self) -> String {
        format!(
            "the number {} cannot be kept exactly: numbers must come back as sent through an \
             IEEE 754 double (every whole number within ±9007199254740991 and every decimal \
             of 15 significant digits or fewer does; a longer one only when it is the \
             shortest way to write its double, as 10000000000000000 is and \
             9007199254740993 is not); send other values as strings",
            self.text
        )
    }

    /// 422 `validation_failed` naming the field at `depth` of the keys (0: the
    /// body's own field). Only that name is reported: keys below it, inside `state`
    /// say, are content, not schema.
    pub fn into_error_at(self, depth: usize) -> ApiError {
        ApiError::field(&field_at(&self.keys, depth), self.message())
    }

    /// [`InexactNumber::into_error_at`] for a request body.
    pub fn into_error(self) -> ApiError {
        self.into_error_at(0)
    }
}

/// What keeps a valid JSON text from being read as a body: a number that does not
/// come back as sent, or a key given twice in one object.
#[derive(Debug)]
pub enum Unfit {
    Number(InexactNumber),
    Key(DuplicateKey),
}

impl Unfit {
    /// The object keys leading to the problem, from the top.
    pub fn keys(&self) -> &[String] {
        match self {
            Unfit::Number(n) => &n.keys,
            Unfit::Key(k) => &k.keys,
        }
    }

    /// 422 `validation_failed` naming the field at `depth` of the keys.
    pub fn into_error_at(self, depth: usize) -> ApiError {
        match self {
            Unfit::Number(n) => n.into_error_at(depth),
            Unfit::Key(k) => k.into_error_at(depth),
        }
    }

    /// [`Unfit::into_error_at`] for a request body.
    pub fn into_error(self) -> ApiError {
        self.into_error_at(0)
    }
}

/// An object being read by [`fit_text`]: its current key, and the keys seen.
struct OpenObject {
    key: String,
    seen: std::collections::HashSet<String>,
}

/// Reads a JSON text (already known to be valid JSON) once, for the first problem
/// in it: a number token without an exact round trip through an IEEE 754 double
/// ([`survives_double`]), or a key given twice in one object (keys compared as
/// decoded, so `"t\u0069tle"` is `"title"`).
pub fn fit_text(bytes: &[u8]) -> Result<(), Unfit> {
    // One entry per open container: `Some` for an object, `None` for an array;
    // and whether the next string is a key.
    let mut open: Vec<Option<OpenObject>> = Vec::new();
    let path = |open: &[Option<OpenObject>]| -> Vec<String> {
        open.iter().flatten().map(|o| o.key.clone()).collect()
    };
    let mut expect_key = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' => {
                open.push(Some(OpenObject {
                    key: String::new(),
                    seen: Default::default(),
                }));
                expect_key = true;
                i += 1;
            }
            b'[' => {
                open.push(None);
                expect_key = false;
                i += 1;
            }
            b'}' | b']' => {
                open.pop();
                expect_key = false;
                i += 1;
            }
            b',' => {
                expect_key = matches!(open.last(), Some(Some(_)));
                i += 1;
            }
            b':' => {
                expect_key = false;
                i += 1;
            }
            b'"' => {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                if expect_key {
                    if let Some(Some(object)) = open.last_mut() {
                        let key =
                            serde_json::from_slice::<String>(&bytes[start..i.min(bytes.len())])
                                .unwrap_or_default();
                        let first = object.seen.insert(key.clone());
                        object.key = key;
                        if !first {
                            return Err(Unfit::Key(DuplicateKey { keys: path(&open) }));
                        }
                    }
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < bytes.len()
                    && matches!(bytes[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                let text = std::str::from_utf8(&bytes[start..i]).unwrap_or("");
                if !survives_double(text) {
                    return Err(Unfit::Number(InexactNumber {
                        keys: path(&open),
                        text: text.chars().take(40).collect(),
                    }));
                }
            }
            _ => i += 1,
        }
    }
    Ok(())
}

/// Whether the JSON number `text` comes back as sent: the double nearest to it,
/// written as the canonical form writes it (RFC 8785: the shortest digits that
/// read back as that double), is the same decimal value. One rule however the
/// number is written: `1e16` and `10000000000000000` are both kept (and are one
/// canonical form, so one fingerprint), so every number the service returns is
/// one it accepts. (Until 2026-12-06 a number written as an integer also had to
/// lie within ±(2^53−1), so `10000000000000000` was refused while `1e16` was
/// accepted and returned in that spelling.)
pub fn survives_double(text: &str) -> bool {
    // The common case, cheaply: a whole number of up to 15 digits is below 2^53.
    let digits = text.strip_prefix('-').unwrap_or(text);
    if !digits.is_empty() && digits.len() <= 15 && digits.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    let Ok(f) = text.parse::<f64>() else {
        return false;
    };
    if !f.is_finite() {
        return false;
    }
    // Rust prints the shortest digits that round-trip; the number survives when they
    // are the same decimal value as the text.
    decimal(text) == decimal(&format!("{:e}", f))
}

/// A decimal number as (negative, significant digits without leading or trailing
/// zeros, exponent of the last digit); zero is `(false, "", 0)`.
fn decimal(text: &str) -> Option<(bool, String, i64)> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text),
    };
    let (mantissa, exp) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], rest[at + 1..].parse::<i64>().ok()?),
        None => (rest, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: String = format!("{int}{frac}");
    let mut exp = exp.checked_sub(i64::try_from(frac.len()).ok()?)?;
    let trimmed = digits.trim_end_matches('0').len();
    exp = exp.checked_add(i64::try_from(digits.len() - trimmed).ok()?)?;
    digits.truncate(trimmed);
    let digits = digits.trim_start_matches('0').to_owned();
    if digits.is_empty() {
        return Some((false, String::new(), 0));
    }
    Some((negative, digits, exp))
}

/// Integral floats (`1643.0`, `1.6e3`, `1e16`) within the range of an `i64` become
/// integers, so a field typed as an integer accepts them as JSON Schema does; the
/// value is the same number (an integral double below 2^63 converts exactly), and
/// so is its canonical form.
pub fn integral_floats_to_integers(value: &mut Value) {
    match value {
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64() {
                if f.fract() == 0.0 && f.abs() < 9_223_372_036_854_775_808.0 {
                    *n = serde_json::Number::from(f as i64);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_floats_to_integers),
        Value::Object(map) => map.values_mut().for_each(integral_floats_to_integers),
        _ => {}
    }
}

/// Serde's wording for a wrong type or value, in plain words: never a Rust type name
/// (`i64`, `struct CreateTask`) or a parser's phrase reaches a client.
pub fn plain_words(inner: &str) -> String {
    let expected = inner
        .rsplit("expected ")
        .next()
        .unwrap_or("")
        .trim()
        .trim_end_matches('.');
    if let Some(name) = between_backticks(inner, "unknown field `") {
        return format!("{name} is not a known field");
    }
    if between_backticks(inner, "missing field `").is_some() {
        return "is required".to_owned();
    }
    if inner.starts_with("unknown variant `") {
        let choices: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        return if choices.is_empty() {
            "is not one of the allowed values".to_owned()
        } else {
            format!("must be one of {}", choices.join(", "))
        };
    }
    if !inner.starts_with("invalid type")
        && !inner.starts_with("invalid value")
        && !inner.starts_with("invalid length")
    {
        return inner.to_owned();
    }
    let integer = [
        "i64", "u64", "i32", "u32", "i16", "u16", "u8", "i8", "usize", "isize",
    ];
    if integer.contains(&expected) || expected.contains("integer") {
        // A whole number the field's type cannot hold (`invalid value: integer
        // `9223372036854775808`, expected i64`, or an integral float past it).
        if inner.starts_with("invalid value: integer") || integral_float(inner) {
            "is out of range".to_owned()
        } else {
            "must be a whole number".to_owned()
        }
    } else if ["f64", "f32"].contains(&expected) || expected.contains("number") {
        "must be a number".to_owned()
    } else if expected.contains("string") || expected.contains("char") {
        "must be a string".to_owned()
    } else if expected.contains("bool") {
        "must be true or false".to_owned()
    } else if expected.contains("sequence") || expected.contains("array") {
        "must be a list".to_owned()
    } else if expected.starts_with("struct") || expected.contains("map") {
        "must be an object".to_owned()
    } else if expected.contains("variant") || expected.contains("one of") {
        let choices: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        if choices.is_empty() {
            "is not one of the allowed values".to_owned()
        } else {
            format!("must be one of {}", choices.join(", "))
        }
    } else {
        "has the wrong type or value".to_owned()
    }
}

/// Whether serde's `inner` refuses a float that is a whole number (`invalid type:
/// floating point `1e20``): too large for the integer it was read as.
fn integral_float(inner: &str) -> bool {
    between_backticks(inner, "invalid type: floating point `")
        .and_then(|f| f.parse::<f64>().ok())
        .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
}

/// Values tried for a required query parameter that is missing, so that parsing can
/// go on and find the other parameters' problems.
const QUERY_PROBES: [&str; 4] = ["1", "true", "x", ""];

/// Deserializes a query string into `T` and reports EVERY bad parameter at once
/// (serde stops at the first): a parameter that does not fit is recorded and taken
/// out, a required one that is missing is recorded and given a stand-in, and parsing
/// resumes. Each problem is `(parameter, plain words)`; the parameter is what serde
/// was at (the client's own name for an unknown one, empty when it names none), so
/// the caller decides whether it may be named.
pub fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, Vec<(String, String)>> {
    match parse_query_partly(query) {
        (Some(parsed), problems) if problems.is_empty() => Ok(parsed),
        (_, problems) => Err(problems),
    }
}

/// [`parse_query`], with the value the parameters that did parse make (the bad ones
/// left out, a missing required one given a stand-in) beside the problems, so the
/// caller can also judge those values (`params::Query`): `None` when none could be
/// made. A problem always comes with `None` or a value made without it.
pub fn parse_query_partly<T: DeserializeOwned>(query: &str) -> (Option<T>, Vec<(String, String)>) {
    use url::form_urlencoded;
    let mut pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let mut problems: Vec<(String, String)> = Vec::new();
    // A parameter given twice is a problem of its own (serde's words would be
    // "duplicate field"); its first value is read on, so its other problems show too.
    let mut seen = std::collections::BTreeSet::new();
    pairs.retain(|(k, _)| {
        let first = seen.insert(k.clone());
        if !first && !problems.iter().any(|(p, _)| p == k) {
            problems.push((k.clone(), GIVEN_TWICE.to_owned()));
        }
        first
    });
    // Missing parameters that carry a stand-in, with the probe they hold now.
    let mut stand_ins: std::collections::BTreeMap<String, usize> = Default::default();
    for _ in 0..64 {
        let encoded = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&pairs)
            .finish();
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(encoded.as_bytes()));
        let e = match serde_path_to_error::deserialize::<_, T>(de) {
            Ok(parsed) => return (Some(parsed), problems),
            Err(e) => e,
        };
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let top = path.split(['.', '[']).next().unwrap_or("").to_owned();
        if let Some(probe) = stand_ins.get_mut(&top) {
            // Our stand-in does not fit this parameter: try the next one.
            *probe += 1;
            let Some(value) = QUERY_PROBES.get(*probe) else {
                break;
            };
            for (k, v) in pairs.iter_mut() {
                if *k == top {
                    *v = (*value).to_owned();
                }
            }
        } else if let Some(name) = between_backticks(&inner, "missing field `") {
            if stand_ins.contains_key(&name) {
                break;
            }
            problems.push((name.clone(), "is required".to_owned()));
            pairs.push((name.clone(), QUERY_PROBES[0].to_owned()));
            stand_ins.insert(name, 0);
        } else if let Some(name) = between_backticks(&inner, "unknown field `") {
            // Not echoed: the name is the client's. Unknown says all there is to say
            // of it, given twice or not.
            problems.retain(|(p, _)| *p != name);
            problems.push((name.clone(), NOT_A_PARAMETER.to_owned()));
            let before = pairs.len();
            pairs.retain(|(k, _)| *k != name);
            if pairs.len() == before {
                break;
            }
        } else if top.is_empty() || path == "." {
            problems.push((String::new(), query_words(&inner)));
            break;
        } else {
            problems.push((top.clone(), query_words(&inner)));
            let before = pairs.len();
            pairs.retain(|(k, _)| *k != top);
            if pairs.len() == before {
                break;
            }
        }
    }
    if problems.is_empty() {
        problems.push((String::new(), "is not valid for this request".to_owned()));
    }
    (None, problems)
}

/// The words on a query parameter the route does not take.
pub const NOT_A_PARAMETER: &str = "is not a parameter of this route";

/// The words on a query parameter given more than once.
pub const GIVEN_TWICE: &str = "is given more than once: give it once";

/// [`plain_words`] for a query value, which also turns the standard library's parse
/// errors (`invalid digit found in string`) into what the value must be.
fn query_words(inner: &str) -> String {
    if inner.contains("too large to fit") || inner.contains("too small to fit") {
        // A whole number its parameter's type cannot hold, as for a body's.
        "is out of range".to_owned()
    } else if inner.contains("invalid digit") || inner.contains("parse integer") {
        "must be a whole number".to_owned()
    } else if inner.contains("invalid float literal") {
        "must be a number".to_owned()
    } else if inner.contains("`true` or `false`") {
        "must be true or false".to_owned()
    } else {
        plain_words(inner)
    }
}

/// Query-like arguments (an MCP read tool's) into `T`, every problem at once and in
/// plain words, its values' own checks (ranges...) beside its type problems, as for
/// a body or a REST query.
pub fn arguments<T: DeserializeOwned + Validate>(value: Value) -> ApiResult<T> {
    deserialize_all(value, &T::validate)
}

/// The most elements of one list named in one 422; a list with more bad ones is
/// then named as a whole (each named element costs a parse of the body).
const MAX_NAMED_ELEMENTS: usize = 16;

/// Values tried for a required field that is missing or invalid, so that parsing can
/// go on and find the other fields' problems.
const PROBES: [fn() -> Value; 6] = [
    || Value::from(1),
    || Value::from("x"),
    || Value::Bool(false),
    || Value::Array(Vec::new()),
    || Value::Object(serde_json::Map::new()),
    || Value::Null,
];

/// Deserializes `T` from an object and reports EVERY invalid field at once (serde
/// stops at the first): a field with a wrong type is taken out and parsing resumes;
/// a required field that is missing (or was taken out) gets a stand-in value so the
/// fields after it are still checked; an element of a top-level list with a wrong
/// type gets a stand-in in its place, so the list's other elements are checked too
/// (up to [`MAX_NAMED_ELEMENTS`] named); then the type's own checks run on the
/// fields and elements that were valid, a list's own rules where they hold both
/// with its stand-ins and without them. Problems are in plain words
/// (`plain_words`).
fn deserialize_all<T: DeserializeOwned>(
    mut value: Value,
    validate: &dyn Fn(&T, &mut FieldErrors),
) -> ApiResult<T> {
    let mut errors = FieldErrors::default();
    // Top-level fields that carry a stand-in: their own checks are not reported.
    let mut stand_ins: Vec<String> = Vec::new();
    // Elements of top-level lists that carry a stand-in, by list: their own checks
    // are not reported, and the list's own rules are judged with and without them.
    let mut element_stand_ins: std::collections::BTreeMap<String, Vec<usize>> = Default::default();
    // For each stand-in, which probe it holds now.
    let mut probe_of: std::collections::BTreeMap<String, usize> = Default::default();
    for _ in 0..256 {
        let e = match serde_path_to_error::deserialize::<_, T>(&value) {
            Ok(parsed) => {
                if errors.is_empty() {
                    let mut own = FieldErrors::default();
                    validate(&parsed, &mut own);
                    own.finish()?;
                    return Ok(parsed);
                }
                let mut own = FieldErrors::default();
                validate(&parsed, &mut own);
                // A list's own rules (its length, its values together) read the
                // stand-ins as values, and the list without them is not the one
                // sent (`[5]` would be empty): a list's own problem is named when
                // the list reads so both with its stand-ins and without them.
                // (A list that became a stand-in as a whole has no elements of
                // its own left.)
                element_stand_ins.retain(|top, _| !stand_ins.contains(top));
                let mut lists = FieldErrors::default();
                if !element_stand_ins.is_empty() {
                    let mut trimmed = value.clone();
                    for (top, slots) in element_stand_ins.iter_mut() {
                        slots.sort_unstable();
                        if let Some(list) = trimmed.get_mut(top).and_then(Value::as_array_mut) {
                            for &i in slots.iter().rev() {
                                if i < list.len() {
                                    list.remove(i);
                                }
                            }
                        }
                    }
                    if let Ok(without) = serde_path_to_error::deserialize::<_, T>(&trimmed) {
                        validate(&without, &mut lists);
                    }
                }
                let lists = lists.into_inner();
                let own = own.into_inner();
                for (field, problems) in &own {
                    let top = field.split(['.', '[']).next().unwrap_or(field).to_owned();
                    let slots = element_stand_ins.get(&top);
                    let in_stand_in = slots.is_some_and(|slots| {
                        *field == top || element_of(field, &top).is_some_and(|i| slots.contains(&i))
                    });
                    if !stand_ins.contains(&top) && !in_stand_in {
                        for p in problems {
                            errors.add(field, p.clone());
                        }
                    }
                }
                for top in element_stand_ins.keys() {
                    let with = own.get(top).map(Vec::as_slice).unwrap_or_default();
                    for p in lists.get(top).into_iter().flatten() {
                        if with.contains(p) {
                            errors.add(top, p.clone());
                        }
                    }
                }
                return Err(errors.into_error());
            }
            Err(e) => e,
        };
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let top = path.split(['.', '[']).next().unwrap_or("").to_owned();
        let Some(map) = value.as_object_mut() else {
            break;
        };
        // An element of a top-level list that a probe stands in for, or a new
        // problem of one (not a field missing or unknown inside it).
        let element = element_of(&path, &top).filter(|i| {
            element_stand_ins.get(&top).is_some_and(|s| s.contains(i))
                || !(inner.starts_with("missing field `") || inner.starts_with("unknown field `"))
        });
        if let Some(i) = element.filter(|_| !stand_ins.contains(&top)) {
            let slots = element_stand_ins.entry(top.clone()).or_default();
            let full = !slots.contains(&i) && slots.len() >= MAX_NAMED_ELEMENTS;
            if full {
                errors.add(
                    &top,
                    format!("has more than {MAX_NAMED_ELEMENTS} invalid elements"),
                );
            } else if !slots.contains(&i) {
                errors.add(&path, plain_words(&inner));
                slots.push(i);
            }
            // The next probe until one fits; past the last probe, or past
            // `MAX_NAMED_ELEMENTS` elements named, the whole list is the problem.
            let next = probe_of.entry(format!("{top}[{i}]")).or_insert(0);
            let slot = map
                .get_mut(&top)
                .and_then(Value::as_array_mut)
                .and_then(|list| list.get_mut(i));
            match slot {
                Some(slot) if *next < PROBES.len() && !full => {
                    *slot = PROBES[*next]();
                    *next += 1;
                }
                _ => {
                    element_stand_ins.remove(&top);
                    stand_ins.push(top.clone());
                    map.remove(&top);
                }
            }
            continue;
        }
        if let Some(field) = between_backticks(&inner, "missing field `") {
            let full = if path == "." {
                field.clone()
            } else {
                format!("{path}.{field}")
            };
            if path != "." {
                // A nested object misses a field: report it; the whole top-level
                // field gets a stand-in.
                errors.add(&full, "is required");
                if !stand_ins.contains(&top) {
                    stand_ins.push(top.clone());
                }
                let next = probe_of.entry(top.clone()).or_insert(0);
                map.insert(top, PROBES[*next % PROBES.len()]());
                *next += 1;
                continue;
            }
            if !stand_ins.contains(&field) {
                errors.add(&field, "is required");
                stand_ins.push(field.clone());
            }
            let next = probe_of.entry(field.clone()).or_insert(0);
            if *next >= PROBES.len() {
                break;
            }
            map.insert(field, PROBES[*next]());
            *next += 1;
        } else if let Some(field) = between_backticks(&inner, "unknown field `") {
            // Here the path already ends at the unknown field itself.
            let full = if path == "." {
                field.clone()
            } else if path == field || path.ends_with(&format!(".{field}")) {
                path.clone()
            } else {
                format!("{path}.{field}")
            };
            if path == "." || path == field {
                errors.add(&full, "is not a known field");
                map.remove(&field);
            } else {
                errors.add(&full, "is not a known field");
                if !stand_ins.contains(&top) {
                    stand_ins.push(top.clone());
                }
                map.remove(&top);
            }
        } else if path == "." || top.is_empty() {
            errors.add("body", plain_words(&inner));
            break;
        } else if stand_ins.contains(&top) {
            // Our stand-in does not fit this field: one of the values it names (an
            // enum's first variant: `kind`, `verdict`), else the next probe.
            if let Some(variant) = first_variant(&inner).filter(|_| path == top) {
                if map.get(&top) != Some(&Value::String(variant.clone())) {
                    map.insert(top, Value::String(variant));
                    continue;
                }
            }
            let next = probe_of.entry(top.clone()).or_insert(0);
            if *next >= PROBES.len() {
                break;
            }
            map.insert(top, PROBES[*next]());
            *next += 1;
        } else {
            errors.add(&path, plain_words(&inner));
            stand_ins.push(top.clone());
            map.remove(&top);
        }
    }
    if errors.is_empty() {
        errors.add("body", "is not valid for this request");
    }
    Err(errors.into_error())
}

/// The index `i` when `path` (serde_path_to_error's) is `top[i]` or lies inside it.
fn element_of(path: &str, top: &str) -> Option<usize> {
    let rest = path.strip_prefix(top)?.strip_prefix('[')?;
    let (digits, _) = rest.split_once(']')?;
    digits.parse().ok()
}

/// Turns a parsed JSON value into `T` exactly as a request body would be: it must be
/// an object, unknown and missing fields and wrong types are 422 `validation_failed`,
/// then the type's own checks run. Keeps the canonical form for fingerprints.
fn parse_value<T: DeserializeOwned + Validate>(
    mut value: Value,
    limits: &Limits,
) -> ApiResult<JsonBody<T>> {
    if !value.is_object() {
        return Err(ApiError::invalid(
            "malformed_json",
            "The body must be a JSON object.",
        ));
    }
    // A value that did not come as text (MCP arguments) still holds integers
    // exactly when it holds them at all: refuse those a double cannot.
    if let Some(bad) = inexact_integer(&value) {
        return Err(bad.into_error());
    }
    integral_floats_to_integers(&mut value);
    let canonical = canonical_json(&value);
    let parsed: T = deserialize_all(value, &|parsed: &T, errors: &mut FieldErrors| {
        parsed.validate(errors);
        parsed.validate_within(limits, errors);
    })?;
    Ok(JsonBody {
        value: parsed,
        canonical,
    })
}

/// The first number of a parsed value that does not come back as it is
/// ([`survives_double`]: only an integer can, a parsed float is a double already),
/// with its top-level field.
fn inexact_integer(value: &Value) -> Option<InexactNumber> {
    fn walk(v: &Value) -> Option<String> {
        match v {
            Value::Number(n) => {
                let text = n.to_string();
                (!survives_double(&text)).then_some(text)
            }
            Value::Array(items) => items.iter().find_map(walk),
            Value::Object(map) => map.values().find_map(walk),
            _ => None,
        }
    }
    let map = value.as_object()?;
    map.iter().find_map(|(k, v)| {
        walk(v).map(|text| InexactNumber {
            keys: vec![k.clone()],
            text: text.chars().take(40).collect(),
        })
    })
}

/// A JSON body whose problems are reported late: the extractor only refuses a body
/// over the size limit (413 comes first in the contract's precedence); a body that
/// does not parse or validate is kept as an error that the handler raises with
/// `check()` after its 401/404/403 checks, so 422 never hides them.
pub struct Body<T> {
    parsed: Result<T, ApiError>,
    /// RFC 8785 canonical form of the body as sent (`{}` when absent).
    pub canonical: String,
}

impl<T> Body<T> {
    /// The parsed body, or its 422.
    pub fn check(&self) -> ApiResult<&T> {
        self.parsed.as_ref().map_err(Clone::clone)
    }

    /// The parsed body, or its 422, as a plain value for the domain.
    pub fn into_parsed(self) -> ApiResult<T> {
        self.parsed
    }
}

impl<T: DeserializeOwned + Validate> Body<T> {
    /// A body that did not come over HTTP (an MCP tool's arguments): the same parsing,
    /// validation and canonical form as a request body, its 422 kept for `check()`.
    pub fn from_value(value: Value, limits: &Limits) -> Body<T> {
        match parse_value(value, limits) {
            Ok(JsonBody { value, canonical }) => Body {
                parsed: Ok(value),
                canonical,
            },
            Err(e) => Body {
                parsed: Err(e),
                canonical: String::new(),
            },
        }
    }
}

impl<T: DeserializeOwned + Validate + 'static> FromRequest for Body<T> {
    type Error = ApiError;
    type Future = futures_util::future::LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        let mut payload = payload.take();
        Box::pin(async move {
            let bytes = match read_body(&req, &mut payload).await {
                Ok(b) => b,
                Err(e) if e.status == actix_web::http::StatusCode::PAYLOAD_TOO_LARGE => {
                    return Err(e)
                }
                Err(e) => {
                    return Ok(Body {
                        parsed: Err(e),
                        canonical: String::new(),
                    })
                }
            };
            Ok(
                match parse_body(is_json_content_type(&req), &bytes, &limits_of(&req)) {
                    Ok(JsonBody { value, canonical }) => Body {
                        parsed: Ok(value),
                        canonical,
                    },
                    Err(e) => Body {
                        parsed: Err(e),
                        canonical: String::new(),
                    },
                },
            )
        })
    }
}

/// The body limits of the instance that serves `req` (the defaults' where no state
/// is mounted).
fn limits_of(req: &HttpRequest) -> Limits {
    match req.app_data::<actix_web::web::Data<crate::http::state::AppState>>() {
        Some(state) => crate::domain::leases::limits(&state.config),
        None => crate::domain::leases::limits(&crate::config::Config::defaults()),
    }
}

/// The first value serde's "unknown variant `x`, expected one of `A`, `B`" names.
fn first_variant(inner: &str) -> Option<String> {
    if !inner.starts_with("unknown variant `") {
        return None;
    }
    let expected = &inner[inner.find("expected ")?..];
    between_backticks(expected, "`")
}

fn between_backticks(message: &str, prefix: &str) -> Option<String> {
    let start = message.find(prefix)? + prefix.len();
    let end = message[start..].find('`')? + start;
    Some(message[start..end].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_form_sorts_keys_and_strips_whitespace() {
        let v: Value =
            serde_json::from_str(r#"{ "b": [1, 2.0, "x"], "a": {"d": null, "c": true} }"#).unwrap();
        assert_eq!(
            canonical_json(&v),
            r#"{"a":{"c":true,"d":null},"b":[1,2,"x"]}"#
        );
    }

    #[test]
    fn numbers_follow_ecmascript() {
        for (input, expected) in [
            ("1e21", "1e+21"),
            ("1e20", "100000000000000000000"),
            ("0.000001", "0.000001"),
            ("1e-7", "1e-7"),
            ("-1.5", "-1.5"),
            ("123.456", "123.456"),
            ("4.50", "4.5"),
            ("2e-10", "2e-10"),
            ("1.2345e30", "1.2345e+30"),
        ] {
            let v: Value = serde_json::from_str(input).unwrap();
            assert_eq!(canonical_json(&v), expected, "{input}");
        }
    }

    #[test]
    fn numbers_must_survive_a_double() {
        for ok in [
            "0",
            "-0",
            "0.1",
            "1e300",
            "1.50",
            "1643.0",
            "9007199254740991",
            "-9007199254740991",
            "1E-7",
            "123456789012345",
            "2.5e-308",
            "9007199254740992",
            "10000000000000000",
            "1e16",
            "-123000000000000000000",
            "18446744073709552000",
        ] {
            assert!(survives_double(ok), "{ok}");
        }
        for bad in [
            "9007199254740993",
            "0.12345678901234567890",
            "1e400",
            "1e-400",
            "18446744073709551616",
            "-9007199254740993",
            "9223372036854775807",
        ] {
            assert!(!survives_double(bad), "{bad}");
        }
    }

    #[test]
    fn an_inexact_number_is_found_with_its_keys() {
        let bad = fit_text(br#"{"a": "9007199254740993", "state": {"n": [1, 9007199254740993]}}"#)
            .unwrap_err();
        assert_eq!(bad.keys(), ["state", "n"]);
        assert!(matches!(&bad, Unfit::Number(n) if n.text == "9007199254740993"));
        assert!(bad
            .into_error()
            .body
            .errors
            .is_some_and(|e| e.contains_key("state")));
        let bad =
            fit_text(br#"{"params": {"arguments": [{"x": 1}], "y": {"z": 1e999}}}"#).unwrap_err();
        assert_eq!(bad.keys(), ["params", "y", "z"]);
        assert!(fit_text(br#"{"x": "\"1e400", "y": [0.1, 2]}"#).is_ok());
    }

    #[test]
    fn a_key_given_twice_is_found_with_its_keys() {
        let twice = fit_text(br#"{"a": {"b": 1, "c": [{"d": 1, "d": 2}]}, "e": 3}"#).unwrap_err();
        assert!(matches!(twice, Unfit::Key(_)));
        assert_eq!(twice.keys(), ["a", "c", "d"]);
        // Compared as decoded; the same key in two objects, or as a value, is fine.
        let escaped = fit_text(br#"{"title": 1, "t\u0069tle": 2}"#).unwrap_err();
        assert_eq!(escaped.keys(), ["title"]);
        assert!(fit_text(br#"{"a": {"k": 1}, "b": {"k": "k"}, "k": ["k", {"k": 0}]}"#).is_ok());
    }

    #[test]
    fn strings_escape_minimally_and_keys_sort_by_utf16() {
        let v: Value =
            serde_json::from_str(r#"{"\u20ac":1,"\ud83d\ude00":2,"\u0001":"a\u001fé/"}"#).unwrap();
        // U+0001 < U+20AC < U+D83D (surrogate of the emoji) in UTF-16 order.
        assert_eq!(
            canonical_json(&v),
            "{\"\\u0001\":\"a\\u001fé/\",\"€\":1,\"😀\":2}"
        );
    }
}
