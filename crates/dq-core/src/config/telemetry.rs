//! `[telemetry]`: where every binary exports its spans (OpenTelemetry, OTLP over HTTP).

use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid};

/// Span export. Read by every binary at start; a change takes a restart.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetrySettings {
    /// An OTLP/HTTP receiver (an OpenTelemetry Collector, Jaeger, Tempo …), e.g.
    /// `http://127.0.0.1:4318`: spans go to its `/v1/traces` in protobuf. None (the default): no span
    /// is made or sent, at no cost.
    pub otlp_endpoint: Option<String>,
}

impl TelemetrySettings {
    /// Checks that the endpoint is an http(s) URL.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if let Some(endpoint) = &self.otlp_endpoint {
            traces_url(endpoint).map_err(|e| invalid("telemetry.otlp_endpoint", e))?;
        }
        Ok(())
    }
}

/// The URL spans are POSTed to: `endpoint` itself when its path already ends in `/v1/traces`, else
/// `/v1/traces` below it (as `OTEL_EXPORTER_OTLP_ENDPOINT` is read), so both the collector's address and
/// the full URL work.
pub fn traces_url(endpoint: &str) -> Result<String, String> {
    let url = url::Url::parse(endpoint).map_err(|e| format!("`{endpoint}` is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(format!("`{endpoint}` is not an http(s) URL"));
    }
    if url.path().ends_with("/v1/traces") {
        return Ok(url.to_string());
    }
    let mut url = url;
    let path = format!("{}/v1/traces", url.path().trim_end_matches('/'));
    url.set_path(&path);
    Ok(url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_added_unless_given() {
        for (given, url) in [
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
            ("http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/traces"),
            ("https://otel.example/v1/traces", "https://otel.example/v1/traces"),
            ("https://gw.example/otlp/", "https://gw.example/otlp/v1/traces"),
        ] {
            assert_eq!(traces_url(given).unwrap(), url, "{given}");
        }
        for bad in ["127.0.0.1:4318", "grpc://x:4317", "http://", "not a url"] {
            assert!(traces_url(bad).is_err(), "{bad}");
        }
    }
}
