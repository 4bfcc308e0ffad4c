//! A JSON body extractor whose every refusal is our JSON error: axum's own answers in plain text and
//! insists on a `Content-Type`, which curl users forget.

use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use bytes::Bytes;
use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::error::ApiError;

/// The request body parsed as `T`: 413 when over the size limit, 400 when not JSON or not of `T`'s shape.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::too_large("request body is larger than the limit")
            } else {
                ApiError::invalid(format!("cannot read the request body: {}", e.body_text()))
            }
        })?;
        if bytes.is_empty() {
            return Err(ApiError::invalid("a JSON body is required"));
        }
        // serde fills a struct from an array too; every request body of ours is an object.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::invalid("the request body must be a JSON object"));
        }
        // The path names the field in nested bodies (`retry.max_attempts`), which serde's message omits.
        let de = &mut serde_json::Deserializer::from_slice(&bytes);
        let value = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            if path == "." || path.is_empty() {
                ApiError::invalid(format!("invalid request body: {}", e.inner()))
            } else {
                ApiError::invalid(format!("invalid request body at `{path}`: {}", e.inner()))
            }
        })?;
        // A job body is kept as raw JSON text, which serde_json reads past without its nesting limit of
        // 128; a body nested deeper would be stored and break every client that parses it. That takes
        // more than 128 opening and as many closing brackets, so short bodies, and bodies with fewer
        // opening brackets, skip the second reading.
        if bytes.len() > 2 * MAX_NESTING
            && bytes
                .iter()
                .fold(0usize, |n, &b| n + usize::from(b == b'[' || b == b'{'))
                > MAX_NESTING
        {
            serde_json::from_slice::<Nested>(&bytes)
                .map_err(|e| ApiError::invalid(format!("invalid request body: {e}")))?;
        }
        Ok(JsonBody(value))
    }
}

/// serde_json's nesting limit.
const MAX_NESTING: usize = 128;

/// Any JSON value, read only to be walked: each array and object through serde_json's `deserialize_any`,
/// which counts the nesting and fails past 128. `IgnoredAny` and `RawValue` skip values without counting.
struct Nested;

impl<'de> Deserialize<'de> for Nested {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NestedVisitor)
    }
}

struct NestedVisitor;

impl<'de> Visitor<'de> for NestedVisitor {
    type Value = Nested;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Nested, E> {
        Ok(Nested)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Nested, E> {
        Ok(Nested)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Nested, E> {
        Ok(Nested)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Nested, E> {
        Ok(Nested)
    }

    fn visit_str<E>(self, _: &str) -> Result<Nested, E> {
        Ok(Nested)
    }

    fn visit_unit<E>(self) -> Result<Nested, E> {
        Ok(Nested)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Nested, A::Error> {
        while seq.next_element::<Nested>()?.is_some() {}
        Ok(Nested)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Nested, A::Error> {
        while map.next_entry::<IgnoredAny, Nested>()?.is_some() {}
        Ok(Nested)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_past_128_is_refused_and_below_it_accepted() {
        let nest = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        assert!(serde_json::from_str::<Nested>(&nest(100)).is_ok());
        assert!(serde_json::from_str::<Nested>(&format!(r#"{{"a":{},"b":"x","c":null}}"#, nest(120))).is_ok());
        let err = serde_json::from_str::<Nested>(&nest(200)).err().unwrap();
        assert!(err.to_string().contains("recursion limit"), "{err}");
        let deep_objects = format!("{}1{}", r#"{"a":"#.repeat(200), "}".repeat(200));
        assert!(serde_json::from_str::<Nested>(&deep_objects).is_err());
    }
}
